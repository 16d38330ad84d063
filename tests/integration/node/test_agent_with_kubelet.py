"""The node agent end to end: an emulated kubelet admits pods the extender bound, the test API
server holds them; registration, restarts, health, Allocate, and the PodResources check."""

from __future__ import annotations

import os
import time

import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.core_v1 import Node as NodeRes

from gpuslice import codec, handoff
from gpuslice.kube.client import dict_view
from gpuslice.node.agent import Agent
from gpuslice.node.nvml import FakeBackend
from gpuslice.shim import Region
from kubelet.emulator import AdmissionError, env_of, mounts_of
from kubelet.nodeharness import create, wait_for
from kubelet.pods import NODE, container, gpu, pod

GPU_RESOURCES = {"nvidia.com/gpu", "volcano.sh/vgpu-number", "tencent.com/vcuda-core"}


async def test_registers_every_device_resource_with_replicas_per_gpu(node):
    regs = {(v, r) for v, _, r in node.kubelet.registrations}
    assert regs == {("v1beta1", r) for r in GPU_RESOURCES}
    assert all(not e.startswith("/") for _, e, _ in node.kubelet.registrations), \
        "the kubelet dials the endpoint by file name in its own directory"
    devs = await node.kubelet.wait_devices("nvidia.com/gpu")
    assert sorted(devs) == sorted(f"{gpu(i)}::{n}" for i in range(2) for n in range(4))
    assert len(await node.kubelet.wait_devices("tencent.com/vcuda-core")) == 200


async def test_publishes_the_inventory_on_its_node(node):
    async def published():
        n = await node.client.get(dict_view(NodeRes), NODE)
        return n["metadata"].get("annotations", {}).get(codec.INVENTORY_ANNOTATION)

    await wait_for(published, "inventory annotation")
    inv = codec.decode_inventory(await published(), node=NODE)
    assert [g.uuid for g in inv.gpus] == [gpu(0), gpu(1)] and inv.gpus[0].split_count == 4


async def test_a_kubelet_restart_makes_the_agent_register_again(node):
    before = len(node.kubelet.registrations)
    await node.kubelet.restart()
    await wait_for(lambda: len(node.kubelet.registrations) >= before + 3, "re-registration")
    devs = await node.kubelet.wait_devices("nvidia.com/gpu")
    assert len(devs) == 8, "the new kubelet gets the full list on the new stream"


async def test_an_xid_marks_the_gpus_replicas_unhealthy_and_recovery_heals_them(node):
    await node.kubelet.wait_devices("nvidia.com/gpu")
    seen = node.kubelet.endpoints["nvidia.com/gpu"].updates
    node.backend.inject_xid(gpu(1), 79)

    def health(h):
        devs = node.kubelet.endpoints["nvidia.com/gpu"].devices
        return all(devs[f"{gpu(1)}::{n}"] == h for n in range(4))

    await wait_for(lambda: health("Unhealthy"), "GPU 1 unhealthy on the open stream")
    assert node.kubelet.endpoints["nvidia.com/gpu"].updates > seen
    assert all(v == "Healthy" for k, v in node.kubelet.endpoints["nvidia.com/gpu"].devices.items()
               if k.startswith(gpu(0)))
    await wait_for(lambda: health("Healthy"), "GPU 1 healthy after xidRecoverySeconds")


async def test_interleaved_pods_each_get_their_own_assignment_and_are_marked_allocated(node):
    now = time.time()
    a = await create(node.client, pod("a", [container("main", quantity=1, mem=1000)],
                                      {"main": [gpu(0)]}, at=now - 3))
    b = await create(node.client, pod("b", [container("x", quantity=2, mem=2000),
                                            container("y", quantity=1, mem=3000)],
                                      {"x": [gpu(1), gpu(0)], "y": [gpu(1)]}, at=now - 2))
    c = await create(node.client, pod(
        "c", [container("main", "tencent.com/vcuda-core", 50, mem=512, cores=50)],
        {"main": [gpu(1)]}, at=now - 1, cores={"main": 50}))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    await node.kubelet.wait_devices("tencent.com/vcuda-core")
    # the kubelet admits b first (its binding arrived first), then c, then a
    got_b = await node.kubelet.admit(b)
    got_c = await node.kubelet.admit(c)
    got_a = await node.kubelet.admit(a)
    assert env_of(got_b["x"])["GPUSLICE_DEVICE_UUIDS"] == f"{gpu(1)},{gpu(0)}"
    assert env_of(got_b["x"])["CUDA_DEVICE_MEMORY_LIMIT_1"] == "2000m"
    assert env_of(got_b["y"])["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert env_of(got_c["main"])["CUDA_DEVICE_SM_LIMIT"] == "50"
    assert env_of(got_a["main"])["NVIDIA_VISIBLE_DEVICES"] == gpu(0)
    region = node.state / "regions" / a["metadata"]["uid"] / "main"
    assert ("/var/run/gpuslice", str(region), False) in mounts_of(got_a["main"])
    assert region.is_dir() and (region.stat().st_mode & 0o7777) == 0o755
    # and the node's board, which every container's library writes (root's, 1777 like /tmp)
    board = node.state / "board"
    assert ("/var/run/gpuslice-board", str(board), False) in mounts_of(got_a["main"])
    assert ("/var/run/gpuslice-board", str(board), False) in mounts_of(got_c["main"])
    assert board.is_dir() and (board.stat().st_mode & 0o7777) == 0o1777
    assert board.stat().st_uid == os.geteuid(), "the agent owns it: no tenant can chmod it"
    # Allocate wrote each container's region with its assignment's limits (they win over env)
    x = Region.read(node.state / "regions" / b["metadata"]["uid"] / "x" / "region")
    assert [(d.uuid, d.limit) for d in x.devices if d.uuid] == [(gpu(1), 2000 << 20),
                                                                 (gpu(0), 2000 << 20)]
    assert Region.read(node.state / "regions" / c["metadata"]["uid"] / "main" / "region"
                       ).sm_limit == 50

    async def allocated(name, want):
        p = await node.client.get(dict_view(Pod), name, namespace="default")
        return p["metadata"]["annotations"].get(handoff.ALLOCATED) == want

    for name, want in (("a", "main"), ("b", "x,y"), ("c", "main")):
        await wait_for(lambda n=name, w=want: allocated(n, w), f"{name} allocated={want}")
    await wait_for(lambda: node.agent.cluster.queued == 0, "no write left in the queue")


async def test_an_allocate_for_no_pod_in_flight_is_refused_with_what_to_check(node):
    await node.kubelet.wait_devices("nvidia.com/gpu")
    with pytest.raises(AdmissionError, match="no pod in flight on this node asks for"):
        await node.kubelet.allocate("nvidia.com/gpu", 1)


async def test_a_tenant_annotation_claiming_an_exclusive_gpu_is_refused(node):
    now = time.time()
    owner = await create(node.client, pod("owner", [container("main", cores=100)],
                                          {"main": [gpu(0)]}, at=now - 5))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    await node.kubelet.admit(owner)
    thief = await create(node.client, pod("thief", [container("main", cores=10)],
                                          {"main": [gpu(0)]}, at=now - 1))
    with pytest.raises(AdmissionError, match="held exclusively"):
        await node.kubelet.admit(thief)


async def test_serves_the_kubelet_while_the_api_server_is_down_and_catches_up(node):
    faults = node.api.need_faults()
    now = time.time()
    p = await create(node.client, pod("late", [container("main")], {"main": [gpu(1)]},
                                      at=now - 1))
    await node.agent.cluster.refresh()
    await node.kubelet.wait_devices("nvidia.com/gpu")
    faults.fail_next(50, code=503, resource="pods")
    got = await node.kubelet.admit(p)
    assert env_of(got["main"])["NVIDIA_VISIBLE_DEVICES"] == gpu(1)
    await wait_for(lambda: not node.agent.cluster.reachable, "the agent sees the outage")
    assert node.agent.cluster.queued == 1, "the allocated mark waits in the queue"

    async def allocated():
        try:
            got = await node.client.get(dict_view(Pod), "late", namespace="default")
        except ApiError:  # the test's own reads meet the same outage
            return False
        return got["metadata"]["annotations"].get(handoff.ALLOCATED) == "main"

    await wait_for(allocated, "allocated written once the API server answers", timeout=40)


async def test_interchangeable_pods_the_kubelet_swapped_get_their_assignments_swapped(node):
    now = time.time()
    one = await create(node.client, pod("one", [container("main")], {"main": [gpu(0)]},
                                        at=now - 2))
    two = await create(node.client, pod("two", [container("main")], {"main": [gpu(1)]},
                                        at=now - 1))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    # the kubelet admits "two" first: the agent answers it from "one" (oldest, same shape)
    got_two = await node.kubelet.admit(two)
    await node.kubelet.admit(one)
    assert env_of(got_two["main"])["NVIDIA_VISIBLE_DEVICES"] == gpu(0)

    await wait_for(lambda: node.agent.metrics.swaps._value.get() == 1, "one swap recorded")
    for name, want in (("one", gpu(1)), ("two", gpu(0))):
        p = await node.client.get(dict_view(Pod), name, namespace="default")
        a = codec.decode_assignment(p["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION])
        assert a.containers[0].slices[0].uuid == want, f"{name} names the GPU it really got"
    assert node.agent.metrics.mismatches._value.get() == 0, "a swap is no mismatch"


async def test_a_container_on_other_gpus_than_its_assignment_is_reported_once(node):
    now = time.time()
    p = await create(node.client, pod("edited", [container("main")], {"main": [gpu(0)]},
                                      at=now - 1))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    await node.kubelet.admit(p)
    # someone rewrites the assignment after the container started (it still runs on GPU 0)
    moved = pod("edited", [container("main")], {"main": [gpu(1)]}, at=now - 1,
                allocated="main")["metadata"]["annotations"]
    await node.client.patch(dict_view(Pod), "edited", {"metadata": {"annotations": moved}},
                            namespace="default")
    await node.agent.cluster.refresh()
    await wait_for(lambda: node.agent.metrics.mismatches._value.get() == 1, "mismatch counted")
    await node.agent.cluster.events.flush()  # events are written in the background
    events = [e async for e in node.client.list(dict_view(Event), namespace="default")]
    assert any(e["reason"] == "AllocateMismatch" and gpu(0) in e["message"] for e in events)
    await node.agent._verify_once()
    assert node.agent.metrics.mismatches._value.get() == 1, "reported once per pod"


async def test_a_pod_newer_than_the_agents_pod_list_still_gets_its_preferred_gpus(node):
    now = time.time()
    await create(node.client, pod("old", [container("main")], {"main": [gpu(0)]}, at=now - 2))
    await node.agent.cluster.refresh()  # the store knows "old" only
    new = await create(node.client, pod("new", [container("main", quantity=2)],
                                        {"main": [gpu(1), gpu(0)]}, at=now - 1))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    got = await node.kubelet.admit(new)  # without a fresh list: kubelet order, 2 IDs on GPU 0
    assert env_of(got["main"])["GPUSLICE_DEVICE_UUIDS"] == f"{gpu(1)},{gpu(0)}"


async def test_the_pod_store_follows_the_watch_without_listing_again(node):
    await wait_for(node.agent.cluster.informer.synced.is_set, "informer synced")
    lists = node.agent.cluster.last_list
    p = await create(node.client, pod("watched", [container("main")], {"main": [gpu(0)]},
                                      at=time.time()))
    uid = p["metadata"]["uid"]
    await wait_for(lambda: any(x["metadata"]["uid"] == uid for x in node.agent.cluster.pods()),
                   "the new pod in the store")
    await node.client.delete(dict_view(Pod), "watched", namespace="default", grace_period=0)
    await wait_for(lambda: all(x["metadata"]["uid"] != uid for x in node.agent.cluster.pods()),
                   "the deleted pod gone from the store")
    assert node.agent.cluster.last_list == lists, "no list needed: the watch delivered both"


async def test_a_process_without_the_library_on_a_shared_gpu_is_a_limit_violation(node):
    p = await create(node.client, pod("shared", [container("main")], {"main": [gpu(0)]},
                                      at=time.time() - 1))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    await node.kubelet.admit(p)
    node.backend.set_processes(gpu(0), {4_000_000: 512 << 20})  # in no region slot
    await node.agent._watchdog_once()
    assert node.agent.metrics.violations.labels("unmanaged")._value.get() == 1
    await node.agent.cluster.events.flush()
    events = [e async for e in node.client.list(dict_view(Event), namespace="*")]
    hit = [e for e in events if e["reason"] == "LimitViolation"]
    assert hit and hit[0]["involvedObject"]["kind"] == "Node", \
        "a process of no pod is reported on the node"
    assert "without libgpuslice" in hit[0]["message"]


async def test_an_agent_restarted_before_its_allocated_mark_landed_never_reanswers(node):
    faults = node.api.need_faults()
    p = await create(node.client, pod("two-step", [container("a"), container("b", mem=512)],
                                      {"a": [gpu(0)], "b": [gpu(0)]}, at=time.time() - 1))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    faults.fail_next(10_000, code=503, method="PATCH", resource="pods")
    _, resp = await node.kubelet.allocate("nvidia.com/gpu", 1)  # container "a" only
    assert env_of(resp)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"
    node.agent.stop()  # the mark never reached the pod
    again = Agent(node.agent.cfg, FakeBackend.with_count(2), node.client,
                  library=node.state.parent / "libgpuslice.so")
    await again.cluster.refresh()
    got = await again.allocate("nvidia.com/gpu", [f"{gpu(0)}::1"])
    assert (got.pod_uid, got.container) == (p["metadata"]["uid"], "b"), \
        "the journal says container a was answered already"


async def test_pods_of_one_gang_share_its_directory_which_goes_when_they_are_gone(node):
    """gpuslice.io/gang: each container under a compute limit is handed `<stateDir>/gangs/
    <namespace>/<gang>`, made before the answer; the watchdog's sweep removes it once no pod of
    the node names the gang and the grace has passed."""
    now = time.time()
    workers = []
    for i in range(2):
        p = pod(f"worker-{i}", [container("main", cores=30)], {"main": [gpu(i)]}, at=now - 2 + i)
        p["metadata"]["annotations"]["gpuslice.io/gang"] = "train"
        workers.append(await create(node.client, p))
    await node.kubelet.wait_devices("nvidia.com/gpu")
    gang = node.state / "gangs" / "default" / "train"
    for w in workers:
        got = (await node.kubelet.admit(w))["main"]
        assert env_of(got)["GPUSLICE_GANG_DIR"] == "/var/run/gpuslice-gang"
        assert ("/var/run/gpuslice-gang", str(gang), False) in mounts_of(got)
    assert gang.is_dir() and (gang.stat().st_mode & 0o7777) == 0o1777
    assert (gang.parent.stat().st_mode & 0o7777) == 0o755
    os.utime(gang, (now - 3600, now - 3600))
    await node.agent._watchdog_once()
    assert gang.is_dir(), "its pods still run"
    for w in workers:
        await node.client.delete(Pod, w["metadata"]["name"], namespace="default")
    # being deleted (the kubelet has yet to stop them) counts as gone, as ended pods do
    await wait_for(lambda: not any(p["metadata"]["name"].startswith("worker-") and
                                   not p["metadata"].get("deletionTimestamp")
                                   for p in node.agent.cluster.pods()), "the pods deleted")
    await node.agent._watchdog_once()
    assert not gang.exists() and not gang.parent.exists()

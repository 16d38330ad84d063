"""A 2-GPU pod from the node's NVML view to the kubelet's Allocate answer under the `topology`
policy (issue 14 item 3, without GPUs): the fake NVML backend's NUMA nodes and NVLink peers ->
the agent's inventory annotation -> the allocator's choice -> GetPreferredAllocation and the
agent's Allocate answer, whose per-device limits follow the container's device order
(GPUSLICE_DEVICE_UUIDS, CUDA_DEVICE_MEMORY_LIMIT_<i> and the region alike). The same on a real
multi-GPU machine: benchmarks/multi_gpu/inventory.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuslice import codec, dialects, handoff, model
from gpuslice.allocator import ClusterState, parse_policy
from gpuslice.node import allocate as alloc
from gpuslice.node.inventory import node_gpus
from gpuslice.node.nvml import FakeBackend
from gpuslice.node.settings import load
from kubelet.pods import NODE

NOW = 1_800_000_000.0
SPLIT = 4
LAYOUT = alloc.Layout(library_host="/var/lib/gpuslice/lib/libgpuslice.so",
                      preload_host="/var/lib/gpuslice/lib/ld.so.preload",
                      regions_host="/var/lib/gpuslice/regions",
                      board_host="/var/lib/gpuslice/board")


def _hgx_quarter() -> list[dict[str, Any]]:
    """Four GPUs: 0 and 1 on NUMA 0 without a link between them, 2 and 3 on NUMA 1 linked to
    each other (listed on one side only, as a partial NVML answer can leave it), 1-2 linked
    across the NUMA nodes. Binpack alone would take 0 and 1."""
    return [{"uuid": "GPU-0", "memoryMiB": 81559, "numaNode": 0},
            {"uuid": "GPU-1", "memoryMiB": 81559, "numaNode": 0, "nvlinkPeers": ["GPU-2"]},
            {"uuid": "GPU-2", "memoryMiB": 81559, "numaNode": 1, "nvlinkPeers": ["GPU-3"]},
            {"uuid": "GPU-3", "memoryMiB": 81559, "numaNode": 1}]


def _backend(tmp_path: Path, gpus: list[dict[str, Any]]) -> FakeBackend:
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump({"gpus": gpus}))
    return FakeBackend.from_file(str(path))


def _cluster(backend: FakeBackend) -> tuple[ClusterState, model.NodeInventory]:
    """The scheduler's view of the node: what the agent publishes, decoded as the extender does."""
    cfg = load(None, flags={"nodeName": NODE, "splitCount": SPLIT}, environ={})
    published = codec.encode_inventory(model.NodeInventory(
        node=NODE, gpus=node_gpus(backend.devices(), cfg, {})))
    inv = codec.decode_inventory(published, node=NODE)
    state = ClusterState()
    state.add_node(inv)
    return state, inv


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}",
                         "labels": {handoff.MANAGED_LABEL: "true"}, "annotations": {},
                         "creationTimestamp": "2026-11-24T00:00:00Z"},
            "spec": {"schedulerName": "gpuslice-scheduler",
                     "containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


def _bound(pod: dict[str, Any], assignment: model.PodAssignment, at: float) -> dict[str, Any]:
    """The pod as the extender's bind leaves it: the assignment annotation, bound-at, nodeName."""
    pod["metadata"]["annotations"].update({
        codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(assignment),
        handoff.BOUND_AT: handoff.format_time(at)})
    pod["spec"]["nodeName"] = NODE
    return pod


def _schedule(state: ClusterState, pod: dict[str, Any], policy: str) -> model.PodAssignment:
    placed = state.schedule(dialects.parse_pod(pod), parse_policy(policy))
    assert placed is not None and placed.node == NODE, "the node has room for the pod"
    return placed.assignment


def _kubelet_allocate(pods: list[dict[str, Any]], inv: model.NodeInventory,
                      quantity: int) -> alloc.Answer:
    """What the kubelet does for one container: ask GetPreferredAllocation among every free
    replica ID, then Allocate with the IDs it got."""
    flights = alloc.in_flight(pods, NODE, NOW, 120)
    available = [f"{g.uuid}::{n}" for g in inv.gpus for n in range(SPLIT)]
    ids = alloc.preferred(flights, "nvidia.com/gpu", available, [], quantity)
    return alloc.answer(flights, alloc.assigned_pods(pods, NODE), {g.uuid: g for g in inv.gpus},
                        "nvidia.com/gpu", ids, LAYOUT)


def _limits_in_order(a: alloc.Answer) -> list[tuple[str, str]]:
    """(GPU, env limit) by container device index, as the library reads them."""
    uuids = a.envs["GPUSLICE_DEVICE_UUIDS"].split(",")
    return [(u, a.envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"]) for i, u in enumerate(uuids)]


def test_the_inventory_carries_numa_nodes_and_nvlink_peers_from_nvml(tmp_path: Path) -> None:
    _, inv = _cluster(_backend(tmp_path, _hgx_quarter()))
    assert [(g.uuid, g.numa_node, g.nvlink_peers) for g in inv.gpus] == [
        ("GPU-0", 0, ()), ("GPU-1", 0, ("GPU-2",)), ("GPU-2", 1, ("GPU-3",)), ("GPU-3", 1, ())], (
        "the annotation the scheduler reads keeps NVML's NUMA node and links")


@pytest.mark.parametrize(("policy", "pair"), [
    pytest.param("topology", ("GPU-2", "GPU-3"), id="topology: one NUMA node and NVLink"),
    pytest.param("binpack", ("GPU-0", "GPU-1"), id="binpack: the first two, unlinked"),
])
def test_a_two_gpu_pod_gets_the_policys_pair_and_its_limits_on_those_gpus(
        tmp_path: Path, policy: str, pair: tuple[str, str]) -> None:
    state, inv = _cluster(_backend(tmp_path, _hgx_quarter()))
    pod = _pod("trainer", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "20000",
                           "nvidia.com/gpucores": "30"})
    assignment = _schedule(state, pod, policy)
    a = _kubelet_allocate([_bound(pod, assignment, NOW - 1)], inv, 2)
    assert a.gpus == pair, f"{policy} places the pod on {pair}"
    assert a.envs["NVIDIA_VISIBLE_DEVICES"] == a.envs["GPUSLICE_DEVICE_UUIDS"] == ",".join(pair)
    assert _limits_in_order(a) == [(pair[0], "20000m"), (pair[1], "20000m")]
    assert a.region.device_uuids == pair and a.region.limits == (20000 << 20,) * 2
    assert a.region.sm_limit == 30


def test_per_device_limits_follow_the_containers_device_order(tmp_path: Path) -> None:
    # GPUs of two sizes, NUMA node unknown (a VM: NVML says Not Supported); the NVLinked pair is
    # NVML's second and third. The container's devices are listed by NVML index (the order
    # CUDA numbers them inside the container) and GPUSLICE_DEVICE_UUIDS pins the library's
    # index i to the i-th of them whatever order a process sees them in.
    backend = _backend(tmp_path, [
        {"uuid": "GPU-x", "memoryMiB": 81559},
        {"uuid": "GPU-a", "memoryMiB": 143771, "nvlinkPeers": ["GPU-b"]},
        {"uuid": "GPU-b", "memoryMiB": 81559, "nvlinkPeers": ["GPU-a"]}])
    state, inv = _cluster(backend)
    pod = _pod("trainer", {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"})
    a = _kubelet_allocate([_bound(pod, _schedule(state, pod, "topology"), NOW - 1)], inv, 2)
    assert _limits_in_order(a) == [("GPU-a", f"{143771 // 2}m"), ("GPU-b", f"{81559 // 2}m")], (
        "index i of the limits is the i-th GPU of the container's list, each with half of its "
        "own memory")
    assert a.region.device_uuids == ("GPU-a", "GPU-b")
    assert a.region.limits == ((143771 // 2) << 20, (81559 // 2) << 20), (
        "the region the agent writes holds the same limits in the same order as the env")


def test_the_kubelets_preferred_devices_lie_one_on_each_assigned_gpu(tmp_path: Path) -> None:
    state, inv = _cluster(_backend(tmp_path, _hgx_quarter()))
    pod = _pod("trainer", {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"})
    pods = [_bound(pod, _schedule(state, pod, "topology"), NOW - 1)]
    available = [f"{g.uuid}::{n}" for g in inv.gpus for n in range(SPLIT)]
    ids = alloc.preferred(alloc.in_flight(pods, NODE, NOW, 120), "nvidia.com/gpu", available,
                          [], 2)
    assert sorted(alloc.device_gpu(d) for d in ids) == ["GPU-2", "GPU-3"], ids

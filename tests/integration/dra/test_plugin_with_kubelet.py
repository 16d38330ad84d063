"""The node agent's DRA driver end to end on one node: registered through plugins_registry with
the kubelet emulator (tests/kubelet/dra.py), claims allocated as kube-scheduler leaves them on
the test API server, prepared and unprepared over gRPC: CDI spec, region, status.devices;
idempotent across an agent restart while the API server is away; sockets re-served after a
kubelet wipes them; a claim on a GPU the node does not have is a clear per-claim error; the
gang directory of the claim's pods (`gpuslice.io/gang`), kept while a pod or claim needs it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import msgspec
import pytest

from gpuslice.dra import DRIVER, cdi
from gpuslice.dra.proto import pluginregistration_pb2 as reg
from gpuslice.dra.proto import pluginregistration_pb2_grpc as reg_grpc
from gpuslice.node.agent import Agent, remove_dra_slices
from gpuslice.node.nvml import FakeBackend
from gpuslice.node.settings import load
from gpuslice.shim import Region
from kubeapi.raw import Raw, node_body
from kubeapi.waiting import wait_for
from kubelet.dra import DraKubelet
from kubelet.emulator import short_dir
from kubelet.nodeharness import agent_paths, started_agent
from kubelet.pods import NODE

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


@dataclass
class DraNode:
    agent: Agent
    kubelet: DraKubelet
    backend: FakeBackend
    base: Path
    cfg: Any


def config(base: Path) -> Any:
    return load(None, flags={
        "nodeName": NODE, **agent_paths(base), "healthIntervalSeconds": 0.05, "gpuPath": "dra",
        "dra": {"enabled": True, "pluginDir": str(base / "plugins" / DRIVER),
                "registryDir": str(base / "registry"), "cdiDir": str(base / "cdi")}}, environ={})


@contextlib.asynccontextmanager
async def dra_node(kube_api: Any, base: Path | None = None) -> AsyncIterator[DraNode]:
    """An agent with 2 fake GPUs (16 GiB each) and DRA on, registered with a DRA kubelet."""
    base = base or Path(short_dir())
    cfg = config(base)
    code, _ = await Raw(kube_api).call("POST", "/api/v1/nodes", node_body(NODE))
    assert code in (201, 409)
    kubelet = DraKubelet(base / "registry")
    await kubelet.start()
    try:
        async with started_agent(cfg, kube_api.async_client(), base) as (agent, _, backend):
            assert agent.dra_link is not None
            agent.dra_link.poll_s = 0.05
            await kubelet.wait_registered(DRIVER)
            yield DraNode(agent, kubelet, backend, base, cfg)
    finally:
        await kubelet.stop()


async def allocated(raw: Any, name: str, *results: dict[str, Any],
                    pods: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """A claim created, then allocated on NODE and reserved for its pods ((name, uid); none: a
    pod that does not exist), as the scheduler does."""
    code, obj = await raw.call("POST", CLAIMS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DRIVER, "capacity": {"requests": {"memory": "4Gi",
                                                                 "cores": "30"}}}}]}}})
    assert code == 201, obj
    obj["status"] = {"allocation": {"devices": {"results": [
        {"driver": DRIVER, "pool": NODE, "request": "gpu", **r} for r in results]}},
        "reservedFor": [{"resource": "pods", "name": n, "uid": u}
                        for n, u in pods or [(f"{name}-pod", str(uuid.uuid4()))]]}
    code, obj = await raw.call("PUT", f"{CLAIMS}/{name}/status", obj)
    assert code == 200, obj
    return obj


async def pod_of(raw: Any, name: str, claim: str, gang: str) -> tuple[str, str]:
    """A pod on NODE that uses claim `claim` and names `gang`; its (name, uid)."""
    code, obj = await raw.call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"gpuslice.io/gang": gang}},
        "spec": {"nodeName": NODE,
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                 "containers": [{"name": "main", "image": "registry.invalid/app",
                                 "resources": {"claims": [{"name": "gpu"}]}}]}})
    assert code == 201, obj
    return name, obj["metadata"]["uid"]


def share(device: str, memory: str = "4Gi", cores: str = "30") -> dict[str, Any]:
    return {"device": device, "shareID": str(uuid.uuid4()),
            "consumedCapacity": {"memory": memory, "cores": cores}}


async def test_the_plugin_registers_through_plugins_registry_with_the_contracts_info(kube_api):
    async with dra_node(kube_api) as n:
        (info,) = n.kubelet.registrations
        assert (info.type, info.name, list(info.supported_versions)) == (
            "DRAPlugin", DRIVER, ["v1.DRAPlugin"])
        assert info.endpoint == str(n.base / "plugins" / DRIVER / "dra.sock")
        await wait_for(lambda: n.agent.ready() is None, "agent ready")


async def test_a_share_is_prepared_with_its_consumed_capacity_and_unprepared(kube_api, raw):
    async with dra_node(kube_api) as n:
        s = share("gpu-1", "4Gi", "30")
        claim = await allocated(raw, "train", s)
        uid = claim["metadata"]["uid"]
        got = (await n.kubelet.prepare(DRIVER, claim))[uid]
        assert got.error == ""
        (d,) = got.devices
        assert (d.device_name, d.pool_name, d.share_id, list(d.cdi_device_ids)) == (
            "gpu-1", NODE, s["shareID"], [f"gpuslice.io/claim={uid}"])
        spec = json.loads(cdi.path(n.base / "cdi", uid).read_text())
        env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        gpu1 = n.backend.devices()[1].uuid
        assert (env["GPUSLICE_DEVICE_UUIDS"], env["CUDA_DEVICE_MEMORY_LIMIT_0"],
                env["CUDA_DEVICE_SM_LIMIT"]) == (gpu1, "4096m", "30")
        region_dir = n.base / "state" / "dra" / "regions" / uid
        r = Region.read(region_dir / "region", check_alive=False)
        assert {u: x.limit for u, x in r.by_uuid().items()} == {gpu1: 4 << 30}
        assert "/dev/nvidia1" in [x["path"] for x in spec["devices"][0]["containerEdits"][
            "deviceNodes"]]

        async def status_devices() -> list[Any]:
            _, obj = await raw.call("GET", f"{CLAIMS}/train")
            return (obj.get("status") or {}).get("devices") or []

        async def reported() -> bool:
            return bool(await status_devices())

        await wait_for(reported, "status.devices written")
        (entry,) = await status_devices()
        assert (entry["driver"], entry["pool"], entry["device"], entry["shareID"]) == (
            DRIVER, NODE, "gpu-1", s["shareID"])

        assert (await n.kubelet.unprepare(DRIVER, claim))[uid].error == ""
        assert not region_dir.exists()
        assert not cdi.path(n.base / "cdi", uid).exists()
        assert n.agent.dra is not None and n.agent.dra.prepared() == {}


async def test_pods_of_one_gang_get_its_directory_which_stays_while_a_pod_or_claim_needs_it(
        kube_api, raw):
    """Two pods of gang `train`, a claim each: both CDI specs mount `<stateDir>/gangs/default/
    train`, the node agent's one gangs root for both paths. The watchdog keeps it while a pod
    of the node names the gang and while a claim that mounts it is prepared, then removes it."""
    async with dra_node(kube_api) as n:
        assert n.agent.dra is not None
        claims = []
        for i in range(2):
            who = await pod_of(raw, f"worker-{i}", f"w{i}", "train")
            claims.append(await allocated(raw, f"w{i}", share(f"gpu-{i}"), pods=[who]))
        gang = n.base / "state/gangs/default/train"
        assert str(gang) == f"{n.agent.layout.gangs_host}/default/train"
        for c in claims:
            uid = c["metadata"]["uid"]
            assert (await n.kubelet.prepare(DRIVER, c))[uid].error == ""
            edits = json.loads(cdi.path(n.base / "cdi", uid).read_text())["devices"][0][
                "containerEdits"]
            assert "GPUSLICE_GANG_DIR=/var/run/gpuslice-gang" in edits["env"]
            assert {"containerPath": "/var/run/gpuslice-gang", "hostPath": str(gang),
                    "options": ["rw", "nosuid", "nodev", "rbind"]} in edits["mounts"]
        assert gang.is_dir() and (gang.stat().st_mode & 0o7777) == 0o1777
        old = time.time() - 3600
        os.utime(gang, (old, old))  # past watchdog.regionGraceSeconds
        await n.agent._watchdog_once()
        assert gang.is_dir(), "its pods run"
        for i in range(2):
            assert (await raw.call("DELETE", f"/api/v1/namespaces/default/pods/worker-{i}"))[
                0] == 200
        # being deleted (no kubelet here confirms it) counts as gone, as ended pods do
        await wait_for(lambda: not any(
            p["metadata"]["name"].startswith("worker-") and
            not p["metadata"].get("deletionTimestamp") for p in n.agent.cluster.pods()),
            "the pods deleted")
        await n.agent._watchdog_once()
        assert gang.is_dir(), "the claims that mount it are prepared"
        for c in claims:
            assert (await n.kubelet.unprepare(DRIVER, c))[c["metadata"]["uid"]].error == ""
        await n.agent._watchdog_once()
        assert not gang.exists() and not gang.parent.exists()


async def test_pods_of_a_shared_claim_that_name_different_gangs_are_refused_with_the_rule(
        kube_api, raw):
    async with dra_node(kube_api) as n:
        pods = [await pod_of(raw, "a", "mixed", "train"), await pod_of(raw, "b", "mixed", "eval")]
        claim = await allocated(raw, "mixed", share("gpu-0"), pods=pods)
        uid = claim["metadata"]["uid"]
        got = (await n.kubelet.prepare(DRIVER, claim))[uid]
        assert not got.devices
        assert "claim default/mixed: its pods name different gpuslice.io/gang (a: train, b: " \
               "eval); pods sharing a ResourceClaim must name the same gpuslice.io/gang" in \
               got.error
        assert not cdi.path(n.base / "cdi", uid).exists()
        assert not (n.base / "state/gangs").exists()


async def test_an_exclusive_device_gets_the_whole_gpu_without_a_compute_limit(kube_api, raw):
    async with dra_node(kube_api) as n:
        claim = await allocated(raw, "whole", {"device": "gpu-0"})
        uid = claim["metadata"]["uid"]
        (d,) = (await n.kubelet.prepare(DRIVER, claim))[uid].devices
        assert not d.HasField("share_id")
        r = Region.read(n.base / "state/dra/regions" / uid / "region", check_alive=False)
        assert [x.limit for x in r.by_uuid().values()] == [16384 << 20]
        assert r.sm_limit == 0


async def test_a_prepare_repeated_after_a_restart_without_the_api_server_answers_the_same(
        kube_api, raw, tmp_path):
    faults = kube_api.need_faults()
    base = Path(short_dir())
    async with dra_node(kube_api, base) as n:
        claim = await allocated(raw, "train", share("gpu-0"))
        uid = claim["metadata"]["uid"]
        first = (await n.kubelet.prepare(DRIVER, claim))[uid]
        inode = os.stat(base / "state/dra/regions" / uid / "region").st_ino
        os.rename(base / "state", tmp_path / "state")  # started_agent removes base at the end
    os.makedirs(base)
    os.rename(tmp_path / "state", base / "state")
    region = base / "state/dra/regions" / uid / "region"
    faults.fail_next(1000, code=503, resource="resourceclaims")
    async with dra_node(kube_api, base) as n:
        again = (await n.kubelet.prepare(DRIVER, claim))[uid]
        assert again == first
        assert os.stat(region).st_ino == inode, "the region in use is kept"
    faults.reset()


async def test_a_claim_on_a_gpu_this_node_does_not_have_is_a_clear_error(kube_api, raw):
    async with dra_node(kube_api) as n:
        bad = await allocated(raw, "bad", share("gpu-5"))
        good = await allocated(raw, "good", share("gpu-0"))
        got = await n.kubelet.prepare(DRIVER, bad, good)
        err = got[bad["metadata"]["uid"]].error
        assert "claim default/bad device node-a/gpu-5: this node has no such GPU" in err
        assert "delete the pod and the claim" in err
        assert got[good["metadata"]["uid"]].error == ""


async def test_sockets_a_kubelet_wipes_are_served_again_and_it_registers_again(kube_api):
    async with dra_node(kube_api) as n:
        for sock in (n.base / "registry").glob("*.sock"):
            sock.unlink()
        (n.base / "plugins" / DRIVER / "dra.sock").unlink()
        await n.kubelet.wait_registered(DRIVER, after=1)
        assert (n.base / "plugins" / DRIVER / "dra.sock").exists()


async def test_an_unhealthy_gpu_leaves_the_slice_and_a_claim_on_it_is_refused(kube_api, raw):
    async with dra_node(kube_api) as n:
        sick = n.backend.devices()[1].uuid
        n.backend.inject_xid(sick, 79)

        async def published() -> list[str]:
            code, obj = await raw.call(
                "GET", f"/apis/resource.k8s.io/v1/resourceslices/{NODE}-{DRIVER}")
            return [d["name"] for d in obj["spec"]["devices"]] if code == 200 else []

        async def only_gpu0() -> bool:
            return await published() == ["gpu-0"]

        await wait_for(only_gpu0, "gpu-1 unpublished")
        claim = await allocated(raw, "late", share("gpu-1"))
        err = (await n.kubelet.prepare(DRIVER, claim))[claim["metadata"]["uid"]].error
        assert f"GPU {sick} is unhealthy" in err


@pytest.mark.parametrize("n_claims", [8])
async def test_many_claims_prepared_at_once_never_overlap(kube_api, raw, n_claims):
    async with dra_node(kube_api) as n:
        objs = [await allocated(raw, f"c{i}", share(f"gpu-{i % 2}", "1Gi", "10"))
                for i in range(n_claims)]
        got = await asyncio.gather(*(n.kubelet.prepare(DRIVER, o) for o in objs))
        assert all(r[o["metadata"]["uid"]].error == "" for r, o in zip(got, objs, strict=True))
        assert len(os.listdir(n.base / "cdi")) == n_claims


async def test_a_refused_registration_makes_the_agent_unready_and_says_why(kube_api, caplog):
    async with dra_node(kube_api) as n:
        await wait_for(lambda: n.agent.ready() is None, "agent ready")
        sock = n.base / "registry" / f"{DRIVER}-reg.sock"
        async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:
            await reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=False, error="version not supported"))
        assert "the DRA driver gpu.gpuslice.io" in (n.agent.ready() or "")
        assert "the kubelet refused the DRA plugin: version not supported" in caplog.text


async def test_a_stop_keeps_the_slice_and_remove_dra_slices_deletes_it(kube_api, raw):
    slice_path = f"/apis/resource.k8s.io/v1/resourceslices/{NODE}-{DRIVER}"
    async with dra_node(kube_api) as n:
        async def published() -> bool:
            return (await raw.call("GET", slice_path))[0] == 200

        await wait_for(published, "slice published")
        cfg = n.cfg
    assert (await raw.call("GET", slice_path))[0] == 200, "a normal stop keeps the slice"
    await remove_dra_slices(msgspec.structs.replace(cfg, kubeconfig=str(kube_api.kubeconfig)))
    assert (await raw.call("GET", slice_path))[0] == 404


async def test_a_kubelet_restart_wipes_the_slice_and_the_agent_publishes_it_again_at_once(
        kube_api, raw):
    slice_path = f"/apis/resource.k8s.io/v1/resourceslices/{NODE}-{DRIVER}"

    async def published() -> bool:
        return (await raw.call("GET", slice_path))[0] == 200

    async with dra_node(kube_api) as n:
        await wait_for(published, "slice published")
        await n.kubelet.stop()
        # a starting kubelet deletes every ResourceSlice of its node (no driver has registered
        # yet), then registers the plugins whose sockets it finds
        assert (await raw.call("DELETE", slice_path))[0] == 200
        restarted = DraKubelet(n.base / "registry")
        await restarted.start()
        try:
            await restarted.wait_registered(DRIVER)
            await wait_for(published, "the slice published again when the kubelet registered "
                           "the plugin (not inventoryIntervalSeconds later)", timeout=5)
        finally:
            await restarted.stop()


async def test_a_slice_deleted_or_edited_behind_the_agents_back_is_published_again_at_once(
        kube_api, raw):
    """The kubelet's startup delete can land after the publish its registration triggered; an
    admin can edit the slice: the agent watches its own slice and heals it, not 300 s later."""
    slice_path = f"/apis/resource.k8s.io/v1/resourceslices/{NODE}-{DRIVER}"

    async def whole() -> bool:
        code, obj = await raw.call("GET", slice_path)
        return code == 200 and [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0", "gpu-1"]

    async with dra_node(kube_api):
        await wait_for(whole, "slice published")
        assert (await raw.call("DELETE", slice_path))[0] == 200
        await wait_for(whole, "the deleted slice published again", timeout=5)
        _, obj = await raw.call("GET", slice_path)
        obj["spec"]["devices"] = obj["spec"]["devices"][:1]
        assert (await raw.call("PUT", slice_path, obj))[0] == 200
        await wait_for(whole, "the edited slice restored", timeout=5)

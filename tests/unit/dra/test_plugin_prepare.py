"""The DRA plugin's prepare/unprepare against a claim store in memory: the answer, the region and
CDI spec it makes, idempotency across restarts (from the checkpoint, without the API server), a
prepare killed half-way, per-claim errors, status.devices, and the sweep of stale claims."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
from typing import Any

import pytest

from gpuslice.container.edits import Layout
from gpuslice.dra import DRIVER, cdi, claims
from gpuslice.dra.checkpoint import Checkpoint
from gpuslice.dra.plugin import DraPlugin, status_devices
from gpuslice.dra.proto import dra_pb2 as pb
from gpuslice.kube import errors as kerrors
from gpuslice.shim import Region

NODE = "node-a"
U0, U1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"
DEVICES = {"gpu-0": claims.NodeDevice("gpu-0", U0, 0, 16384, True),
           "gpu-1": claims.NodeDevice("gpu-1", U1, 1, 16384, True)}
SHARE = "e4db67a0-2f6c-4a9a-8e46-36279f468e0e"


def claim(name: str, uid: str, *results: dict[str, Any]) -> dict[str, Any]:
    """A claim as the scheduler leaves it: allocated on NODE, reserved for one pod."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "resourceVersion": "1"},
            "status": {"allocation": {"devices": {"results": [
                {"driver": DRIVER, "pool": NODE, "request": "gpu", **r} for r in results]}},
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": "p-" + uid}]}}


SHARED = claim("shared", "c1", {"device": "gpu-0", "shareID": SHARE,
                                 "consumedCapacity": {"memory": "4Gi", "cores": "30"}})
WHOLE = claim("whole", "c2", {"device": "gpu-1"})
GONE = claim("gone", "c3", {"device": "gpu-7", "shareID": SHARE,
                             "consumedCapacity": {"memory": "1Gi", "cores": "1"}})


class Claims:
    """ClaimApi in memory: get by name, status.devices by change(), pods by name (`pods`);
    `down` = API server away."""

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): copy.deepcopy(o)
                     for o in objs}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.down = False
        self.gets = 0
        self.pod_gets = 0

    def _read(self, kind: str, store: dict[tuple[str, str], dict[str, Any]], namespace: str,
              name: str) -> dict[str, Any]:
        if self.down:
            raise kerrors.Unavailable("no answer")
        try:
            return copy.deepcopy(store[(namespace, name)])
        except KeyError:
            raise kerrors.NotFound(f"{kind} {namespace}/{name} not found") from None

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        return self._read("resourceclaim", self.objs, namespace, name)

    async def pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.pod_gets += 1
        return self._read("pod", self.pods, namespace, name)

    async def set_devices(self, namespace, name, uid, change) -> None:
        obj = self.objs[(namespace, name)]
        status = obj.setdefault("status", {})
        status["devices"] = change(list(status.get("devices") or []))


def layout(tmp_path) -> Layout:
    return Layout(library_host=str(tmp_path / "lib/libgpuslice.so"),
                  preload_host=str(tmp_path / "lib/ld.so.preload"),
                  regions_host=str(tmp_path / "state/regions"), board_host=str(tmp_path / "board"))


def plugin(tmp_path, api: Claims, **kw) -> DraPlugin:
    return DraPlugin(driver=DRIVER, node=NODE, api=api, devices=lambda: DEVICES,
                     state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi",
                     layout=layout(tmp_path), **kw)


async def prepare(p: DraPlugin, *objs: dict[str, Any]) -> dict[str, pb.NodePrepareResourceResponse]:
    req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(
        namespace=o["metadata"]["namespace"], uid=o["metadata"]["uid"], name=o["metadata"]["name"])
        for o in objs])
    resp = await p.NodePrepareResources(req, None)
    await p.stop()  # let status reports finish or stop
    return dict(resp.claims)


async def unprepare(p: DraPlugin, *uids: str) -> dict[str, pb.NodeUnprepareResourceResponse]:
    req = pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace="default", uid=u, name="x")
                                                   for u in uids])
    return dict((await p.NodeUnprepareResources(req, None)).claims)


def region(tmp_path, uid: str) -> Region:
    return Region.read(tmp_path / "state/dra/regions" / uid / "region", check_alive=False)


async def test_prepare_answers_each_share_and_writes_its_region_cdi_spec_and_checkpoint(tmp_path):
    p = plugin(tmp_path, Claims(SHARED, WHOLE))
    got = await prepare(p, SHARED, WHOLE)
    assert got["c1"].error == "" and got["c2"].error == ""
    (d,) = got["c1"].devices
    assert (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids),
            d.share_id) == (["gpu"], NODE, "gpu-0", ["gpuslice.io/claim=c1"], SHARE)
    (w,) = got["c2"].devices
    assert not w.HasField("share_id"), "an exclusive device has no share"
    r = region(tmp_path, "c1")
    assert {u: x.limit for u, x in r.by_uuid().items()} == {U0: 4 << 30}
    assert r.sm_limit == 30
    whole = region(tmp_path, "c2")
    assert {u: x.limit for u, x in whole.by_uuid().items()} == {U1: 16384 << 20}
    assert whole.sm_limit == 0, "the whole GPU: no compute limit"
    spec = json.loads(cdi.path(tmp_path / "cdi", "c1").read_text())
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m" and env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert set(Checkpoint(tmp_path / "state/dra/prepared.json").entries) == {"c1", "c2"}


async def test_a_repeated_prepare_gives_the_same_answer_and_keeps_the_region_in_use(tmp_path):
    api = Claims(SHARED)
    p = plugin(tmp_path, api)
    first = await prepare(p, SHARED)
    f = tmp_path / "state/dra/regions/c1/region"
    before = os.stat(f).st_ino
    again = await prepare(p, SHARED)
    assert again == first
    assert os.stat(f).st_ino == before, "a region processes hold is never replaced"


async def test_after_a_restart_the_checkpoint_answers_without_the_api_server(tmp_path):
    api = Claims(SHARED)
    first = await prepare(plugin(tmp_path, api), SHARED)
    api.down = True
    os.unlink(cdi.path(tmp_path / "cdi", "c1"))  # /var/run is a tmpfs: gone after a reboot
    again = await prepare(plugin(tmp_path, api), SHARED)
    assert again == first
    assert cdi.path(tmp_path / "cdi", "c1").exists(), "the spec is written again"


async def test_a_prepare_killed_before_its_checkpoint_is_completed_or_undone_later(
        tmp_path, monkeypatch):
    api = Claims(SHARED)
    p = plugin(tmp_path, api)

    def killed(self, c):
        raise SystemExit("killed")  # the process dies after the region and the spec

    monkeypatch.setattr(Checkpoint, "put", killed)
    with pytest.raises(SystemExit):
        await p.prepare("default", "shared", "c1")
    monkeypatch.undo()
    (tmp_path / "state/dra/.prepared.json.0123.tmp").write_text("{half")  # a torn write
    assert cdi.path(tmp_path / "cdi", "c1").exists()
    restarted = plugin(tmp_path, api)
    assert restarted.checkpoint.entries == {}
    got = await prepare(restarted, SHARED)
    assert got["c1"].devices[0].share_id == SHARE
    assert (await unprepare(restarted, "c1"))["c1"].error == ""
    assert not cdi.path(tmp_path / "cdi", "c1").exists()
    assert not (tmp_path / "state/dra/regions/c1").exists()


async def test_unprepare_removes_exactly_what_prepare_made_and_an_unknown_claim_is_fine(tmp_path):
    p = plugin(tmp_path, Claims(SHARED, WHOLE))
    await prepare(p, SHARED, WHOLE)
    got = await unprepare(p, "c1", "never-prepared")
    assert got["c1"].error == "" and got["never-prepared"].error == ""
    assert not (tmp_path / "state/dra/regions/c1").exists()
    assert (tmp_path / "state/dra/regions/c2/region").exists()
    assert sorted(os.listdir(tmp_path / "cdi")) == [cdi.path(tmp_path, "c2").name]
    assert set(Checkpoint(tmp_path / "state/dra/prepared.json").entries) == {"c2"}


async def test_one_claims_error_is_its_own_and_leaves_nothing_behind(tmp_path):
    p = plugin(tmp_path, Claims(SHARED, GONE))
    got = await prepare(p, GONE, SHARED)
    assert "claim default/gone device node-a/gpu-7: this node has no such GPU" in got["c3"].error
    assert got["c1"].error == "" and len(got["c1"].devices) == 1
    assert not (tmp_path / "state/dra/regions/c3").exists()
    assert not cdi.path(tmp_path / "cdi", "c3").exists()


@pytest.mark.parametrize(("api", "words"), [
    pytest.param(Claims(), "cannot read it from the API server", id="claim not found"),
    pytest.param(Claims(claim("shared", "other-uid", {"device": "gpu-0"})),
                 "deleted and created again", id="claim re-created with another uid"),
])
async def test_a_claim_the_api_server_does_not_hold_as_asked_is_an_error(tmp_path, api, words):
    got = await prepare(plugin(tmp_path, api), SHARED)
    assert words in got["c1"].error and not got["c1"].devices


async def test_an_unreadable_checkpoint_is_moved_aside_and_rebuilt(tmp_path):
    ck = tmp_path / "state/dra/prepared.json"
    ck.parent.mkdir(parents=True)
    ck.write_text("not json")
    p = plugin(tmp_path, Claims(SHARED))
    assert p.checkpoint.entries == {}
    assert [f.name.startswith("prepared.json.bad-") for f in ck.parent.glob("prepared*")] == [True]
    assert (await prepare(p, SHARED))["c1"].error == ""


async def test_prepare_reports_the_shares_in_status_devices(tmp_path):
    api = Claims(SHARED)
    p = plugin(tmp_path, api)
    await p.prepare("default", "shared", "c1")
    await p.stop()
    await p.prepare("default", "shared", "c1")
    for t in list(p._reports):
        await t
    (d,) = api.objs[("default", "shared")]["status"]["devices"]
    assert (d["driver"], d["pool"], d["device"], d["shareID"]) == (DRIVER, NODE, "gpu-0", SHARE)
    assert d["conditions"][0]["type"] == "Ready" and d["data"]["memoryMiB"] == 4096


def test_status_devices_keeps_other_drivers_entries_and_the_first_transition_time():
    other = {"driver": "net.example.com", "pool": NODE, "device": "nic-0"}
    c = claims.shares(SHARED, driver=DRIVER, node=NODE, devices=DEVICES)
    first = status_devices([other], c, DRIVER, NODE)
    assert first[0] == other and len(first) == 2
    old = copy.deepcopy(first)
    old[1]["conditions"][0]["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    again = status_devices(old, c, DRIVER, NODE)
    assert again == old, "nothing changed: the same list (no write)"


async def test_the_sweep_removes_stale_claims_after_the_grace_period_only(tmp_path):
    api = Claims(SHARED, WHOLE)
    p = plugin(tmp_path, api, grace_s=60)
    await prepare(p, SHARED, WHOLE)
    (tmp_path / "state/dra/regions/orphan").mkdir()  # a prepare killed before its checkpoint
    t0 = p.checkpoint.entries["c1"].prepared_at
    del api.objs[("default", "shared")]  # deleted
    api.objs[("default", "whole")]["status"]["reservedFor"] = []  # its pods are gone
    assert await p.sweep(now=t0 + 1) == []
    api.down = True
    assert await p.sweep(now=t0 + 61) == ["orphan"], "while the API is away only orphans go"
    api.down = False
    assert await p.sweep(now=t0 + 61) == ["c1", "c2"]
    assert os.listdir(tmp_path / "state/dra/regions") == []
    assert os.listdir(tmp_path / "cdi") == []


async def test_calls_for_one_claim_run_one_at_a_time_and_leave_no_lock_behind(tmp_path):
    p = plugin(tmp_path, Claims(SHARED))
    await asyncio.gather(p.prepare("default", "shared", "c1"), p.unprepare("c1"),
                         p.prepare("default", "shared", "c1"))
    await p.stop()
    assert set(p.prepared()) == {"c1"}, "the last prepare wins: prepared, files in place"
    assert (tmp_path / "state/dra/regions/c1/region").exists()
    assert cdi.path(tmp_path / "cdi", "c1").exists()
    assert p._locks == {}


async def test_a_uid_that_is_no_uid_is_refused_with_the_claims_name(tmp_path):
    got = await prepare(plugin(tmp_path, Claims()), claim("odd", "../../etc"))
    error = got["../../etc"].error
    assert "claim default/odd: claim uid '../../etc': not a Kubernetes uid" in error


async def test_with_cdi_on_each_device_also_names_the_nvidia_runtimes_cdi_device(tmp_path):
    p = DraPlugin(driver=DRIVER, node=NODE, api=Claims(SHARED), devices=lambda: DEVICES,
                  state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi",
                  layout=dataclasses.replace(layout(tmp_path), cdi=True))
    (d,) = (await prepare(p, SHARED))["c1"].devices
    assert list(d.cdi_device_ids) == ["gpuslice.io/claim=c1", f"nvidia.com/gpu={U0}"]
    spec = json.loads(cdi.path(tmp_path / "cdi", "c1").read_text())
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["devices"][0]["containerEdits"]["env"]


async def test_a_forbidden_status_write_names_the_rbac_a_136_server_asks_for(tmp_path, caplog):
    class Forbidding(Claims):
        async def set_devices(self, *args: Any) -> None:
            raise kerrors.Forbidden("resourceclaims.resource.k8s.io \"shared\" is forbidden")

    p = plugin(tmp_path, Forbidding(SHARED))
    await p.prepare("default", "shared", "c1")
    await asyncio.gather(*p._reports)
    assert "resourceclaims/driver associated-node:patch for gpu.gpuslice.io" in caplog.text
    assert p.prepared(), "the claim is prepared all the same"


async def test_a_second_pod_of_a_shared_claim_reaches_its_pods_and_a_gone_one_leaves(tmp_path):
    """The pods label the claim's metrics and receive its watchdog events: they follow
    status.reservedFor when the kubelet prepares the claim for another pod and at the sweep."""
    api = Claims(SHARED)
    p = plugin(tmp_path, api, grace_s=60)
    await p.prepare("default", "shared", "c1")
    reserved = api.objs[("default", "shared")]["status"]["reservedFor"]
    reserved.append({"resource": "pods", "name": "second-pod", "uid": "p-2"})
    await p.prepare("default", "shared", "c1")  # the kubelet prepares it for the second pod
    await asyncio.gather(*p._reports)
    assert p.prepared()["c1"].pods == (("shared-pod", "p-c1"), ("second-pod", "p-2"))
    del reserved[0]  # the first pod is gone
    t0 = p.checkpoint.entries["c1"].prepared_at
    assert await p.sweep(now=t0 + 61) == []
    assert p.prepared()["c1"].pods == (("second-pod", "p-2"),)
    assert Checkpoint(tmp_path / "state/dra/prepared.json").entries["c1"].claim.pods == (
        ("second-pod", "p-2"),), "kept across a restart"


async def test_the_sweep_asks_the_api_server_only_about_claims_none_of_whose_pods_run_here(
        tmp_path):
    api = Claims(SHARED, WHOLE)
    p = plugin(tmp_path, api, grace_s=60)
    await prepare(p, SHARED, WHOLE)
    del api.objs[("default", "shared")], api.objs[("default", "whole")]  # both deleted
    t0, before = p.checkpoint.entries["c1"].prepared_at, api.gets
    assert await p.sweep(now=t0 + 61, live_pods={"p-c1", "p-c2"}) == []
    assert api.gets == before, "a claim whose pod runs on this node is in use: no read"
    assert await p.sweep(now=t0 + 61, live_pods={"p-c2"}) == ["c1"]
    assert api.gets == before + 1

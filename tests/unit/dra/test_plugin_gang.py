"""`gpuslice.io/gang` on the DRA path: at a claim's first prepare the plugin reads the pods of its
status.reservedFor (uid checked) and, under a compute limit, hands the claim's CDI spec the
gang's directory `<stateDir>/gangs/<namespace>/<gang>` exactly as the device plugin path hands
a container it; pods that name different gangs, or no DNS label, fail the claim's prepare with
what to do; the checkpoint keeps the gang (an entry from before has none). Tenants are
adversaries: no value and no planted symlink points the mount elsewhere. The device plugin
path: tests/unit/node/test_allocate_gang.py; the directories: tests/unit/node/test_gang_dirs.py."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import stat
from typing import Any

import pytest
from test_plugin_prepare import (
    DEVICES,
    NODE,
    SHARE,
    SHARED,
    WHOLE,
    Claims,
    claim,
    layout,
    prepare,
    unprepare,
)

from gpuslice.container.edits import container_edits, gang_host_dir
from gpuslice.container.limits import region_spec
from gpuslice.dra import DRIVER, cdi
from gpuslice.dra.checkpoint import Checkpoint
from gpuslice.dra.plugin import DraPlugin
from gpuslice.kube import errors as kerrors
from gpuslice.shim import AGENT_GANG, GANG_DIR_ENV

GANG = "gpuslice.io/gang"
RULE = "pods sharing a ResourceClaim must name the same gpuslice.io/gang"


def pod(name: str, uid: str, gang: str | None = None, ns: str = "default") -> dict[str, Any]:
    ann = {GANG: gang} if gang is not None else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "annotations": ann},
            "spec": {"nodeName": NODE, "containers": [{"name": "main"}]}}


def reserved(c: dict[str, Any], *pods: tuple[str, str]) -> dict[str, Any]:
    c = copy.deepcopy(c)
    c["status"]["reservedFor"] = [{"resource": "pods", "name": n, "uid": u} for n, u in pods]
    return c


def api_with(*pods: dict[str, Any], claims: tuple[dict[str, Any], ...] = (SHARED,)) -> Claims:
    api = Claims(*claims)
    api.pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    return api


def gangs_layout(tmp_path):
    return dataclasses.replace(layout(tmp_path), gangs_host=str(tmp_path / "state/gangs"))


def plugin(tmp_path, api: Claims, **kw) -> DraPlugin:
    return DraPlugin(driver=DRIVER, node=NODE, api=api, devices=lambda: DEVICES,
                     state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi",
                     layout=gangs_layout(tmp_path), **kw)


def edits(tmp_path, uid: str = "c1") -> dict[str, Any]:
    return json.loads(cdi.path(tmp_path / "cdi", uid).read_text())["devices"][0]["containerEdits"]


def env(e: dict[str, Any]) -> dict[str, str]:
    return dict(x.split("=", 1) for x in e["env"])


def gang_mounts(e: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(m["hostPath"], m["options"]) for m in e["mounts"] if m["containerPath"] == AGENT_GANG]


def nothing_left(tmp_path, uid: str = "c1") -> None:
    assert not cdi.path(tmp_path / "cdi", uid).exists()
    assert not (tmp_path / "state/dra/regions" / uid).exists()
    assert uid not in Checkpoint(tmp_path / "state/dra/prepared.json").entries


async def test_pods_of_one_gang_get_its_directory_and_env_as_the_device_plugin_path_gives(
        tmp_path):
    p = plugin(tmp_path, api_with(pod("shared-pod", "p-c1", "train-42")))
    got = await prepare(p, SHARED)
    assert got["c1"].error == ""
    gang = tmp_path / "state/gangs/default/train-42"
    e = edits(tmp_path)
    assert env(e)[GANG_DIR_ENV] == AGENT_GANG and env(e)["GPUSLICE_COMPUTE_PHASE"] == "1"
    assert gang_mounts(e) == [(str(gang), ["rw", "nosuid", "nodev", "rbind"])], \
        "read-write: every process of the gang writes the gang file"
    # the same env and mounts container_edits gives the device plugin path's container
    lay = gangs_layout(tmp_path)
    assert gang_host_dir(lay, "default", "train-42") == str(gang)
    spec = region_spec(p.prepared()["c1"], compute_mode=lay.compute_mode)
    envs, mounts = container_edits(spec, str(tmp_path / "state/dra/regions/c1"), lay,
                                   gang_dir=str(gang))
    assert env(e) == envs
    assert [(m["containerPath"], m["hostPath"]) for m in e["mounts"]] == [
        (m.container_path, m.host_path) for m in mounts]
    assert gang.is_dir() and stat.S_IMODE(os.lstat(gang).st_mode) == 0o1777, \
        "made before the answer: there before the runtime mounts it"
    assert stat.S_IMODE(os.lstat(gang.parent).st_mode) == 0o755
    assert Checkpoint(tmp_path / "state/dra/prepared.json").entries["c1"].claim.gang == "train-42"
    assert p.gangs() == {("default", "train-42")}


async def test_two_claims_of_one_gang_share_its_directory_and_other_gangs_are_apart(tmp_path):
    a = claim("a", "ca", {"device": "gpu-0", "shareID": SHARE,
                          "consumedCapacity": {"memory": "1Gi", "cores": "30"}})
    b = claim("b", "cb", {"device": "gpu-1", "shareID": SHARE,
                          "consumedCapacity": {"memory": "1Gi", "cores": "30"}})
    c = claim("c", "cc", {"device": "gpu-1", "shareID": SHARE,
                          "consumedCapacity": {"memory": "1Gi", "cores": "30"}})
    api = api_with(pod("a-pod", "p-ca", "job"), pod("b-pod", "p-cb", "job"),
                   pod("c-pod", "p-cc", "other"), claims=(a, b, c))
    p = plugin(tmp_path, api)
    got = await prepare(p, a, b, c)
    assert [got[u].error for u in ("ca", "cb", "cc")] == ["", "", ""]
    dirs = {u: gang_mounts(edits(tmp_path, u))[0][0] for u in ("ca", "cb", "cc")}
    assert dirs["ca"] == dirs["cb"] == str(tmp_path / "state/gangs/default/job")
    assert dirs["cc"] == str(tmp_path / "state/gangs/default/other")


async def test_pods_without_a_gang_get_exactly_the_spec_of_before(tmp_path):
    api = api_with(pod("shared-pod", "p-c1"))
    p = plugin(tmp_path, api)
    assert (await prepare(p, SHARED))["c1"].error == ""
    with_gangs = edits(tmp_path)
    assert GANG_DIR_ENV not in env(with_gangs) and gang_mounts(with_gangs) == []
    assert not (tmp_path / "state/gangs").exists()
    assert p.prepared()["c1"].gang == "" and p.gangs() == set()
    plain = cdi.build("c1", region_spec(p.prepared()["c1"]), [0],
                      str(tmp_path / "state/dra/regions/c1"), layout(tmp_path))
    assert with_gangs == plain["devices"][0]["containerEdits"]


@pytest.mark.parametrize("cores", ["0", "100"])
async def test_without_a_compute_limit_no_pod_is_read_and_no_gang_is_handed(tmp_path, cores):
    """No compute limit, no gang holds (as on the device plugin path): nothing to couple."""
    c = claim("shared", "c1", {"device": "gpu-0", "shareID": SHARE,
                               "consumedCapacity": {"memory": "4Gi", "cores": cores}})
    api = api_with(pod("shared-pod", "p-c1", "train"), claims=(c,))
    p = plugin(tmp_path, api)
    assert (await prepare(p, c))["c1"].error == ""
    assert api.pod_gets == 0
    assert gang_mounts(edits(tmp_path)) == [] and not (tmp_path / "state/gangs").exists()
    whole = api_with(pod("whole-pod", "p-c2", "train"), claims=(WHOLE,))
    assert (await prepare(plugin(tmp_path, whole), WHOLE))["c2"].error == ""
    assert whole.pod_gets == 0 and gang_mounts(edits(tmp_path, "c2")) == []


@pytest.mark.parametrize(("gangs", "said"), [
    (("train", "eval"), "(a: train, b: eval)"),
    (("train", None), "(a: train, b: none)"),
])
async def test_pods_of_a_shared_claim_that_name_different_gangs_fail_its_prepare(
        tmp_path, gangs, said):
    c = reserved(SHARED, ("a", "p-a"), ("b", "p-b"))
    api = api_with(pod("a", "p-a", gangs[0]), pod("b", "p-b", gangs[1]), claims=(c,))
    got = (await prepare(plugin(tmp_path, api), c))["c1"]
    assert not got.devices
    assert got.error.startswith(f"gpuslice: claim default/shared: its pods name different "
                                f"{GANG} {said}; {RULE} (or none)"), got.error
    assert got.error.endswith("give them the same value, or each pod a claim of its own")
    nothing_left(tmp_path)
    assert not (tmp_path / "state/gangs").exists()


async def test_pods_of_a_shared_claim_that_name_one_gang_share_it(tmp_path):
    c = reserved(SHARED, ("a", "p-a"), ("b", "p-b"))
    api = api_with(pod("a", "p-a", "job"), pod("b", "p-b", "job"), claims=(c,))
    assert (await prepare(plugin(tmp_path, api), c))["c1"].error == ""
    assert gang_mounts(edits(tmp_path))[0][0] == str(tmp_path / "state/gangs/default/job")


@pytest.mark.parametrize("value", ["../../etc", "..", "a/b", "Train", "job.1", "", " job",
                                   "/etc", "a" * 64])
async def test_a_gang_that_is_no_dns_label_fails_the_prepare_and_never_becomes_a_path(
        tmp_path, value):
    api = api_with(pod("shared-pod", "p-c1", value))
    got = (await prepare(plugin(tmp_path, api), SHARED))["c1"]
    assert not got.devices
    assert got.error.startswith(f"gpuslice: claim default/shared: pod shared-pod: annotation "
                                f"{GANG}="), got.error
    assert ": must be a DNS label (lowercase letters, digits and '-', at most 63" in got.error
    assert got.error.endswith(", then create the pod again")
    nothing_left(tmp_path)
    assert not (tmp_path / "state/gangs").exists()
    assert sorted(os.listdir(tmp_path / "state")) == ["dra"], "nothing made anywhere else"


async def test_a_reserved_pod_that_is_gone_or_whose_name_another_pod_holds_is_no_consumer(
        tmp_path):
    """The pod of that name was deleted and created again (another uid): its annotation is not
    the consumer's, so it neither names the gang nor disagrees with it."""
    c = reserved(SHARED, ("a", "p-a"), ("b", "p-b"), ("gone", "p-gone"))
    api = api_with(pod("a", "p-a", "job"), pod("b", "p-other", "evil"), claims=(c,))
    p = plugin(tmp_path, api)
    assert (await prepare(p, c))["c1"].error == ""
    assert p.prepared()["c1"].gang == "job"
    only = reserved(SHARED, ("b", "p-b"))
    api2 = api_with(pod("b", "p-other", "evil"), claims=(only,))
    p2 = DraPlugin(driver=DRIVER, node=NODE, api=api2, devices=lambda: DEVICES,
                   state_dir=tmp_path / "s2", cdi_dir=tmp_path / "cdi2",
                   layout=gangs_layout(tmp_path))
    assert (await prepare(p2, only))["c1"].error == ""
    assert p2.prepared()["c1"].gang == "", "a re-created pod's annotation is never used"
    assert not (tmp_path / "state/gangs/default/evil").exists()


async def test_a_pod_the_api_server_does_not_answer_for_fails_the_prepare_naming_the_rbac(
        tmp_path):
    class PodsDown(Claims):
        async def pod(self, namespace: str, name: str) -> dict[str, Any]:
            raise kerrors.Forbidden(f'pods "{name}" is forbidden')

    api = PodsDown(SHARED)
    got = (await prepare(plugin(tmp_path, api), SHARED))["c1"]
    assert "claim default/shared: cannot read its pod default/shared-pod from the API server " \
           f"for its {GANG}" in got.error
    assert "the kubelet retries; check the node agent's API access (RBAC: pods get)" in got.error
    nothing_left(tmp_path)


async def test_a_repeated_prepare_gives_the_same_gang_from_the_checkpoint_without_the_api(
        tmp_path):
    api = api_with(pod("shared-pod", "p-c1", "train"))
    first = await prepare(plugin(tmp_path, api), SHARED)
    spec = cdi.path(tmp_path / "cdi", "c1").read_text()
    gang = tmp_path / "state/gangs/default/train"
    api.down = True  # after a restart, with the API server away
    os.unlink(cdi.path(tmp_path / "cdi", "c1"))  # /var/run is a tmpfs
    os.rmdir(gang)  # swept meanwhile (say, no pod on the node named it for a while)
    gets = api.pod_gets
    again = await prepare(plugin(tmp_path, api), SHARED)
    assert again == first
    assert cdi.path(tmp_path / "cdi", "c1").read_text() == spec, "the same gang mount"
    assert gang.is_dir() and stat.S_IMODE(os.lstat(gang).st_mode) == 0o1777, "made again"
    assert api.pod_gets == gets, "the checkpoint answers; the pods are not read again"


async def test_the_gang_stays_what_the_first_prepare_read(tmp_path):
    """The CDI spec of a prepared claim is fixed: a pod that joins later, or an annotation
    written since, changes nothing (the kubelet does not prepare a claim twice for its pods)."""
    api = api_with(pod("shared-pod", "p-c1", "train"))
    p = plugin(tmp_path, api)
    first = await prepare(p, SHARED)
    api.pods[("default", "shared-pod")]["metadata"]["annotations"][GANG] = "other"
    assert await prepare(p, SHARED) == first
    assert p.prepared()["c1"].gang == "train"


async def test_a_checkpoint_entry_from_before_gangs_reads_as_no_gang(tmp_path):
    api = api_with(pod("shared-pod", "p-c1", "train"), claims=(SHARED,))
    await prepare(plugin(tmp_path, api), SHARED)
    ck = tmp_path / "state/dra/prepared.json"
    old = json.loads(ck.read_bytes())
    del old["claims"]["c1"]["claim"]["gang"]  # what an agent before this change wrote
    ck.write_text(json.dumps(old))
    api.down = True
    p = plugin(tmp_path, api)
    assert p.checkpoint.entries["c1"].claim.gang == ""
    assert (await prepare(p, SHARED))["c1"].error == ""
    assert gang_mounts(edits(tmp_path)) == [], "prepared without a gang: answered without one"
    assert json.loads(ck.read_bytes()) == old, "the same entry: not rewritten"


@pytest.mark.parametrize("level", ["namespace", "gang"])
async def test_a_symlink_planted_at_the_gang_path_is_refused_never_followed(tmp_path, level):
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    os.chmod(elsewhere, 0o755)
    gangs = tmp_path / "state/gangs"
    (gangs / "default").mkdir(parents=True)
    if level == "namespace":
        os.rmdir(gangs / "default")
        (gangs / "default").symlink_to(elsewhere)
    else:
        (gangs / "default/train").symlink_to(elsewhere)
    api = api_with(pod("shared-pod", "p-c1", "train"))
    got = (await prepare(plugin(tmp_path, api), SHARED))["c1"]
    assert got.error.startswith(f"gpuslice: claim default/shared: the directory of {GANG} "
                                "train: "), got.error
    assert "exists and is not a directory; remove it" in got.error
    assert stat.S_IMODE(os.lstat(elsewhere).st_mode) == 0o755 and not list(elsewhere.iterdir()), \
        "nothing made or changed where the link points"
    nothing_left(tmp_path)


async def test_a_forged_gang_in_the_checkpoint_never_becomes_a_path(tmp_path):
    api = api_with(pod("shared-pod", "p-c1", "train"))
    await prepare(plugin(tmp_path, api), SHARED)
    ck = tmp_path / "state/dra/prepared.json"
    data = json.loads(ck.read_bytes())
    data["claims"]["c1"]["claim"]["gang"] = "../../../etc"
    ck.write_text(json.dumps(data))
    os.unlink(cdi.path(tmp_path / "cdi", "c1"))
    got = (await prepare(plugin(tmp_path, api), SHARED))["c1"]
    assert "not a DNS label" in got.error and not got.devices
    assert not cdi.path(tmp_path / "cdi", "c1").exists()
    assert not (tmp_path / "etc").exists()


async def test_unprepare_leaves_the_gangs_directory_to_the_watchdog_and_gangs_forgets_it(
        tmp_path):
    """Other pods of the gang (either path) may use the directory: only the sweep removes it."""
    p = plugin(tmp_path, api_with(pod("shared-pod", "p-c1", "train")))
    await prepare(p, SHARED)
    assert p.gangs() == {("default", "train")}
    assert (await unprepare(p, "c1"))["c1"].error == ""
    assert p.gangs() == set()
    assert (tmp_path / "state/gangs/default/train").is_dir()

"""Allocate answers for pods of one gang (`gpuslice.io/gang`): a container under a compute limit
gets the gang's directory and GPUSLICE_GANG_DIR, and nothing changes for any other container.
Directories on the host: tests/unit/node/test_gang_dirs.py."""

from __future__ import annotations

import pytest

from gpuslice import handoff, model
from gpuslice.node.allocate import Layout, answer, assigned_pods, in_flight, live_gangs
from gpuslice.node.mig import MigManager
from kubelet.pods import NODE, container, gpu, pod

NOW = 1_800_000_000.0
GANGS = "/var/lib/gpuslice/gangs"
LAYOUT = Layout(library_host="/var/lib/gpuslice/lib/libgpuslice.so",
                preload_host="/var/lib/gpuslice/lib/ld.so.preload",
                regions_host="/var/lib/gpuslice/regions", board_host="/var/lib/gpuslice/board",
                gangs_host=GANGS)
GPUS = {gpu(i): model.GPU(uuid=gpu(i), model="H100", memory_mib=81920, index=i, split_count=4)
        for i in range(2)}


def ganged(name: str, gang: str | None, *, cores: int = 30, ns: str = "team") -> dict:
    p = pod(name, [container("main", cores=cores)], {"main": [gpu(0)]}, at=NOW - 1, ns=ns)
    if gang is not None:
        p["metadata"]["annotations"]["gpuslice.io/gang"] = gang
    return p


def _answer(pods, layout=LAYOUT):
    return answer(in_flight(pods, NODE, NOW, 120), assigned_pods(pods, NODE), GPUS,
                  "nvidia.com/gpu", [f"{gpu(0)}::0"], layout)


def _mounts(a):
    return {(m.container_path, m.host_path, m.read_only) for m in a.mounts}


def test_a_gang_pod_under_a_compute_limit_gets_the_gangs_directory_and_its_env():
    a = _answer([ganged("w0", "train-42")])
    assert a.envs["GPUSLICE_GANG_DIR"] == "/var/run/gpuslice-gang"
    assert a.envs["GPUSLICE_COMPUTE_PHASE"] == "1", "the gang state is for phase holds"
    assert ("/var/run/gpuslice-gang", f"{GANGS}/team/train-42", False) in _mounts(a), \
        "read-write: every process of the gang writes the gang file"
    assert a.gang == "train-42", "the agent creates the directory before it answers"


def test_two_pods_of_one_gang_are_handed_the_same_directory_and_other_gangs_another():
    dirs = {}
    for name, gang, ns in (("w0", "job", "team"), ("w1", "job", "team"),
                           ("x", "other", "team"), ("y", "job", "lab")):
        a = _answer([ganged(name, gang, ns=ns)])
        dirs[name] = next(m.host_path for m in a.mounts
                          if m.container_path == "/var/run/gpuslice-gang")
    assert dirs["w0"] == dirs["w1"] == f"{GANGS}/team/job"
    assert dirs["x"] == f"{GANGS}/team/other"
    assert dirs["y"] == f"{GANGS}/lab/job", "a gang is its namespace's: another's is apart"


@pytest.mark.parametrize(("why", "gang", "cores"), [
    ("no annotation", None, 30),
    ("an invalid name (the webhook refuses it; the agent reads it as none)", "Bad_Name", 30),
    ("no compute limit (0: best effort)", "train", 0),
    ("no compute limit (100: the whole GPU)", "train", 100),
])
def test_no_gang_directory_without_a_valid_gang_and_a_compute_limit(why, gang, cores):
    got = _answer([ganged("p", gang, cores=cores)])
    plain = _answer([ganged("p", None, cores=cores)])
    assert "GPUSLICE_GANG_DIR" not in got.envs, why
    assert not any(m.container_path == "/var/run/gpuslice-gang" for m in got.mounts), why
    assert got.gang == ""
    assert (got.envs, got.mounts) == (plain.envs, plain.mounts), \
        "the answer is exactly the one of a pod without the annotation"


def test_the_answer_of_a_pod_without_a_gang_keeps_its_shape():
    """Four mounts and the env as before the gang existed (the wire the kubelet gets)."""
    a = _answer([ganged("p", None)])
    assert [m.container_path for m in a.mounts] == [
        "/usr/local/gpuslice/lib/libgpuslice.so", "/etc/ld.so.preload", "/var/run/gpuslice",
        "/var/run/gpuslice-board"]
    assert not [k for k in a.envs if "GANG" in k]


def test_a_layout_without_gangs_hands_out_none():
    a = _answer([ganged("p", "train")], Layout(**{**LAYOUT.__dict__, "gangs_host": ""}))
    assert "GPUSLICE_GANG_DIR" not in a.envs and a.gang == ""


def test_a_mig_answer_drops_the_gang():
    a = _answer([ganged("p", "train")])
    mig = MigManager.answer(None, a, [gpu(0)], cdi=False)  # type: ignore[arg-type]
    assert (mig.mounts, mig.gang) == ((), "")


def test_the_flight_carries_the_gang_and_pods_of_other_gangs_are_not_interchangeable():
    flights = {n: in_flight([ganged(n, g)], NODE, NOW, 120)[0].flight
               for n, g in (("a", "job"), ("b", "job"), ("c", "other"), ("d", None),
                            ("e", "No_Good"))}
    assert [flights[n].gang for n in "abcde"] == ["job", "job", "other", "", ""]
    assert flights["a"].shape == flights["b"].shape
    assert flights["a"].shape != flights["c"].shape != flights["d"].shape
    assert flights["d"].shape == flights["e"].shape, "an invalid gang reads as none"
    # were "c" bound beside "a" before its Allocate, the agent could answer "c"'s call from "a"
    # and hand it the wrong gang's directory (which no swap repairs): the extender waits
    f = handoff.blocking_flight(flights["c"].requests, flights["c"].shape, [flights["a"]],
                                key="team/c")
    assert f is flights["a"], "the extender binds no pod of another gang beside it"


def test_live_gangs_are_those_of_pods_on_this_node_not_ended_and_not_being_deleted():
    running = ganged("run", "job")
    other_ns = ganged("lab", "job", ns="lab")
    done = ganged("done", "old")
    done["status"] = {"phase": "Succeeded"}
    deleting = ganged("del", "gone")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    elsewhere = ganged("far", "far")
    elsewhere["spec"]["nodeName"] = "node-b"
    bad = ganged("bad", "Bad_Name")
    plain = ganged("plain", None)
    assert live_gangs([running, other_ns, done, deleting, elsewhere, bad, plain], NODE) == {
        ("team", "job"), ("lab", "job")}


def test_live_gangs_count_pods_on_the_dra_path_too():
    """A DRA pod (claims, no assignment, no managed label) keeps its gang's directory as any pod
    of the node that names it does; the agent adds the gangs of prepared claims
    (dra/plugin.DraPlugin.gangs, tests/unit/dra/test_plugin_gang.py)."""
    dra = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "w0", "namespace": "team", "uid": "u-w0",
                        "annotations": {"gpuslice.io/gang": "job"}},
           "spec": {"nodeName": NODE, "resourceClaims": [{"name": "gpu",
                                                         "resourceClaimName": "w0-gpu"}],
                    "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]},
           "status": {"phase": "Running"}}
    pending = {**dra, "status": {}}
    assert live_gangs([dra], NODE) == live_gangs([pending], NODE) == {("team", "job")}

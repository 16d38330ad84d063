"""A claim's CDI spec: the device plugin's env and mounts, the claim's region, its device nodes;
written atomically and removed."""

from __future__ import annotations

import json
import os

import pytest

from gpuslice.container.edits import Layout, Mount, container_edits
from gpuslice.dra import cdi
from gpuslice.shim import AGENT_BOARD, RegionSpec

UID = "f9e5ee98-602d-4677-a402-1792e3d46836"
U0, U1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"
LAYOUT = Layout(library_host="/s/lib/libgpuslice.so", preload_host="/s/lib/ld.so.preload",
                regions_host="/s/regions", board_host="/s/board")
REGION = RegionSpec(device_uuids=(U0, U1), limits=(4096 << 20, 1024 << 20), sm_limit=30)


def test_the_spec_gives_the_claim_the_device_plugins_env_and_mounts_and_its_device_nodes():
    spec = cdi.build(UID, REGION, [3, 1], "/s/dra/regions/" + UID, LAYOUT)
    assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "gpuslice.io/claim"
    (dev,) = spec["devices"]
    assert dev["name"] == UID
    edits = dev["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "1024m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["GPUSLICE_DEVICE_UUIDS"] == f"{U0},{U1}"
    assert env["NVIDIA_VISIBLE_DEVICES"] == f"{U0},{U1}"
    want_env, want_mounts = container_edits(REGION, "/s/dra/regions/" + UID, LAYOUT)
    assert env == want_env, "one builder for both paths"
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    assert mounts["/var/run/gpuslice"]["hostPath"] == "/s/dra/regions/" + UID
    assert mounts["/var/run/gpuslice"]["options"][0] == "rw"
    assert mounts["/etc/ld.so.preload"]["options"][0] == "ro"
    assert mounts[AGENT_BOARD]["hostPath"] == "/s/board"
    assert [Mount(m["containerPath"], m["hostPath"], m["options"][0] == "ro")
            for m in edits["mounts"]] == list(want_mounts)
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/nvidia3", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools"]


def test_a_claim_is_handed_its_pods_gang_directory_as_a_container_is():
    """The plugin passes the gang of the claim's pods (dra/plugin.py); the spec mounts it with
    the device plugin path's env, and only under a compute limit."""
    layout = Layout(**{**LAYOUT.__dict__, "gangs_host": "/s/gangs"})
    edits = cdi.build(UID, REGION, [0], "/r", layout,
                      gang_dir="/s/gangs/team/job")["devices"][0]["containerEdits"]
    assert "GPUSLICE_GANG_DIR=/var/run/gpuslice-gang" in edits["env"]
    assert {"containerPath": "/var/run/gpuslice-gang", "hostPath": "/s/gangs/team/job",
            "options": ["rw", "nosuid", "nodev", "rbind"]} in edits["mounts"]
    want_env, want_mounts = container_edits(REGION, "/r", layout, gang_dir="/s/gangs/team/job")
    assert dict(e.split("=", 1) for e in edits["env"]) == want_env
    assert [m["hostPath"] for m in edits["mounts"]] == [m.host_path for m in want_mounts]
    plain = cdi.build(UID, REGION, [0], "/r", layout)["devices"][0]["containerEdits"]
    assert plain == cdi.build(UID, REGION, [0], "/r", LAYOUT)["devices"][0]["containerEdits"], \
        "no gang: the spec of before"
    unlimited = RegionSpec(device_uuids=(U0,), limits=(4096 << 20,), sm_limit=0)
    assert cdi.build(UID, unlimited, [0], "/r", layout, gang_dir="/s/gangs/team/job") == \
        cdi.build(UID, unlimited, [0], "/r", layout), "no compute limit: no gang holds"


def test_the_spec_is_written_under_the_contracts_name_and_removed(tmp_path):
    spec = cdi.build(UID, REGION, [0, 1], "/r", LAYOUT)
    p = cdi.write(tmp_path / "cdi", UID, spec)
    assert p == tmp_path / "cdi" / f"gpuslice.io-claim_{UID}.json"
    assert json.loads(p.read_text()) == spec
    assert oct(os.stat(p).st_mode & 0o777) == "0o644"
    assert os.listdir(tmp_path / "cdi") == [p.name], "no temporary file left"
    assert cdi.device_id(UID) == f"gpuslice.io/claim={UID}"
    assert cdi.remove(tmp_path / "cdi", UID) is True
    assert cdi.remove(tmp_path / "cdi", UID) is False


def test_a_failed_write_leaves_the_old_spec_and_no_temporary_file(tmp_path, monkeypatch):
    old = cdi.write(tmp_path, UID, {"old": 1})

    def crash(*a):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        cdi.write(tmp_path, UID, {"new": 1})
    assert json.loads(old.read_text()) == {"old": 1}
    assert os.listdir(tmp_path) == [old.name]


@pytest.mark.parametrize("uid", ["../etc", "a/b", "", ".hidden", "x" * 200])
def test_a_uid_that_is_no_uid_never_becomes_a_path(uid):
    with pytest.raises(ValueError, match="not a Kubernetes uid"):
        cdi.path("/var/run/cdi", uid)


@pytest.mark.parametrize(("gpus", "sm_limit", "gang"), [
    ((U0, U1), 30, True), ((U0,), 50, True),  # two ranks on one GPU are a job too
    ((U0,), 100, False), ((U0, U1), 0, False)])  # no compute limit: nothing to hold together
def test_gang_holds_for_every_container_under_a_compute_limit(gpus: tuple[str, ...],
                                                              sm_limit: int, gang: bool) -> None:
    region = RegionSpec(device_uuids=gpus, limits=(1024 << 20,) * len(gpus), sm_limit=sm_limit)
    env, _ = container_edits(region, "/s/regions/x", LAYOUT)
    assert ("GPUSLICE_COMPUTE_PHASE" in env) is gang
    assert env.get("GPUSLICE_COMPUTE_PHASE", "1") == "1"

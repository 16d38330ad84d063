"""A prepared claim's CDI edits, applied as a container runtime applies them, give the real
libgpuslice (over the fake driver) the claim's consumedCapacity as its cap whatever the tenant's
env says (the region at the library's fixed path wins); the exporter labels the claim's usage
with claim, share and pod, and the watchdog finds its processes over the cap.
"Containers" are `unshare -m` processes with the spec's mounts bound at their container paths
(root and unshare(1) needed, as in tests/native/test_agent_region_wins_over_env.py); the
library comes through LD_PRELOAD instead of the spec's /etc/ld.so.preload mount."""

from __future__ import annotations

import json
import shlex
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "native"))

from harness import (
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    Harness,
    MiB,
    Result,
    read_line,
)

from gpuslice import model
from gpuslice.container.edits import Layout
from gpuslice.dra import DRIVER, cdi
from gpuslice.dra.claims import NodeDevice
from gpuslice.dra.plugin import DraPlugin
from gpuslice.node.exporter import AgentMetrics, UsageCollector
from gpuslice.node.nvml import FakeBackend
from gpuslice.node.settings import WatchdogConfig
from gpuslice.node.watchdog import Watchdog
from gpuslice.shim import AGENT_BOARD, AGENT_REGION, DEVICES_OFFSET

FAKE_GPU = "GPU-face0000-0000-0000-0000-000000000000"  # the fake driver's device 0
UID = "5a1b2c3d-0000-4000-8000-00000000c1a1"
SHARE = "e4db67a0-2f6c-4a9a-8e46-36279f468e0e"
POD_UID = "9f9f9f9f-0000-4000-8000-000000000001"
CLAIM = {"metadata": {"name": "train", "namespace": "team-a", "uid": UID},
         "status": {"allocation": {"devices": {"results": [{
             "driver": DRIVER, "pool": "node-a", "request": "gpu", "device": "gpu-0",
             "shareID": SHARE, "consumedCapacity": {"memory": "64Mi", "cores": "30"}}]}},
             "reservedFor": [{"resource": "pods", "name": "trainer", "uid": POD_UID}]}}
# what a tenant's own env (applied after the spec's) tries: a bigger cap, no compute limit, a
# region of its own
TENANT = {"CUDA_DEVICE_MEMORY_LIMIT_0": "1Ti", "CUDA_DEVICE_MEMORY_LIMIT": "1Ti",
          "CUDA_DEVICE_SM_LIMIT": "0", "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/own.region",
          "LIBCUDA_LOG_LEVEL": "2"}


class OneClaim:
    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return CLAIM

    async def set_devices(self, *args: Any) -> None:
        pass


@pytest.fixture
async def prepared(tmp_path) -> tuple[DraPlugin, dict[str, Any]]:
    """The claim prepared by the plugin; its CDI spec's container edits."""
    state = tmp_path / "state"
    layout = Layout(library_host="/unused/libgpuslice.so", preload_host="/unused/ld.so.preload",
                    regions_host=str(state / "regions"), board_host=str(tmp_path / "board"))
    (tmp_path / "board").mkdir()
    plugin = DraPlugin(driver=DRIVER, node="node-a", api=OneClaim(),
                       devices=lambda: {"gpu-0": NodeDevice("gpu-0", FAKE_GPU, 0, 1024, True)},
                       state_dir=state, cdi_dir=tmp_path / "cdi", layout=layout)
    await plugin.prepare("team-a", "train", UID)
    await plugin.stop()
    spec = json.loads(cdi.path(tmp_path / "cdi", UID).read_text())
    return plugin, spec["devices"][0]["containerEdits"]


def _cannot_emulate_a_container() -> bool:
    if shutil.which("unshare") is None:
        return True
    probe = ["unshare", "--mount", "sh", "-c", "mount -t tmpfs none /run"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode != 0


def in_container(gs: Harness, edits: dict[str, Any], *cmds: object) -> Result:
    """Run the probe with the spec's env (then the tenant's) and its region and board mounts."""
    binds = [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]
             if m["containerPath"] in (str(Path(AGENT_REGION).parent), AGENT_BOARD)]
    assert len(binds) == 2, edits["mounts"]
    script = "mount -t tmpfs none /run && " + " && ".join(
        f"mkdir -p {shlex.quote(c)} && mount --bind {shlex.quote(h)} {shlex.quote(c)}"
        for h, c in binds) + ' && exec "$@"'
    env = gs.env(extra={**dict(e.split("=", 1) for e in edits["env"]), **TENANT})
    argv = ["unshare", "--mount", "sh", "-c", script, "sh", str(gs.bins["probe"]),
            *map(str, cmds)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.skipif(_cannot_emulate_a_container(), reason="needs root, unshare(1), mount rights")
def test_the_claims_cdi_edits_cap_the_container_whatever_its_env_says(
        binaries, prepared, tmp_path):
    _, edits = prepared
    gs = Harness(binaries, tmp_path)
    res = in_container(gs, edits, "init", "ctx", "alloc", 48 * MiB, "alloc", 32 * MiB, "info")
    assert res.one("init").rc == CUDA_SUCCESS, res.describe()
    fits, over = (a.rc for a in res.of("alloc"))
    assert (fits, over) == (CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY), (
        f"consumedCapacity 64Mi holds against CUDA_DEVICE_MEMORY_LIMIT_0=1Ti:\n{res.describe()}")
    assert res.one("info").int("total") == 64 * MiB, res.describe()
    assert not Path("/tmp/own.region").exists(), "the tenant's region path was not used"
    assert "compute: limit 30% of GPU time" in "\n".join(res.log_lines()), res.describe()


def _metrics(c: UsageCollector) -> dict[tuple[str, tuple], float]:
    m = AgentMetrics()
    m.add_usage(c)
    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v))): s.value
            for fam in text_string_to_metric_families(generate_latest(m.registry).decode())
            for s in fam.samples}


GPUS = [model.GPU(uuid=FAKE_GPU, model="Fake", memory_mib=1024)]


@pytest.fixture
def holding(binaries, prepared, tmp_path) -> Iterator[tuple[DraPlugin, Any]]:
    """A process of the claim (the library, the claim's region) holding 48 MiB; its slot."""
    plugin, _ = prepared
    proc = Harness(binaries, tmp_path).spawn(
        "init", "ctx", 0, "alloc", 48 * MiB, "hold", limit="1Ti",
        region=plugin.root / UID / "region", extra={"GPUSLICE_DEVICE_UUIDS": FAKE_GPU})
    try:
        assert read_line(proc, "alloc").rc == 0
        yield plugin, next(p for p in plugin_region(plugin).processes if p.state == "live")
    finally:
        proc.kill()
        proc.wait()


def watchdog(plugin: DraPlugin, tmp_path: Path, nvml: dict[int, int]) -> Watchdog:
    """The agent's watchdog for the claim, NVML saying `nvml` (pid -> bytes) of the GPU."""
    fake = FakeBackend.with_uuids([FAKE_GPU])
    fake.set_processes(FAKE_GPU, nvml)
    return Watchdog(fake, tmp_path / "none", WatchdogConfig(), gpus=lambda: GPUS,
                    assignments=dict, pods_fresh=lambda: True, claims_root=plugin.root,
                    claims=plugin.prepared)


def test_the_claims_usage_is_exported_with_claim_share_and_pod_and_watched(holding, tmp_path):
    plugin, live = holding
    c = UsageCollector(FakeBackend.with_uuids([FAKE_GPU]), tmp_path / "none", lambda: GPUS,
                       dict, dict, claims_root=plugin.root, claims=plugin.prepared)
    got = _metrics(c)
    labels = (("claim", "team-a/train"), ("namespace", "team-a"), ("pod", "trainer"),
              ("share", SHARE))
    assert got[("gpuslice_container_memory_used_bytes", (*labels, ("uuid", FAKE_GPU)))] == \
        48 * MiB
    assert got[("gpuslice_container_memory_limit_bytes", (*labels, ("uuid", FAKE_GPU)))] == \
        64 * MiB
    assert got[("gpuslice_container_compute_limit_percent", labels)] == 30
    assert got[("gpuslice_container_processes", labels)] == 1

    dog = watchdog(plugin, tmp_path, {live.nvml_pid or live.pid: 200 * MiB, 999999: MiB})
    found = {(v.kind, v.pod_uid, v.container) for v in dog.check()}
    assert found == {("over_limit", UID, ""), ("unmanaged", None, None)}, (
        "the claim's process is over its cap; a process without the library on the GPU a "
        "claim shares is unmanaged")
    assert dog.sweep(set(), now=float("inf")) == [], "the pod sweep never removes claims"
    assert (plugin.root / UID / "region").exists()


def test_a_tenant_that_raises_its_cap_in_the_region_file_is_still_caught_by_the_watchdog(
        holding, tmp_path):
    plugin, live = holding
    # the file is 0666 (every process of the claim accounts in it): any of them can write its
    # own cap (the first device entry's limit, after its 64-byte uuid)
    with open(plugin.root / UID / "region", "r+b") as f:
        f.seek(DEVICES_OFFSET + 64)
        f.write(struct.pack("<Q", 1 << 40))
    assert plugin_region(plugin).by_uuid()[FAKE_GPU].limit == 1 << 40
    (v,) = watchdog(plugin, tmp_path, {live.nvml_pid or live.pid: 200 * MiB}).check()
    assert (v.kind, v.pod_uid, v.limit_bytes) == ("over_limit", UID, 64 * MiB), (
        "the cap is the claim's consumedCapacity as prepared, not what its region now says")


def plugin_region(plugin: DraPlugin) -> Any:
    from gpuslice.container import regions

    (cr,) = regions.scan_claims(plugin.root)
    return cr.region

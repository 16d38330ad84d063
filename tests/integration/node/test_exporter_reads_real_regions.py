"""The exporter and the watchdog read regions the node agent created and the real libgpuslice
uses (over the fake driver), labelled with the pod that owns them; regions a tenant tampered
with never hang or crash a scrape."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "native"))

from harness import (
    Harness,
    MiB,
    Spawned,
    read_line,
)

from gpuslice import model
from gpuslice.container import regions
from gpuslice.node.exporter import AgentMetrics, UsageCollector
from gpuslice.node.nvml import FakeBackend
from gpuslice.node.settings import WatchdogConfig
from gpuslice.node.watchdog import Watchdog
from gpuslice.shim import RegionSpec

FAKE_GPU = "GPU-face0000-0000-0000-0000-000000000000"  # the fake driver's device 0
UID = "0b6a1f9e-1111-4222-8333-444455556666"


def _metrics(collector: UsageCollector) -> dict[tuple[str, tuple], float]:
    """Samples by name and labels, an empty label left out (as Prometheus stores it)."""
    m = AgentMetrics()
    m.add_usage(collector)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v)))] = s.value
    return out


def _gpus() -> list[model.GPU]:
    return [model.GPU(uuid=FAKE_GPU, model="Fake", memory_mib=1024, split_count=4)]


def _assignments() -> dict[str, model.PodAssignment]:
    return {UID: model.PodAssignment(node="n", containers=(model.ContainerAssignment(
        container="main", slices=(model.GPUSlice(uuid=FAKE_GPU, memory_mib=64, cores=0),)),))}


def test_usage_written_by_the_library_is_exported_per_container_and_gpu(binaries, tmp_path):
    root = tmp_path / "regions"
    d = regions.prepare(root, UID, "main")
    regions.place(d / "region", RegionSpec((FAKE_GPU,), (64 * MiB,)))  # as Allocate writes it
    gs = Harness(binaries, tmp_path)
    proc = gs.spawn("init", "ctx", 0, "alloc", 48 * MiB, "hold", limit="1Ti",  # the region wins
                    region=d / "region", extra={"GPUSLICE_DEVICE_UUIDS": FAKE_GPU})
    try:
        assert read_line(proc, "alloc").rc == 0
        c = UsageCollector(FakeBackend.with_uuids([FAKE_GPU]), root, _gpus,
                           lambda: {UID: ("team-a", "trainer")}, _assignments)
        got = _metrics(c)
        labels = (("container", "main"), ("namespace", "team-a"), ("pod", "trainer"),
                  ("uuid", FAKE_GPU))
        assert got[("gpuslice_container_memory_used_bytes", labels)] == 48 * MiB
        assert got[("gpuslice_container_memory_limit_bytes", labels)] == 64 * MiB
        assert got[("gpuslice_container_processes", labels[:3])] == 1
        assert got[("gpuslice_gpu_slots_used", (("index", "0"), ("model", "Fake"),
                                                ("uuid", FAKE_GPU)))] == 1
        # the watchdog: NVML says this process holds more than the container's limit
        region = regions.scan(root)[0].region
        nvml_pid = next(p.nvml_pid or p.pid for p in region.processes if p.state == "live")
        fake = FakeBackend.with_uuids([FAKE_GPU])
        fake.set_processes(FAKE_GPU, {nvml_pid: 200 * MiB, 999999: 10 * MiB})
        dog = Watchdog(fake, root, WatchdogConfig(), gpus=_gpus, assignments=_assignments,
                       pods_fresh=lambda: True)
        found = {(v.kind, v.pids, v.pod_uid) for v in dog.check()}
        assert found == {("over_limit", (nvml_pid,), UID), ("unmanaged", (999999,), None)}
        assert dog.check() == [], "each process is reported once"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(20)
def test_a_tampered_region_never_hangs_or_crashes_a_scrape(tmp_path):
    root = tmp_path / "regions"
    fifo = regions.prepare(root, "pod-fifo", "c") / "region"
    os.mkfifo(fifo)
    huge = regions.prepare(root, "pod-huge", "c") / "region"
    with open(huge, "wb") as f:
        f.truncate(1 << 40)  # sparse: 1 TiB claimed
    link = regions.prepare(root, "pod-link", "c") / "region"
    link.symlink_to("/etc/passwd")
    (regions.prepare(root, "pod-dir", "c") / "region").mkdir()
    (regions.prepare(root, "pod-junk", "c") / "region").write_bytes(b"\0" * 5000)
    (root / "pod-linked-dir").mkdir()
    (root / "pod-linked-dir" / "c").symlink_to("/etc")
    c = UsageCollector(FakeBackend.with_count(1), root, _gpus, dict, dict)
    got = _metrics(c)
    assert got[("gpuslice_region_unreadable", ())] == 5, "each tampered file counted, none read"
    assert not any(k[0] == "gpuslice_container_memory_used_bytes" for k in got)


def test_sweep_removes_regions_of_pods_gone_but_only_with_a_fresh_pod_list(tmp_path):
    root = tmp_path / "regions"
    regions.prepare(root, "live", "c")
    regions.prepare(root, "gone", "c")
    (root / "gone" / "c" / "escape").symlink_to("/etc")
    fresh = [False]
    dog = Watchdog(FakeBackend.with_count(1), root, WatchdogConfig(region_grace_seconds=0),
                   gpus=list, assignments=dict, pods_fresh=lambda: fresh[0])
    assert dog.sweep({"live"}) == [], "never while the pod list may be stale"
    fresh[0] = True
    assert dog.sweep({"live"}) == ["gone"]
    assert sorted(p.name for p in root.iterdir()) == ["live"] and Path("/etc/passwd").exists()


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


def test_a_process_in_its_own_pid_namespace_is_matched_to_its_container(binaries, tmp_path):
    """As in a container: the region holds the pid the process sees (1), NVML on the host
    lists the host pid; the watchdog must still know whose process it is."""
    if not _can_unshare():
        pytest.skip("cannot make a pid namespace here (unshare --pid needs root or userns)")
    root = tmp_path / "regions"
    d = regions.prepare(root, UID, "main")
    gs = Harness(binaries, tmp_path)
    env = gs.env(limit="64Mi", region=d / "region", extra={"GPUSLICE_DEVICE_UUIDS": FAKE_GPU})
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", str(binaries["probe"]),
            "init", "ctx", "0", "alloc", str(48 * MiB), "hold"]
    proc = Spawned(subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE))
    try:
        assert read_line(proc, "alloc").rc == 0
        children = Path(f"/proc/{proc.popen.pid}/task/{proc.popen.pid}/children").read_text()
        host_pid = int(children.split()[0])
        (slot,) = [p for p in regions.scan(root)[0].region.processes if p.state == "live"]
        assert slot.pid != host_pid, "the slot holds the namespace pid, not the host's"
        fake = FakeBackend.with_uuids([FAKE_GPU])
        fake.set_processes(FAKE_GPU, {host_pid: 200 * MiB})
        dog = Watchdog(fake, root, WatchdogConfig(), gpus=_gpus, assignments=_assignments,
                       pods_fresh=lambda: True)
        assert [(v.kind, v.pids, v.pod_uid) for v in dog.check()] == [
            ("over_limit", (host_pid,), UID)], "its container's process, over the limit"
    finally:
        proc.kill()
        proc.wait()

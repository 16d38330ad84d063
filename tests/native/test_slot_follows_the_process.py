"""A process's slot follows the process: exec() does not leave the pre-exec slot live and charged;
a process of another pid namespace cannot use (and so cannot reclaim live slots of) a region made
in this one; after a SIGKILL, cuMemGetInfo and NVML stop counting the dead process within one
second; with every slot taken the log says so, cuMemGetInfo reports no free memory and the
allocation is refused (slot reclaim after a clearer dies: tests/native/unit/test_region.c)."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB, Result, read_line

from gpuslice.shim import MAX_SLOTS, SLOT_LIVE, SLOT_SIZE, SLOTS_OFFSET, Region

LIMIT = 64 * MiB
CUDA_ERROR_OPERATING_SYSTEM = 304


def test_exec_releases_the_slot_of_the_image_before_it(gs: Harness) -> None:
    proc = gs.spawn("init", "ctx", "alloc", 48 * MiB, "exec",
                    "init", "ctx", "alloc", LIMIT, "hold", limit="64Mi")
    try:
        assert read_line(proc, "alloc").rc == CUDA_SUCCESS
        after = read_line(proc, "alloc")
        assert after.rc == CUDA_SUCCESS, (
            f"exec freed the 48 MiB: the new image gets the whole cap: {after.text}\n{proc.stderr}")
        read_line(proc, "hold")
        mine = [p for p in Region.read(gs.region).processes if p.pid == proc.pid]
        assert [(p.state, p.used[0]) for p in mine] == [("live", LIMIT)], (
            f"one live slot for the pid, charged once: {mine}")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="needs unshare(1) and root for a pid namespace")
def test_a_process_of_another_pid_namespace_cannot_reclaim_live_slots(gs: Harness) -> None:
    holder = gs.spawn("init", "ctx", "alloc", 48 * MiB, "hold", limit="64Mi")
    try:
        assert read_line(holder, "alloc").rc == CUDA_SUCCESS
        # in its own pid namespace (a second container on the same region path) the holder's pid
        # does not exist: before the fix it reclaimed the holder's live slot and took its bytes
        argv = ["unshare", "--pid", "--fork", "--mount-proc", str(gs.bins["probe"]), "init", "ctx",
                "alloc", 48 * MiB]
        proc = subprocess.run(list(map(str, argv)), env=gs.env(limit="64Mi"), capture_output=True,
                              text=True, timeout=30)
        res = Result(list(map(str, argv)), proc.returncode, proc.stdout, proc.stderr)
        assert res.one("init").rc == CUDA_ERROR_OPERATING_SYSTEM, res.describe()
        assert any("another pid namespace" in ln for ln in res.log_lines("E")), res.describe()
        dev = Region.read(gs.region).devices[0]
        assert dev.used == 48 * MiB, f"the holder is still charged, its slot untouched: {dev}"
    finally:
        holder.kill()
        holder.wait()


def _until(check, what: str, limit_s: float = 1.0) -> float:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < limit_s, f"{what} still counted the killed process after 1 s"
        time.sleep(0.02)
    return time.monotonic() - t0


def test_after_a_sigkill_memory_info_and_nvml_stop_counting_the_dead_within_a_second(
        gs: Harness) -> None:
    holder = gs.spawn("init", "ctx", "alloc", 32 * MiB, "hold", limit="64Mi")
    assert read_line(holder, "alloc").rc == CUDA_SUCCESS
    holder.popen.send_signal(signal.SIGKILL)
    holder.wait()

    def info_free() -> bool:
        return gs.probe("init", "ctx", "info", limit="64Mi").one("info").int("free") == LIMIT

    _until(info_free, "cuMemGetInfo")
    holder = gs.spawn("init", "ctx", "alloc", 32 * MiB, "hold", limit="64Mi")
    assert read_line(holder, "alloc").rc == CUDA_SUCCESS
    holder.popen.send_signal(signal.SIGKILL)
    holder.wait()
    _until(lambda: gs.smi(limit="64Mi")[0]["v2_used"] == "0", "NVML memory info")


def _take_every_slot(region: Path) -> None:
    """Every slot live, owned by this (running) test process: a region full of CUDA processes."""
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    start = int(stat[stat.rindex(")") + 2:].split()[19])
    with open(region, "r+b") as f:
        for i in range(MAX_SLOTS):
            f.seek(SLOTS_OFFSET + i * SLOT_SIZE)
            f.write(struct.pack("<iIQ", os.getpid(), SLOT_LIVE, start))
        f.seek(44)  # slot_hwm
        f.write(struct.pack("<I", MAX_SLOTS))


def test_with_every_slot_taken_the_log_and_memory_info_tell_the_truth(gs: Harness) -> None:
    assert gs.probe("init", limit="64Mi").one("init").rc == CUDA_SUCCESS
    _take_every_slot(gs.region)
    res = gs.probe("init", "ctx", "info", "alloc", 2 * MiB, "alloc", 2 * MiB, limit="64Mi")
    info = res.one("info")
    assert (info.int("total"), info.int("free")) == (LIMIT, 0), (
        f"nothing can be allocated, so nothing is free:\n{res.describe()}")
    assert [a.rc for a in res.of("alloc")] == [CUDA_ERROR_OUT_OF_MEMORY] * 2, res.describe()
    warnings = res.log_lines("W")
    assert warnings and all("slot" in ln and "over limit" not in ln for ln in warnings), (
        f"refusals say why (no free slot), not 'over limit':\n{res.describe()}")
    errors = res.log_lines("E")
    assert any("all 1024 process slots are in use" in ln for ln in errors), res.describe()

"""Two PyTorch processes on one region with a 6 GiB cap: together they never exceed it.

The first holds most of the cap, the second runs out of memory; once the first exits (or is
SIGKILLed) the second can take what it held. Both filling at once (a race for the last bytes).
`gpuslice top --json` on the live region. Ground truth: NVML's per-process used memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import (
    GRANULE,
    GiB,
    MiB,
    accounted_by_pid,
    gpuslice_argv,
    nvml_used_by_pid,
    shim_env,
    source_env,
)

pytestmark = pytest.mark.gpu

CAP = 6 * GiB


def _nvml_sum(nvml: Any, pids: list[int]) -> int:
    return sum(nvml_used_by_pid(nvml, pid) or 0 for pid in pids)


def test_second_process_oom_while_first_holds_most_then_takes_it_after_first_exits(
        libgpuslice: Path, torch_available: None, nvml: Any, region_path: Path,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    env = shim_env(libgpuslice, region_path, limit="6GiB")
    first = children(env)
    assert first.ready["total"] == CAP, f"first process must see the 6 GiB cap: {first.ready}"
    held = first.send(op="alloc", bytes=4 * GiB)
    assert held["ok"], f"4 GiB fits under a 6 GiB cap with one context: {held}\n{first.log()}"

    second = children(env)
    used_by_first = CAP - second.ready["free"]  # what the second sees taken (both contexts)
    assert used_by_first >= 4 * GiB, (
        f"the second process must see the first's 4 GiB as used, sees "
        f"{used_by_first / MiB:.0f} MiB (the region is not shared?)")
    too_much = second.send(op="alloc", bytes=2 * GiB)
    assert not too_much["ok"] and too_much["error"] == "OutOfMemoryError", (
        f"4 GiB + two contexts + 2 GiB exceeds 6 GiB: the second must OOM, got {too_much}")
    small = second.send(op="alloc", bytes=256 * MiB)
    assert small["ok"], f"256 MiB still fits beside the first's 4 GiB: {small}\n{second.log()}"
    together = _nvml_sum(nvml, [first.pid, second.pid])
    assert together <= CAP + 2 * GRANULE, (
        f"NVML: both processes use {together / MiB:.0f} MiB together, over the 6 GiB cap")

    assert first.close() == 0, f"first exits cleanly; stderr:\n{first.log()}"
    deadline, taken = time.monotonic() + 2.0, {"ok": False}
    while time.monotonic() < deadline and not taken["ok"]:
        taken = second.send(op="alloc", bytes=4 * GiB)
        if not taken["ok"]:
            time.sleep(0.1)
    record("two_processes_share_cap", cap=CAP, first_held=4 * GiB, seen_used=used_by_first,
           nvml_together=together, second_took_after_exit=taken["ok"])
    assert taken["ok"], (
        f"within 2 s of the first exiting its 4 GiB must be free for the second: {taken}\n"
        f"{second.log()}")
    assert second.close() == 0


def test_two_processes_filling_at_once_never_exceed_the_cap_together(
        libgpuslice: Path, torch_available: None, nvml: Any, region_path: Path,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    env = shim_env(libgpuslice, region_path, limit="6GiB")
    a, b = children(env), children(env)
    for child in (a, b):  # both commands go out before either reply is read: a real race
        child.post(op="fill", chunks=[64 * MiB, 2 * MiB])
    got_a, got_b = a.reply(), b.reply()
    together = _nvml_sum(nvml, [a.pid, b.pid])
    record("two_processes_race", cap=CAP, a=got_a["allocated"], b=got_b["allocated"],
           nvml_together=together)
    for name, got, child in (("a", got_a, a), ("b", got_b, b)):
        assert got["error"] == "OutOfMemoryError", (
            f"process {name} must stop on OutOfMemoryError, got {got['error']}\n{child.log()}")
    assert got_a["allocated"] + got_b["allocated"] <= CAP, (
        f"tensors granted together ({(got_a['allocated'] + got_b['allocated']) / MiB:.0f} MiB) "
        f"exceed the 6 GiB cap")
    assert together <= CAP + 2 * GRANULE, (
        f"NVML: both use {together / MiB:.0f} MiB together, over the 6 GiB cap (+2 granules)")
    assert together >= CAP - 256 * MiB, (
        f"NVML: both use only {together / MiB:.0f} MiB at OOM; the cap should be nearly full")


def test_a_sigkilled_holders_bytes_come_back_within_a_second(
        libgpuslice: Path, torch_available: None, region_path: Path,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    env = shim_env(libgpuslice, region_path, limit="6GiB")
    holder, taker = children(env), children(env)
    assert holder.send(op="alloc", bytes=4 * GiB)["ok"], f"4 GiB fits: {holder.log()}"
    refused = taker.send(op="alloc", bytes=4 * GiB)
    assert not refused["ok"], f"4 + 4 GiB cannot both fit under 6 GiB: {refused}"
    os.kill(holder.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    taken, tries = {"ok": False}, 0
    while not taken["ok"] and time.monotonic() - killed_at < 5.0:
        taken = taker.send(op="alloc", bytes=4 * GiB)
        tries += 1
        if not taken["ok"]:
            time.sleep(0.02)
    latency = time.monotonic() - killed_at
    record("sigkill_recovery", cap=CAP, held=4 * GiB, recovered=taken["ok"],
           latency_s=round(latency, 3), tries=tries)
    assert taken["ok"] and latency <= 1.0, (
        f"a SIGKILLed process's 4 GiB must be usable by another within 1 s: ok={taken['ok']} "
        f"after {latency:.2f} s and {tries} tries\n{taker.log()}")


def test_gpuslice_top_json_shows_each_live_process_with_its_accounted_bytes(
        libgpuslice: Path, torch_available: None, region_path: Path,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    env = shim_env(libgpuslice, region_path, limit="6GiB")
    a, b = children(env), children(env)
    assert a.send(op="alloc", bytes=1 * GiB)["ok"] and b.send(op="alloc", bytes=2 * GiB)["ok"]
    done = subprocess.run(gpuslice_argv("top", "--region", str(region_path), "--once", "--json"),
                          env=source_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"gpuslice top failed: {done.stderr}"
    snap = json.loads(done.stdout)
    used = {p["pid"]: int(p["used"].get("0", 0)) for p in snap["processes"]}
    record("top_json", pids=sorted(used), used=used, device=snap["devices"][:1])
    for child, held in ((a, 1 * GiB), (b, 2 * GiB)):
        assert child.pid in used, f"top must list pid {child.pid}: {snap['processes']}"
        assert used[child.pid] == accounted_by_pid(region_path, child.pid), (
            "top's per-process number must be the region's")
        assert used[child.pid] >= held, f"pid {child.pid} holds {held} bytes of tensors: {used}"
    device = snap["devices"][0]
    assert device["limit"] == CAP and device["used"] == sum(used.values()), (
        f"device row must show the 6 GiB limit and the sum of the processes: {device}")

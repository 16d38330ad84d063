"""A process killed with SIGKILL while holding memory (or while looping on alloc/free of the whole
cap) never blocks the others: within 1 s another process of the same region can allocate the freed
bytes, and nothing hangs. The killed process is reaped at once, as a shell or container runtime
would do."""

from __future__ import annotations

import random
import signal
import time

import pytest
from harness import CUDA_SUCCESS, Harness, MiB, read_line

from gpuslice.shim import Region

LIMIT = 32 * MiB


@pytest.mark.parametrize("holder", ["holding the whole cap", "looping alloc/free of the whole cap"])
def test_sigkilled_holders_bytes_are_usable_by_another_process_within_a_second(
    gs: Harness, holder: str
) -> None:
    if holder.startswith("holding"):
        proc = gs.spawn("init", "ctx", "alloc", LIMIT, "hold", limit="32Mi")
        read_line(proc, "hold")
    else:
        proc = gs.spawn("init", "ctx", "alloc", 2 * MiB, "free", "loop", 0, LIMIT, limit="32Mi")
        read_line(proc, "free")
    try:
        proc.popen.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    taker = gs.spawn("init", "ctx", "retry", LIMIT, 1000, "hold", limit="32Mi")
    try:
        retry = read_line(taker, "retry", timeout=10)
        assert retry.rc == CUDA_SUCCESS, f"the dead holder's bytes must come back: {retry.text}"
        assert float(retry.kv["ms"]) < 1000.0, f"reclaimed too late: {retry.text}"
        region = Region.read(gs.region)
        dev = region.devices[0]
        assert (dev.used, dev.pending) == (LIMIT, 0), f"only the new process is charged: {dev}"
        assert [p.pid for p in region.processes if p.state == "live" and p.alive] == [taker.pid], (
            f"the killed holder's slot must be gone: {region.processes}"
        )
    finally:
        taker.kill()
        taker.wait()


def test_a_killed_process_in_the_middle_of_many_does_not_leak_its_share(gs: Harness) -> None:
    holders = [gs.spawn("init", "ctx", "alloc", 8 * MiB, "hold", limit="32Mi") for _ in range(4)]
    try:
        for h in holders:
            assert read_line(h, "alloc").rc == CUDA_SUCCESS
        victim = holders[1]
        victim.popen.send_signal(signal.SIGKILL)
        victim.wait()
        res = gs.probe("init", "ctx", "retry", 8 * MiB, 1000, "alloc", 2 * MiB, limit="32Mi")
        assert res.one("retry").rc == CUDA_SUCCESS, res.describe()
        assert res.one("alloc").rc != CUDA_SUCCESS, f"the cap is full again:\n{res.describe()}"
    finally:
        for h in holders:
            h.kill()
            h.wait()


def test_holders_killed_at_random_points_of_an_alloc_free_loop_never_wedge_the_cap(
    gs: Harness,
) -> None:
    # A kill can land between "pending published" and "committed": that half-done reservation
    # must be reclaimed like any other. Five kills at random points make hitting it likely.
    rng = random.Random(7)
    for round_ in range(5):
        looper = gs.spawn("init", "ctx", "alloc", 2 * MiB, "free", "loop", 0, LIMIT, limit="32Mi")
        read_line(looper, "free")
        time.sleep(rng.uniform(0.01, 0.1))
        looper.popen.send_signal(signal.SIGKILL)
        looper.wait()
        res = gs.probe("init", "ctx", "retry", LIMIT, 1000, limit="32Mi", timeout=10)
        retry = res.one("retry")
        assert retry.rc == CUDA_SUCCESS, (
            f"round {round_}: the killed looper's reservation stayed past 1 s: {retry.text}"
            f"; region slots: {Region.read(gs.region, check_alive=False).processes[-3:]}"
        )

"""Budget and board times written on another clock never stall launches (issue 7 item 1).

The compute budget (`tat_ns` in the region) and the board heartbeats are CLOCK_MONOTONIC
stamps. A region or board file that outlives a reboot (hostPath, a persistent --region), a
restored checkpoint, or a process in a time namespace whose clock runs ahead leaves stamps far
ahead of this clock. Before the fix every launch then waited for ever (budget) and
work-conserving mode never borrowed (a "future" heartbeat looked like a tenant with work). Each
test writes such stamps into real files (offsets from native/include/gpuslice/) and checks that a
saturating launch loop finishes promptly."""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from compute_loops import launch_loop_ms
from harness import Harness

COMPUTE0 = 4096 + 256  # device entry 0's compute block (region.h, compute_shared.h)
TAT, BOOT_ID = COMPUTE0 + 0, COMPUTE0 + 80
BOARD_HEADER, BOARD_SLOT = 64, 64  # compute/board.h
FAR = 10**6 * 10**9  # a million seconds ahead: a clock of another boot


def _loop_ms(gs: Harness, region: Path | None = None, **extra: str) -> float:
    """300 ms of GPU work at a 30 % limit (the default region), or as `extra` says."""
    return launch_loop_ms(gs, sm="30", region=region, extra=extra, timeout=20)


def _first_launch(gs: Harness) -> None:
    """Creates the region (and its budget) with one tiny launch at 30 %."""
    launch_loop_ms(gs, blocks=1, count=1, sm="30")


def _poke(path: Path, offset: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<Q", value))


def _peek(path: Path, offset: int) -> int:
    return struct.unpack_from("<Q", path.read_bytes(), offset)[0]


def test_a_budget_stamped_far_ahead_of_this_clock_counts_as_full(gs: Harness) -> None:
    _first_launch(gs)
    _poke(gs.region, TAT, time.monotonic_ns() + FAR)
    ms = _loop_ms(gs)
    assert ms < 3000, f"300 ms of GPU work at 30 % took {ms:.0f} ms: the stale budget held it"
    assert _peek(gs.region, TAT) < time.monotonic_ns() + 20 * 10**9, "the stale tat was replaced"


def test_a_budget_of_another_boot_is_reset_even_within_the_horizon(gs: Harness) -> None:
    _first_launch(gs)
    assert _peek(gs.region, BOOT_ID) != 0, "the region records the boot its times belong to"
    _poke(gs.region, BOOT_ID, 0x5EED)  # some other boot
    _poke(gs.region, TAT, time.monotonic_ns() + 8 * 10**9)  # 8 s: a debt this clock could owe
    ms = _loop_ms(gs)
    assert ms < 3000, f"took {ms:.0f} ms: 8 s of another boot's debt was paid"


def test_a_future_heartbeat_on_the_board_is_no_tenant_with_work(gs: Harness) -> None:
    board_dir = gs.tmp / "board"
    board_dir.mkdir()
    wc = {"GPUSLICE_COMPUTE_MODE": "work-conserving", "GPUSLICE_BOARD_DIR": str(board_dir)}
    free = launch_loop_ms(gs, region=gs.tmp / "free.region")
    _loop_ms(gs, **wc)  # creates the board and leaves our slot on it
    (board,) = board_dir.glob("GPU-*.board")
    slot = BOARD_HEADER + 7 * BOARD_SLOT  # owner, tenant, heartbeat, priority (0 = high)
    with open(board, "r+b") as f:
        f.seek(slot)
        f.write(struct.pack("<QQQI", 0xDEAD, 0xBEEF, time.monotonic_ns() + FAR, 0))
    ms = _loop_ms(gs, **wc)
    assert ms < free * 2, (
        f"alone on the GPU, work-conserving must borrow: {ms:.0f} ms vs {free:.0f} ms unlimited"
    )
    assert _peek(board, slot) == 0xDEAD, "the planted slot is intact (only its reading changed)"


def _timens_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    res = subprocess.run(
        ["unshare", "-Ur", "--time", "--monotonic=1000000", "true"], capture_output=True
    )
    return res.returncode == 0


@pytest.mark.skipif(not _timens_works(), reason="needs unprivileged user + time namespaces")
def test_a_process_in_a_time_namespace_shares_the_budget_without_stalling_others(
    gs: Harness,
) -> None:
    """The first process runs in a time namespace whose CLOCK_MONOTONIC is 10^6 s ahead; the
    library takes the namespace offset out, so the budget it leaves is on the host's clock."""
    unshare = ["unshare", "-Ur", "--time", "--monotonic=1000000", str(gs.bins["probe"])]
    own_gpu = {"CUDA_DEVICE_SM_LIMIT": "30", "FAKE_CUDA_STATE": str(gs.tmp / "ns.state")}
    res = gs.run([*unshare, "init", "ctx", "launch", "1000", "30"], limit="512MiB", extra=own_gpu)
    assert res.one("launch").rc == 0, res.describe()
    tat = _peek(gs.region, TAT)
    assert tat < time.monotonic_ns() + 20 * 10**9, "the budget is stamped on the host's clock"
    ms = _loop_ms(gs)
    assert ms < 3000, f"took {ms:.0f} ms after a process of another time namespace"

"""The account follows what the driver really holds, when a real GPU changes it.

A pool growing past the cap by more than the request is refused and undone; a context is charged
what NVML lists for the process, not the device-wide delta (which holds memory NVML attributes to
no process), also in a container, where NVML lists host pids; memory the driver takes later
(lazily loaded modules) is charged; memory a pool releases at a synchronisation leaves the
account there; pool reads do not invalidate a global-mode stream capture. Found on an H200 (GPU
suite runs 10 and 13); the fake driver models each behaviour (native/fake)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB, Spawned, read_line

from gpuslice.shim import Region

LIMIT = 64 * MiB
CAP = "64Mi"
CHUNKY_POOL = {"FAKE_CUDA_POOL_CHUNK_MIB": "32"}  # 1 B from an empty pool reserves 32 MiB


def test_a_pool_growing_past_the_cap_by_more_than_the_request_is_refused_and_undone(
    gs: Harness,
) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "alloc",
        40 * MiB,
        "async",
        1,
        "poolattr",
        "info",
        "free",
        "async",
        1,
        "info",
        limit=CAP,
        extra=CHUNKY_POOL,
    )
    refused, granted = res.of("async")
    assert refused.rc == CUDA_ERROR_OUT_OF_MEMORY, (
        f"1 B makes the pool reserve 32 MiB: 40 + 32 MiB passes the 64 MiB cap:\n{res.describe()}"
    )
    assert res.one("poolattr").int("reserved") == 0, (
        f"the refused growth must be given back to the driver (pool trimmed):\n{res.describe()}"
    )
    before, after = res.of("info")
    assert before.int("free") == LIMIT - 40 * MiB, f"a refusal charges nothing:\n{res.describe()}"
    assert granted.rc == CUDA_SUCCESS and after.int("free") == LIMIT - 32 * MiB, (
        f"with room, the pool's whole 32 MiB chunk is charged:\n{res.describe()}"
    )


def test_filling_the_cap_through_a_chunky_pool_never_leaves_the_gpu_over_it(gs: Harness) -> None:
    cmds: list[object] = ["init", "ctx", "alloc", 6 * MiB]
    for size in (20 * MiB, 20 * MiB, 20 * MiB, 8 * MiB, 2 * MiB, 2 * MiB):
        cmds += ["async", size]
    res = gs.probe(*cmds, "info", limit=CAP, extra=CHUNKY_POOL)
    assert CUDA_ERROR_OUT_OF_MEMORY in [ln.rc for ln in res.of("async")], res.describe()
    held = gs.fake().used(live_only=False)  # the probe has exited; its slot is still there
    assert held <= LIMIT, (
        f"the driver holds {held / MiB:.0f} MiB for the process after the fill, over the "
        f"{LIMIT // MiB} MiB cap:\n{res.describe()}"
    )
    assert LIMIT - res.one("info").int("free") == held, (
        f"the account must equal what the driver holds:\n{res.describe()}"
    )


def test_a_pool_that_fits_its_growth_under_the_cap_is_not_refused(gs: Harness) -> None:
    # 1 B reserves 32 MiB; 40 MiB more needs only 8 MiB beyond the spare, and the pool grows by one
    # chunk to exactly the 64 MiB cap: allowed.
    res = gs.probe(
        "init", "ctx", "async", 1, "async", 40 * MiB, "info", limit=CAP, extra=CHUNKY_POOL
    )
    assert [ln.rc for ln in res.of("async")] == [CUDA_SUCCESS, CUDA_SUCCESS], res.describe()
    assert res.one("info").int("free") == 0, res.describe()


UNLISTED = {"FAKE_CUDA_CONTEXT_UNLISTED_MIB": "6"}


def test_a_context_is_charged_what_nvml_lists_for_the_process(gs: Harness) -> None:
    # H200, driver 580: a context raises device used by 524 MiB, NVML lists the process at 518 MiB
    res = gs.probe(
        "init",
        "ctx",
        "info",
        "ctxcreate",
        "info",
        "ctxdestroy",
        "info",
        limit=CAP,
        ctx_mib=8,
        extra=UNLISTED,
    )
    primary, extra, destroyed = (LIMIT - ln.int("free") for ln in res.of("info"))
    assert primary == 8 * MiB, (
        f"NVML lists 8 MiB for the process; the 6 MiB only the device total shows are not the "
        f"process's (charged {primary / MiB:.0f} MiB):\n{res.describe()}"
    )
    assert (extra, destroyed) == (16 * MiB, 8 * MiB), res.describe()


HOST_PIDS = {"FAKE_NVML_PID_OFFSET": "100000"}  # NVML in a container: pids of another namespace


@pytest.mark.parametrize("offset", [0, 100000], ids=["own pid", "host pid"])
def test_a_context_is_charged_what_nvml_lists_under_whichever_pid_it_uses(
    gs: Harness, offset: int
) -> None:
    # Driver 580 lists a process of a pid namespace under its own pid; a driver that lists host
    # pids makes the library find its host pid when the context appears.
    holder = gs.spawn(
        "init",
        "ctx",
        "info",
        "hold",
        limit=CAP,
        ctx_mib=8,
        extra={**UNLISTED, "FAKE_NVML_PID_OFFSET": str(offset)},
    )
    try:
        charged = LIMIT - read_line(holder, "info").int("free")
        assert charged == 8 * MiB, (
            f"NVML lists the process at 8 MiB; the 6 MiB only the device total shows are not "
            f"the process's (charged {charged / MiB:.0f} MiB)"
        )
        slot = next(p for p in Region.read(gs.region).processes if p.pid == holder.pid)
        assert slot.nvml_pid == holder.pid + offset, f"the region records NVML's pid: {slot}"
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("pids", ["same namespace", "container"])
def test_memory_the_driver_takes_after_the_context_is_charged(gs: Harness, pids: str) -> None:
    # lazily loaded modules: the driver takes memory at the first launches, outside any allocation
    res = gs.probe(
        "init",
        "ctx",
        "info",
        "launch",
        1,
        1,
        "sync",
        "info",
        limit=CAP,
        ctx_mib=8,
        extra={"FAKE_CUDA_LAZY_MIB": "16", **(HOST_PIDS if pids == "container" else {})},
    )
    before, after = (LIMIT - ln.int("free") for ln in res.of("info"))
    assert (before, after) == (8 * MiB, 24 * MiB), res.describe()


@contextmanager
def peer_during_slow_creation(
    gs: Harness, fast_cmds: tuple[object, ...], ctx_mib: int, extra: dict[str, str]
) -> Iterator[tuple[Spawned, Spawned]]:
    """A (`init ctx info hold`, its context creation stretched to 1.5 s) and B (`fast_cmds`, then
    `hold`), started while A creates its context; both of one slice."""
    slow = gs.spawn(
        "init",
        "ctx",
        "info",
        "hold",
        limit=CAP,
        ctx_mib=ctx_mib,
        extra={**extra, "FAKE_CUDA_CONTEXT_DELAY_MS": "1500"},
    )
    fast = None
    try:
        read_line(slow, "init")
        fast = gs.spawn(*fast_cmds, "hold", limit=CAP, ctx_mib=ctx_mib, extra=extra)
        yield slow, fast
    finally:
        for proc in (slow, fast):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_with_two_new_processes_in_sight_a_context_is_charged_the_device_delta(
    gs: Harness,
) -> None:
    # A's context is created while B starts: two host pids appear, so A cannot tell which is its
    # own and is charged the device-wide delta (its 8 MiB + the 6 MiB no process is listed for).
    with peer_during_slow_creation(gs, ("init", "ctx", "info"), 8, {**UNLISTED, **HOST_PIDS}) as (
        slow,
        fast,
    ):
        assert LIMIT - read_line(fast, "info").int("free") == 8 * MiB, "B alone found its host pid"
        charged = LIMIT - read_line(slow, "info", timeout=10).int("free")
        assert charged == (8 + 8 + 6 + 6) * MiB, f"charged {charged / MiB:.0f} MiB"


def test_a_context_is_not_charged_what_its_slice_allocated_while_it_was_created(
    gs: Harness,
) -> None:
    # Processes of one slice starting together: B allocates 16 MiB while A's context is being
    # created. The device-wide delta A sees includes B's context and bytes; they are B's.
    with peer_during_slow_creation(gs, ("init", "ctx", "alloc", 16 * MiB), 8, HOST_PIDS) as (
        slow,
        fast,
    ):
        assert read_line(fast, "alloc").rc == CUDA_SUCCESS
        charged = LIMIT - read_line(slow, "info", timeout=10).int("free")
        assert charged == (8 + 8 + 16) * MiB, (
            f"two 8 MiB contexts and 16 MiB make 32 MiB; charged {charged / MiB:.0f} MiB"
        )


@pytest.mark.parametrize("pids", ["same namespace", "container"])
def test_a_peer_that_appears_holding_its_slices_bytes_is_not_taken_for_this_process(
    gs: Harness, pids: str
) -> None:
    # A context the driver lists no memory for (the fake's default) never shows A in NVML's list.
    # B, of the same slice, shows up there during A's creation with the 16 MiB it allocated:
    # the region's charges account for all the device grew by, so that pid is not A's, and A's
    # context is charged nothing (the sigkill-recovery test's four holders met this at random).
    extra = HOST_PIDS if pids == "container" else {}
    with peer_during_slow_creation(gs, ("init", "ctx", "alloc", 16 * MiB), 0, extra) as (
        slow,
        fast,
    ):
        assert read_line(fast, "alloc").rc == CUDA_SUCCESS
        charged = LIMIT - read_line(slow, "info", timeout=10).int("free")
        assert charged == 16 * MiB, f"B's 16 MiB alone; charged {charged / MiB:.0f} MiB"
        slot = next(p for p in Region.read(gs.region).processes if p.pid == slow.pid)
        assert slot.nvml_pid != fast.pid + int(extra.get("FAKE_NVML_PID_OFFSET", 0)), (
            f"A took B's pid for its own: {slot}"
        )


@pytest.mark.parametrize(
    ("sync", "via"),
    [
        ("sync", "dlopen"),
        ("sync", "dlopen:ptsz"),
        ("sync", "procaddr:13000"),
        ("ctxsync", "dlopen"),
        ("ctxsync", "procaddr:13000"),
        ("eventsync", "dlopen"),
    ],
)
def test_memory_a_pool_releases_at_a_synchronisation_leaves_the_account_there(
    gs: Harness, sync: str, via: str
) -> None:
    holder = gs.spawn(
        "init",
        "ctx",
        "async",
        32 * MiB,
        "free",
        sync,
        "poolattr",
        "hold",
        via=via,
        binary="probe_dl",
        limit=CAP,
    )
    try:
        assert read_line(holder, sync).rc == CUDA_SUCCESS
        assert read_line(holder, "poolattr").int("reserved") == 0, "the fake pool released"
        read_line(holder, "hold")
        gpu = gs.smi(limit=CAP)[0]  # another process: reads the region, refreshes nothing
        assert int(gpu["v1_used"]) == 0, (
            f"after {sync} ({via}) the pool holds nothing, so nothing may stay charged: {gpu}"
        )
    finally:
        holder.kill()
        holder.wait()


def test_a_pool_that_keeps_its_reserve_at_synchronisation_stays_charged(gs: Harness) -> None:
    holder = gs.spawn(
        "init",
        "ctx",
        "threshold",
        2**64 - 1,
        "async",
        32 * MiB,
        "free",
        "sync",
        "hold",
        binary="probe_dl",
        limit=CAP,
    )
    try:
        read_line(holder, "hold")
        gpu = gs.smi(limit=CAP)[0]
        assert int(gpu["v1_used"]) == 32 * MiB, f"the pool still reserves 32 MiB: {gpu}"
    finally:
        holder.kill()
        holder.wait()


def test_a_stream_ordered_allocation_under_global_capture_does_not_invalidate_the_capture(
    gs: Harness,
) -> None:
    # PyTorch's torch.cuda.graph captures in global mode, where cuMemPoolGetAttribute is a
    # "potentially unsafe" call: the library must read pools in relaxed mode (H200 suite 13:
    # "operation failed due to a previous error during capture" with backend:cudaMallocAsync).
    res = gs.probe(
        "init", "ctx", "async", 4 * MiB, "capture", 4 * MiB, "info", binary="probe_dl", limit=CAP
    )
    line = res.one("capture")
    assert (line.int("alloc"), line.int("free"), line.rc) == (CUDA_SUCCESS,) * 3, (
        f"the capture must survive the library's pool bookkeeping:\n{res.describe()}"
    )

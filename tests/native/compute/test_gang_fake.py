"""Issue 21 end to end on the fake driver (2 fake GPUs, a kernel of N blocks keeps its GPU busy
N microseconds): gang holds (native/src/compute/gang.c) between processes of one container,
and between containers handed one gang directory (the pods of one job, crew.h), never between
other containers; a gang directory that cannot be used leaves a process to its container.
A process on GPU 1 pays a 400 ms kernel at 50 % (its next launch is held ~375 ms); a process
on GPU 0 that starts a loop meanwhile may wait for that hold (no longer) in the same gang (the
gang treats its processes as ranks of one job: the price of opting in, docs/compute.md), and
runs at once otherwise. And nothing gets past the cap: two saturating processes of one
container on two GPUs each get their limit.
Why ranks of one job must hold together: test_gang.py (the controller with the collective
simulator), GPU: benchmarks/multi_gpu/run.sh."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from harness import Harness, Spawned, launch_loops_ms, read_line

SM = {"CUDA_DEVICE_SM_LIMIT": "50", "GPUSLICE_COMPUTE_PHASE": "1"}  # gang holds on


def _start(gs: Harness, gpu: str, region: Path, *cmds: object, gang: Path | None = None
           ) -> Spawned:
    extra = {"CUDA_VISIBLE_DEVICES": gpu, **SM}
    if gang is not None:  # the pods of one job on a node: the node agent's gang directory
        extra["GPUSLICE_GANG_DIR"] = str(gang)
    return gs.spawn("init", "ctx", 0, *cmds, devices=2, limit="512MiB", region=region,
                    extra=extra)  # fmt: skip


def _light_loop_ms(gs: Harness, region_b: Path, region_a: Path, gang: Path | None = None,
                   count: int = 5) -> tuple[float, float]:
    """(ms of A's `count` x 1 ms loop started while B is held, ms of B's held launch)."""
    b = _start(gs, "1", region_b, "launch", 400000, 1, "launch", 1000, 1, gang=gang)
    a = _start(gs, "0", region_a, "sleep", 600, "launch", 1000, count, gang=gang)
    try:
        read_line(b, "launch", timeout=30)  # the 400 ms kernel
        held = float(read_line(b, "launch", timeout=30).kv["ms"])
        light = float(read_line(a, "launch", timeout=30).kv["ms"])
        return light, held
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


@pytest.mark.parametrize("same_container", [True, False])
def test_a_hold_holds_the_container_and_only_the_container(
    gs: Harness, same_container: bool
) -> None:
    regions = (gs.tmp / "one.region",) * 2 if same_container else (gs.tmp / "b.region",
                                                                   gs.tmp / "a.region")
    light, held = _light_loop_ms(gs, *regions)
    assert held > 300, f"GPU 1's process owed ~375 ms after its 400 ms kernel; held {held:.0f} ms"
    if same_container:  # A starts during B's hold: it may go with B (once B saw it), no later
        assert light < held + 100, f"A's 5 ms loop waited {light:.0f} ms, B's hold {held:.0f} ms"
    else:
        assert light < 100, f"A's 5 ms loop waited for another container: {light:.0f} ms"


@pytest.mark.parametrize("layout", ["one container", "two pods, one gang", "two pods"])
def test_containers_handed_one_gang_directory_hold_together(gs: Harness, layout: str) -> None:
    """The pods of one job (two regions, one GPUSLICE_GANG_DIR: crew.h) hold together like the
    processes of one container. B is held ~750 ms after its 400 ms kernel; A starts a 50 x 1 ms
    loop meanwhile. In a gang B sees A, stops, and catches up for A's queue (it may wait on B:
    gang.h), so B's hold ends with A's loop, or A sees B's stop first and goes with B's release;
    without one B waits out its own debt and A runs at its own pace."""
    gang = gs.tmp / "gang"
    gang.mkdir()
    regions = (gs.tmp / "one.region",) * 2 if layout == "one container" else (
        gs.tmp / "b.region", gs.tmp / "a.region")
    light, held = _light_loop_ms(gs, *regions, gang if layout == "two pods, one gang" else None,
                                 count=50)
    if layout == "two pods":
        assert held > 600, f"B's hold ({held:.0f} ms) ended early: coupled to another container"
        assert light < 200, f"A's 50 ms loop waited for another container: {light:.0f} ms"
    else:  # or A saw B's stop first, and went with B's release
        assert held < 400 or light > 300, (
            f"{layout}: B held {held:.0f} ms, A's 50 ms loop {light:.0f} ms: not one gang")
        assert light < held + 100, f"A's loop ({light:.0f} ms) outlasted B's hold ({held:.0f} ms)"
    if layout == "two pods, one gang":
        assert (gang / "gang").stat().st_size == 128 + 128 * 64


def _loops(gs: Harness, regions: list[Path]) -> list[float]:
    """Two saturating loops started together, 300 x 1 ms on GPU 0 and 1500 x 0.2 ms on GPU 1
    (regions[i]: GPU i's process's region); their wall ms."""
    return launch_loops_ms([_start(gs, "0", regions[0], "launch", 1000, 300),
                            _start(gs, "1", regions[1], "launch", 200, 1500)])  # fmt: skip


def test_processes_in_a_gang_still_get_only_their_limit(gs: Harness) -> None:
    """The attack side: a gang hold never exempts work from the charge, it only waits. Over a
    300 ms loop a process may get its 25 ms bucket plus what it launches catching up (at most
    GS_GANG_OVERDRAFT_NS of wall time of debt, 25 ms of GPU at 50 %) above its share."""
    env_free = {"CUDA_DEVICE_SM_LIMIT": "0"}
    free = [float(gs.probe("init", "ctx", 0, "launch", blocks, count, devices=2,
                           limit="512MiB", region=gs.tmp / f"free{g}.region",
                           extra={"CUDA_VISIBLE_DEVICES": g, **env_free}).of("launch")[-1]
                  .kv["ms"]) for g, blocks, count in (("0", 1000, 300), ("1", 200, 1500))]
    region = gs.tmp / "phase.region"
    limited = _loops(gs, [region, region])
    shares = [f / lim for f, lim in zip(free, limited, strict=True)]
    most = 0.5 + (25 + 25) / 300
    assert all(s <= most for s in shares), f"free {free} vs in phase {limited}: {shares}"


@pytest.mark.parametrize("planted", ["foreign file", "symlink", "full"])
def test_a_gang_directory_that_cannot_be_used_leaves_the_process_to_its_container(
    gs: Harness, planted: str
) -> None:
    """The directory is shared with other pods of the job, so anything may be in it: a file that
    is not a gang file (right size, wrong magic), a symlink to elsewhere, or a file whose 64 slots
    all have live owners. The process says so once and holds with its own container only; its
    kernels still run under its limit."""
    gang = gs.tmp / "gang"
    gang.mkdir()
    size = 128 + 128 * 64
    if planted == "foreign file":
        (gang / "gang").write_bytes(b"x" * size)
        (gang / "gang").chmod(0o666)
    elif planted == "symlink":
        (gs.tmp / "elsewhere").write_bytes(b"\0" * size)
        (gang / "gang").symlink_to(gs.tmp / "elsewhere")
    else:  # every slot claimed (token set) and alive (claimed just now, by the host clock)
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        header = struct.pack("<QII", 0x31474E4147534755, 1, 64).ljust(128, b"\0")
        slot = b"".join(struct.pack("<QQ", 0xFEED + i, now).ljust(128, b"\0") for i in range(64))
        (gang / "gang").write_bytes(header + slot)
        (gang / "gang").chmod(0o666)
    r = gs.probe("init", "ctx", 0, "launch", 1000, 5, devices=2, limit="512MiB",
                 region=gs.tmp / "r.region",
                 extra={"CUDA_VISIBLE_DEVICES": "0", **SM, "GPUSLICE_GANG_DIR": str(gang)})
    assert r.one("launch").kv["rc"] == "0", r.describe()
    said = [t for t in r.log_lines("W") if "gang file" in t]
    assert len(said) == 1 and "its own container only" in said[0], r.describe()
    if planted == "symlink":
        assert (gs.tmp / "elsewhere").read_bytes() == b"\0" * size  # never written through


def _slot_taken(gs: Harness, gang: Path) -> int:
    """The gang file slot a new process of the gang claims (the library's debug line)."""
    r = gs.probe("init", "ctx", 0, "launch", 1000, 1, devices=2, limit="512MiB",
                 region=gs.tmp / "c.region",
                 extra={"CUDA_VISIBLE_DEVICES": "0", **SM, "GPUSLICE_GANG_DIR": str(gang),
                        "LIBCUDA_LOG_LEVEL": "4"})
    said = [t for t in r.log_lines() if "gang file" in t and ", slot " in t]
    assert len(said) == 1, r.describe()
    return int(said[0].rsplit(", slot ", 1)[1])


@pytest.mark.parametrize("killed", [False, True], ids=["alive", "killed"])
def test_a_killed_members_slot_is_free_at_once_a_live_ones_never(gs: Harness, killed: bool
                                                                ) -> None:
    """Another container's pid cannot be checked, so each member holds an open file description
    lock on its slot while it lives (crew.c): SIGKILL drops it with the process, and the slot
    (and the member's place in the gang's holds) is free at once, where its stamps alone would
    keep it for 60 s (11 s in the holds). A live member's slot is never taken."""
    gang = gs.tmp / "gang"
    gang.mkdir()
    member = _start(gs, "1", gs.tmp / "b.region", "launch", 1000, 1, "sleep", 60000, gang=gang)
    try:
        read_line(member, "launch", timeout=30)  # it has claimed slot 0 and launched
        if killed:
            member.kill()
            member.wait()
        assert _slot_taken(gs, gang) == (0 if killed else 1)
    finally:
        member.kill()
        member.wait()


@pytest.mark.parametrize("killed", [False, True], ids=["alive", "killed"])
def test_a_member_killed_with_work_queued_leaves_the_gang_at_once(gs: Harness, killed: bool
                                                                 ) -> None:
    """Killed in the middle of a 400 ms kernel, a member would look like one waiting in a sync
    for up to 11 s by its stamps, and the others would keep treating it as a rank of theirs. Its
    lock says it is gone: another member's launches right after are no gang's (the trace's flag
    1), as they are while it lives."""
    gang, traces = gs.tmp / "gang", gs.tmp / "traces"
    gang.mkdir()
    traces.mkdir()
    member = _start(gs, "1", gs.tmp / "b.region", "launch", 1000, 1, "launch", 400000, 1,
                    "sleep", 60000, gang=gang)
    try:
        read_line(member, "launch", timeout=30)
        time.sleep(0.1)  # the 400 ms kernel runs
        if killed:
            member.kill()
            member.wait()
        r = gs.probe("init", "ctx", 0, "launch", 1000, 20, devices=2, limit="512MiB",
                     region=gs.tmp / "a.region",
                     extra={"CUDA_VISIBLE_DEVICES": "0", **SM, "GPUSLICE_GANG_DIR": str(gang),
                            "GPUSLICE_COMPUTE_TRACE": str(traces)})
        assert r.one("launch").kv["rc"] == "0", r.describe()
    finally:
        member.kill()
        member.wait()
    flags = [int(f[10]) & 1 for t in traces.glob("compute-trace.*.tsv")  # only its own
             for f in (line.split("\t") for line in t.read_text().splitlines()) if f[0] == "L"]
    assert len(flags) == 20, "the other member's launches were traced"
    assert (not any(flags)) if killed else any(flags), flags

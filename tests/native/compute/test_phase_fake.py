"""Issue 21 end to end on the fake driver (2 fake GPUs, a kernel of N blocks keeps its GPU busy
N microseconds): processes of one container on different GPUs launch in phase. A process on
GPU 1 pays a 400 ms kernel at 50 % (its next launch is held ~750 ms); a process of the same
container on GPU 0, whose own budget is full, launches nothing while that hold lasts (it would
otherwise start a collective that spins, charged, until GPU 1's rank is let go). The same
process in another container (its own region) is not held: phase is within one container.
And no GPU's share grows: two processes in phase saturating their GPUs each get their limit.
The controller's unit and simulator tests: test_phase.py."""

from __future__ import annotations

from pathlib import Path

from harness import Harness, Spawned, read_line

SM = {"CUDA_DEVICE_SM_LIMIT": "50"}


def _start(gs: Harness, gpu: str, region: Path, *cmds: object) -> Spawned:
    return gs.spawn("init", "ctx", 0, *cmds, devices=2, limit="512MiB", region=region,
                    extra={"CUDA_VISIBLE_DEVICES": gpu, **SM})  # fmt: skip


def _light_loop_ms(gs: Harness, region_b: Path, region_a: Path) -> tuple[float, float]:
    """(ms of A's 5 x 1 ms loop started while B is held, ms of B's held launch)."""
    b = _start(gs, "1", region_b, "launch", 400000, 1, "launch", 1000, 1)
    a = _start(gs, "0", region_a, "sleep", 600, "launch", 1000, 5)
    try:
        read_line(b, "launch", timeout=30)  # the 400 ms kernel
        held = float(read_line(b, "launch", timeout=30).kv["ms"])
        light = float(read_line(a, "launch", timeout=30).kv["ms"])
        return light, held
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_a_process_waits_while_its_containers_rank_on_another_gpu_is_held(gs: Harness) -> None:
    light, held = _light_loop_ms(gs, gs.tmp / "one.region", gs.tmp / "one.region")
    assert held > 400, f"GPU 1's rank owed ~750 ms after its 400 ms kernel; held {held:.0f} ms"
    # A starts ~600 ms in, GPU 1's rank is held until ~1150 ms: A waits for the rest of it
    assert 100 < light < held + 100, f"A's 5 ms loop took {light:.0f} ms (B held {held:.0f})"


def test_another_containers_hold_is_none_of_its_business(gs: Harness) -> None:
    light, held = _light_loop_ms(gs, gs.tmp / "b.region", gs.tmp / "a.region")
    assert held > 400, f"held {held:.0f} ms"
    assert light < 100, f"a process of another container waited: {light:.0f} ms"


def _loops(gs: Harness, regions: list[Path]) -> list[float]:
    """Two saturating loops started together, 300 x 1 ms on GPU 0 and 1500 x 0.2 ms on GPU 1
    (regions[i]: GPU i's process's region); their wall ms."""
    procs = [_start(gs, "0", regions[0], "launch", 1000, 300),
             _start(gs, "1", regions[1], "launch", 200, 1500)]  # fmt: skip
    try:
        return [float(read_line(p, "launch", timeout=30).kv["ms"]) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_processes_in_phase_still_get_only_their_limit(gs: Harness) -> None:
    """The attack side: following only waits, so nothing gets past the cap."""
    env_free = {"CUDA_DEVICE_SM_LIMIT": "0"}
    free = [float(gs.probe("init", "ctx", 0, "launch", blocks, count, devices=2,
                           limit="512MiB", region=gs.tmp / f"free{g}.region",
                           extra={"CUDA_VISIBLE_DEVICES": g, **env_free}).of("launch")[-1]
                  .kv["ms"]) for g, blocks, count in (("0", 1000, 300), ("1", 200, 1500))]
    region = gs.tmp / "phase.region"
    limited = _loops(gs, [region, region])
    shares = [f / lim for f, lim in zip(free, limited, strict=True)]
    # the 50 ms bucket lets ~25 ms through at full speed (+0.08 on a 300 ms loop)
    assert all(s <= 0.60 for s in shares), f"free {free} vs in phase {limited}: {shares}"
    assert all(s >= 0.35 for s in shares), f"in phase cost more than the limit: {shares}"

"""Issue 21 end to end on the fake driver (2 fake GPUs, a kernel of N blocks keeps its GPU busy
N microseconds): what launching in phase (native/src/compute/phase.c) must NOT do. Processes of
one container on different GPUs that are not ranks of one job (they never reach a step boundary
together) are not held by each other's holds: a process on GPU 1 pays a 400 ms kernel at 50 %
(its next launch is held ~750 ms) while a process of the same container on GPU 0 runs a short
loop at once. And nothing gets past the cap: two saturating processes on two GPUs each get their
limit. That ranks of one job DO follow each other (and why): test_phase.py (the controller with
the collective simulator), GPU: tests/gpu/test_collectives_under_compute_caps.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Harness, Spawned, read_line

SM = {"CUDA_DEVICE_SM_LIMIT": "50", "GPUSLICE_COMPUTE_PHASE": "1"}  # phase on: what it must not do


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


@pytest.mark.parametrize("same_container", [True, False])
def test_an_independent_process_is_not_held_by_another_gpus_hold(
    gs: Harness, same_container: bool
) -> None:
    regions = (gs.tmp / "one.region",) * 2 if same_container else (gs.tmp / "b.region",
                                                                   gs.tmp / "a.region")
    light, held = _light_loop_ms(gs, *regions)
    assert held > 400, f"GPU 1's process owed ~750 ms after its 400 ms kernel; held {held:.0f} ms"
    # A starts ~600 ms in, during B's hold (until ~1150 ms); they never synced together
    assert light < 100, f"A's 5 ms loop waited: {light:.0f} ms (B held {held:.0f} ms)"


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
    """The attack side: phase never exempts work from the charge, it only waits. Over a 300 ms
    loop a process may get its 25 ms bucket plus up to 25 ms of debt carried to the next step
    boundary (GS_PHASE_OVERDRAFT_NS at 50 %) above its share, never more."""
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

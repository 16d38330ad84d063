"""Several processes sharing one region race for its last bytes: the sum granted never exceeds the
cap. Checked three ways: what the processes report, the region seen from outside through
gpuslice.shim.Region, and the fake driver's own accounting (its high-water mark over the whole
run, so a transient overshoot is caught too)."""

from __future__ import annotations

from harness import GRANULE, Harness, MiB, Spawned, read_line

from gpuslice.shim import Region

PROCS = 8


def _finish(procs: list[Spawned]) -> None:
    for p in procs:
        p.wait(timeout=20)


def test_eight_processes_racing_for_the_last_granules_never_exceed_the_cap(gs: Harness) -> None:
    limit = 32 * MiB
    go, done = gs.tmp / "go", gs.tmp / "done"
    procs = [
        gs.spawn("init", "ctx", "waitfile", go, "race", 12, GRANULE, "waitfile", done, limit="32Mi")
        for _ in range(PROCS)
    ]
    try:
        for p in procs:
            read_line(p, "ctx")
        go.touch()
        races = [read_line(p, "race") for p in procs]
        granted = sum(r.int("granted") for r in races) * GRANULE
        region = Region.read(gs.region)
        dev = region.devices[0]
        fake = gs.fake()
        assert granted <= limit, f"processes were granted {granted} bytes > cap {limit}: {races}"
        assert dev.limit == limit, f"region limit {dev.limit}"
        assert dev.used + dev.pending <= limit, f"region accounts {dev.used}+{dev.pending} > cap"
        assert dev.used == granted, f"region used {dev.used} != granted {granted}"
        assert fake.used(0) == granted, f"the fake driver holds {fake.used(0)}, granted {granted}"
        assert fake.peak[0] <= limit, f"the device ever held {fake.peak[0]} > cap {limit}"
        assert granted >= limit - 2 * GRANULE, (
            f"96 tries for 16 granules left {limit - granted} bytes unused: racers starve"
        )
        assert all(r.int("other") == 0 for r in races), f"only OUT_OF_MEMORY may refuse: {races}"
    finally:
        done.touch()
        _finish(procs)


def test_processes_churning_alloc_and_free_never_overshoot_together(gs: Harness) -> None:
    limit = 16 * MiB
    go = gs.tmp / "go"
    procs = [
        gs.spawn("init", "ctx", "waitfile", go, "loop", 150, 4 * MiB, limit="16Mi")
        for _ in range(PROCS)
    ]
    try:
        for p in procs:
            read_line(p, "ctx")
        go.touch()
        loops = [read_line(p, "loop", timeout=60) for p in procs]
    finally:
        _finish(procs)
    fake = gs.fake()
    assert fake.peak[0] <= limit, (
        f"the fake device held {fake.peak[0]} bytes at once; the shared cap is {limit}"
    )
    assert sum(ln.int("ok") for ln in loops) >= PROCS * 150 // 4, (
        f"most allocations should succeed (4 fit at once): {[ln.text for ln in loops]}"
    )
    region = Region.read(gs.region)
    assert region.devices[0].used == 0 and region.devices[0].pending == 0, (
        "all processes exited: nothing may stay charged in the region"
    )

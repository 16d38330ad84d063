"""A region's limits are decided by the process that creates it: a later process of the same region
whose environment asks for different limits logs one line saying so, and the region's limits win
(for its reported totals and for what it may allocate)."""

from __future__ import annotations

from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB, read_line

from gpuslice.shim import Region


def test_a_later_process_with_a_different_limit_gets_the_regions_limit(gs: Harness) -> None:
    first = gs.spawn("init", "ctx", "alloc", 16 * MiB, "hold", limit="64Mi")
    try:
        assert read_line(first, "alloc").rc == CUDA_SUCCESS
        res = gs.probe("init", "ctx", "info", "alloc", 48 * MiB, "alloc", 2 * MiB, limit="128Mi")
        info = res.one("info")
        assert info.int("total") == 64 * MiB, (
            f"the region's 64 MiB wins over 128 MiB:\n{res.describe()}"
        )
        assert info.int("free") == 48 * MiB, res.describe()
        assert [a.rc for a in res.of("alloc")] == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY], (
            res.describe()
        )
        mentions = [ln for ln in res.log_lines() if "128" in ln or "limit" in ln.lower()]
        conflict = [ln for ln in mentions if "OUT_OF_MEMORY" not in ln]
        assert len(conflict) == 1, f"one line about the differing limit:\n{res.describe()}"
        assert Region.read(gs.region).devices[0].limit == 64 * MiB
    finally:
        first.kill()
        first.wait()


def test_a_later_process_with_the_same_limit_logs_nothing(gs: Harness) -> None:
    first = gs.spawn("init", "ctx", "hold", limit="64Mi")
    try:
        read_line(first, "hold")
        res = gs.probe("init", "ctx", "info", limit="64MiB")
        assert res.one("info").int("total") == 64 * MiB, res.describe()
        assert not res.log_lines(), f"64MiB == 64Mi: no conflict to report:\n{res.describe()}"
    finally:
        first.kill()
        first.wait()

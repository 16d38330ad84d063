"""Memory cap boundaries for cuMemAlloc_v2 under libgpuslice on the fake driver: the cap is exact,
every allocation is charged rounded up to 2 MiB (the library's documented rule), one byte over is
CUDA_ERROR_OUT_OF_MEMORY, and frees give the bytes back. Contexts cost nothing here
(FAKE_CUDA_CONTEXT_MIB=0) so the numbers are the allocations alone."""

from __future__ import annotations

import pytest
from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, GRANULE, Harness, MiB, round_up
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LIMIT = 64 * MiB


def test_allocating_exactly_the_cap_succeeds_and_one_more_byte_fails(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "alloc", LIMIT, "alloc", 1, limit="64Mi")
    first, second = res.of("alloc")
    assert first.rc == CUDA_SUCCESS, f"the whole cap must be usable:\n{res.describe()}"
    assert second.rc == CUDA_ERROR_OUT_OF_MEMORY, (
        f"a full cap must refuse 1 byte:\n{res.describe()}"
    )


def test_one_byte_over_the_cap_is_out_of_memory_not_another_error(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "alloc", LIMIT + 1, "info", limit="64Mi")
    assert res.one("alloc").rc == CUDA_ERROR_OUT_OF_MEMORY, res.describe()
    assert res.one("info").int("free") == LIMIT, (
        f"a refused allocation must not be charged:\n{res.describe()}"
    )


def test_sizes_are_charged_rounded_up_to_two_mebibytes(gs: Harness) -> None:
    # 32 one-byte allocations fill 64 MiB (32 granules); the 33rd must fail.
    res = gs.probe("init", "ctx", "race", 33, 1, "info", limit="64Mi")
    race = res.one("race")
    assert (race.int("granted"), race.int("oom")) == (32, 1), (
        f"1-byte allocations cost one 2 MiB granule each:\n{res.describe()}"
    )
    assert res.one("info").int("free") == 0, res.describe()


def test_a_size_just_above_a_granule_boundary_costs_the_next_granule(gs: Harness) -> None:
    res = gs.probe(
        "init", "ctx", "alloc", LIMIT - GRANULE + 1, "info", "alloc", GRANULE, limit="64Mi"
    )
    first, second = res.of("alloc")
    assert first.rc == CUDA_SUCCESS, res.describe()
    assert res.one("info").int("free") == 0, f"62 MiB + 1 byte rounds to 64 MiB:\n{res.describe()}"
    assert second.rc == CUDA_ERROR_OUT_OF_MEMORY, res.describe()


def test_freeing_gives_the_bytes_back_to_the_cap(gs: Harness) -> None:
    res = gs.probe(
        "init",
        "ctx",
        "alloc",
        LIMIT,
        "free",
        "info",
        "alloc",
        LIMIT,
        "free",
        "free",
        "info",
        limit="64Mi",
    )
    allocs = res.of("alloc")
    assert [a.rc for a in allocs] == [CUDA_SUCCESS, CUDA_SUCCESS], res.describe()
    assert [i.int("free") for i in res.of("info")] == [LIMIT, LIMIT], res.describe()


def test_mem_get_info_reports_the_limit_as_total_and_the_rest_as_free(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "info", "alloc", 10 * MiB, "info", "total", limit="64Mi")
    before, after = res.of("info")
    assert (before.int("total"), before.int("free")) == (LIMIT, LIMIT), res.describe()
    assert (after.int("total"), after.int("free")) == (LIMIT, LIMIT - 10 * MiB), res.describe()
    assert res.one("total").int("total") == LIMIT, f"cuDeviceTotalMem_v2 = limit:\n{res.describe()}"


def test_a_refused_allocation_logs_one_warning_with_the_numbers(gs: Harness) -> None:
    res = gs.probe("init", "ctx", "alloc", LIMIT + GRANULE, limit="64Mi")
    warnings = res.log_lines("W")
    assert len(warnings) == 1, f"one warning per refusal:\n{res.describe()}"
    assert "cuMemAlloc_v2" in warnings[0] and "OUT_OF_MEMORY" in warnings[0], warnings[0]


def test_repeated_refusals_do_not_flood_stderr(gs: Harness) -> None:
    # STYLE (log.c): warn once per call site; an app retrying in a loop must not fill its logs.
    res = gs.probe("init", "ctx", "race", 50, LIMIT + GRANULE, limit="64Mi")
    assert res.one("race").int("oom") == 50, res.describe()
    assert len(res.log_lines()) <= 5, (
        f"{len(res.log_lines())} log lines for 50 refused allocations, e.g. {res.log_lines()[:2]}"
    )


@pytest.mark.parametrize("limit_mib", [2, 6, 100])
def test_filling_in_granules_stops_exactly_at_small_caps(gs: Harness, limit_mib: int) -> None:
    res = gs.probe("init", "ctx", "fill", GRANULE, limit=f"{limit_mib}Mi")
    fill = res.one("fill")
    assert fill.int("bytes") == limit_mib * MiB, f"fill stops exactly at the cap:\n{res.describe()}"
    assert fill.rc == CUDA_ERROR_OUT_OF_MEMORY, res.describe()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(min_value=1, max_value=24 * MiB)),
        st.tuples(st.just("free"), st.just(0)),
    ),
    min_size=1,
    max_size=24,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_any_alloc_free_sequence_matches_the_rounding_model(
    gs: Harness, seq: list[tuple[str, int]]
) -> None:
    """Model: a stack of charged sizes; alloc(n) succeeds iff sum + round_up(n) <= limit."""
    cmds: list[str | int] = ["init", "ctx"]
    for op, n in seq:
        cmds += [op, n] if op == "alloc" else [op]
    res = gs.probe(*cmds, limit="64Mi", region=gs.tmp / f"r{len(cmds)}-{abs(hash(tuple(seq)))}")
    stack: list[int] = []
    lines = [ln for ln in res.lines if ln.cmd in ("alloc", "free")]
    assert len(lines) == len(seq), res.describe()
    for (op, n), line in zip(seq, lines, strict=True):
        if op == "alloc":
            fits = sum(stack) + round_up(n) <= LIMIT
            want = CUDA_SUCCESS if fits else CUDA_ERROR_OUT_OF_MEMORY
            assert line.rc == want, f"alloc {n} with {sum(stack)} charged:\n{res.describe()}"
            if fits:
                stack.append(round_up(n))
        else:
            want = CUDA_SUCCESS if stack else 1  # probe's own "nothing to free" = INVALID_VALUE
            assert line.rc == want, res.describe()
            if stack:
                stack.pop()

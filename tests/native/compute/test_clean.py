"""The time-slice correction (native/src/compute/clean.c): two containers on one GPU without MPS
are time-sliced, so a batch's events can bracket the other context's slices. With launch keys
and another tenant on the board, inflated batches of a stable key are charged their clean
duration; alone, without a board, for unknown keys or keys whose durations spread, nothing
changes. Direct tests of clean.c through ctypes plus fake-GPU pairs (2 ms and 1 ms slices)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

US, MS = 1_000, 1_000_000
LAT = 5_000
KEYED = {"keys": 1, "key_fixed": True, "jitter_pct": 1}
MATMUL = {"kernel_ns": (1500 * US, 1800 * US), "sync_every": 8}
ADDS = {"kernel_ns": (11 * US, 15 * US), "cpu_ns": 2 * US, "sync_every": 200}
GRAPH = {"kernel_ns": (11 * US, 15 * US), "kernels_per_launch": 20, "sync_every": 10}
WORKLOADS = {"matmul": MATMUL, "adds": ADDS, "graph": GRAPH}


def pair(sim, kw, ts_ms=2, limits=(30, 70), **case):
    procs = [sim.Proc(limit=lim, tenant=i, **kw) for i, lim in enumerate(limits)]
    c = sim.Case(submit_ns=LAT, timeslice_ns=ts_ms * MS, procs=procs, **case)
    rs = sim.run(c)
    return [r["work_ns"] / (c.duration_ns - c.warmup_ns) for r in rs], rs


def max_one_second_share(result, bin_ns=100 * MS):
    bins = result["bins"]
    return max(sum(bins[i : i + 10]) for i in range(len(bins) - 9)) / (10 * bin_ns)


# ---------------------------------------------------------------- clean.c directly


def warm(clean, key=7, per=100 * US, n=10, t0=0, count=20):
    """Feed `count` clean batches (n launches of `per` ns each, 1 ms apart); returns the time."""
    t = t0
    for _ in range(count):
        assert clean.charge(key, n, per * n, t) == per * n, "clean batches are charged as measured"
        t += MS
    return t


def test_an_inflated_batch_is_charged_its_clean_duration_while_another_tenant_is_active(sim):
    c = sim.Clean()
    c.others(True, 0)
    c.others(True, 40 * MS)  # the other tenant published 40 ms of GPU time: credit
    t = warm(c)
    assert c.charge(7, 10, 2 * MS, t) == 1 * MS, "1 ms of the 2 ms batch was another's slice"


def test_alone_an_inflated_batch_is_charged_as_measured(sim):
    c = sim.Clean()
    t = warm(c)
    assert c.charge(7, 10, 2 * MS, t) == 2 * MS, "nobody else on the board: nothing to remove"


def test_the_correction_never_exceeds_what_the_other_tenants_published(sim):
    c = sim.Clean()
    c.others(True, 0)
    c.others(True, 300 * US)
    t = warm(c)
    assert c.charge(7, 10, 2 * MS, t) == 2 * MS - 300 * US, "only 0.3 ms of credit"
    assert c.charge(7, 10, 2 * MS, t + MS) == 2 * MS, "credit used up: charged as measured"


def test_an_unknown_key_or_a_key_without_recent_clean_samples_is_charged_as_measured(sim):
    c = sim.Clean()
    c.others(True, 0)
    c.others(True, 50 * MS)
    t = warm(c)
    assert c.charge(8, 10, 2 * MS, t) == 2 * MS, "first sample of a key: nothing to compare"
    assert c.charge(0, 10, 2 * MS, t) == 2 * MS, "key 0 = unknown launch"
    stale = t + 300 * MS  # no clean sample of key 7 for 300 ms: its estimate aged out
    assert c.charge(7, 10, 2 * MS, stale) == 2 * MS


def test_a_key_whose_durations_spread_is_never_corrected(sim):
    c = sim.Clean()
    c.others(True, 0)
    c.others(True, 50 * MS)
    t = 0
    for i in range(40):  # 1.0 .. 4.9 ms per launch: mostly far above the minimum
        per = 1 * MS + (i * 7 % 40) * 100 * US
        assert c.charge(9, 1, per, t) == per, f"sample {i}: a spread key must not be corrected"
        t += MS


@settings(max_examples=60, deadline=None)
@given(
    samples=st.lists(
        st.tuples(
            st.integers(1, 3),  # key
            st.integers(1, 64),  # launches
            st.integers(1 * US, 5 * MS),  # span
            st.integers(0, 20 * MS),  # time step
            st.integers(0, 5 * MS),  # others' newly published GPU time
            st.booleans(),  # another tenant active
        ),
        max_size=80,
    )
)
def test_charges_are_never_above_the_measurement_and_corrections_never_exceed_the_credit(
    sim, samples
):
    c = sim.Clean()
    t, published, credit_in, removed = 0, 0, 0, 0
    for key, n, span, dt, pub, active in samples:
        t += dt
        if active:
            published += pub
            credit_in += pub
        c.others(active, published)
        charged = c.charge(key, n, span, t)
        assert 0 <= charged <= span, f"charge {charged} outside [0, measured {span}]"
        removed += span - charged
        assert removed <= credit_in, "removed more GPU time than the other tenants published"


# ---------------------------------------------------------------- fake GPU pairs


@pytest.mark.parametrize("ts_ms", [1, 2])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_two_containers_at_30_and_70_each_get_their_share_within_two_points(sim, workload, ts_ms):
    kw = {**WORKLOADS[workload], **KEYED}
    (a, b), rs = pair(sim, kw, ts_ms)
    assert abs(b - 0.70) <= 0.02, f"{workload}: the 70 % side got {b:.3f}"
    if workload == "matmul" and ts_ms == 1:  # known gap (docs/compute.md): 1.5 ms kernels in
        assert a <= 0.305, f"1 ms slices are never clean, so the 30 % side stays under: {a:.3f}"
    else:
        assert abs(a - 0.30) <= 0.02, f"{workload}: the 30 % side got {a:.3f}"
    for r, lim in zip(rs, (30, 70), strict=True):
        assert max_one_second_share(r) <= lim / 100 + 0.005, "no 1 s window above the limit"


def test_without_launch_keys_the_pair_shows_the_time_slice_deviation(sim):
    (a, b), _ = pair(sim, {**MATMUL, **KEYED, "hide_keys": True}, 2)
    assert b < 0.66, f"sanity: without keys the 70 % side loses to the 30 % side's slices ({b:.3f})"
    assert abs(a - 0.30) <= 0.02


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_without_a_board_the_pair_is_charged_exactly_as_without_keys(sim, workload):
    keyed, _ = pair(sim, {**WORKLOADS[workload], **KEYED}, 2, use_board=False)
    hidden = {**WORKLOADS[workload], **KEYED, "hide_keys": True}
    plain, _ = pair(sim, hidden, 2, use_board=False)
    assert keyed == plain, "no board = other tenants invisible = no correction"


@pytest.mark.parametrize("limit", [10, 30, 50, 70])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_a_tenant_alone_is_charged_bit_for_bit_as_without_keys(sim, workload, limit):
    kw = {**WORKLOADS[workload], **KEYED}
    keyed = sim.run(sim.Case(submit_ns=LAT, procs=[sim.Proc(limit=limit, **kw)]))[0]
    plain = sim.run(
        sim.Case(submit_ns=LAT, procs=[sim.Proc(limit=limit, **{**kw, "hide_keys": True})])
    )[0]
    assert keyed == plain, "alone, the correction must never change what is charged"
    assert max_one_second_share(keyed) <= limit / 100 + 0.005


@pytest.mark.parametrize("kernel_ns", [(1 * MS, 4 * MS), (10 * US, 50 * US)])
@pytest.mark.parametrize("limits", [(30, 70), (70, 30), (50, 50)])
def test_keys_with_spread_durations_never_push_a_tenant_above_its_limit(sim, kernel_ns, limits):
    kw = {"kernel_ns": kernel_ns, "sync_every": 8 if kernel_ns[0] >= MS else 200, "keys": 1}
    _, rs = pair(sim, kw, 2, limits)
    for r, lim in zip(rs, limits, strict=True):
        worst = max_one_second_share(r)
        # 0.006: the worst window of the 30 % side of 10-50 us kernels is 0.3048-0.3053 whether a
        # sync's tail is measured (meter.h gs_meter_sync) or estimated; the mean is 0.301
        assert worst <= lim / 100 + 0.006, f"{lim}% tenant used {worst:.4f} of a 1 s window"


@pytest.mark.parametrize("limits", [(30, 70), (20, 30, 50)])
def test_kernels_whose_duration_drifts_with_the_clock_are_still_corrected(sim, limits):
    # a GPU at its power cap moves its clock: the H100 pair's matmuls vary ~+-7 %, so few were
    # within 5 % of the minimum and the 70 % side got 0.61 (sim before: 0.63; three: 0.39)
    kw = {**MATMUL, "keys": 1, "key_fixed": True, "jitter_pct": 7}
    _, rs = pair(sim, kw, 2, limits)
    base = sim.run(sim.Case(submit_ns=LAT, procs=[sim.Proc(**kw)]))[0]["work_ns"]
    for r, lim in zip(rs, limits, strict=True):
        achieved = r["work_ns"] / base
        assert abs(achieved - lim / 100) <= 0.02, f"{limits}: the {lim} % side got {achieved:.3f}"
        assert max_one_second_share(r) <= lim / 100 + 0.005, f"{lim} % side above its limit"


@pytest.mark.parametrize("workload", ["adds", "graph"])
def test_next_to_another_tenant_correctable_work_wakes_in_larger_bursts(sim, workload):
    # each burst costs context switches (100 us each here); 2 ms quanta instead of 0.5 ms while
    # another tenant has demand: the 70 % side got 0.623 (adds) and 0.618 (graph) before
    kw = {**WORKLOADS[workload], **KEYED}
    _, rs = pair(sim, kw, 2, switch_ns=100 * US)
    base = sim.run(sim.Case(submit_ns=LAT, procs=[sim.Proc(**kw)]))[0]["work_ns"]
    low, high = (r["work_ns"] / base for r in rs)
    assert abs(low - 0.30) <= 0.01, f"the 30 % side keeps its share: {low:.3f}"
    assert high >= 0.635, f"the 70 % side loses less to switches: {high:.3f}"


def test_a_neighbour_without_a_compute_limit_is_invisible_so_nothing_is_corrected(sim):
    kw = {**MATMUL, **KEYED}
    procs = [sim.Proc(limit=70, tenant=0, **kw), sim.Proc(limit=0, tenant=1, **kw)]
    plain = [sim.Proc(limit=70, tenant=0, **{**kw, "hide_keys": True}), procs[1]]
    case = {"submit_ns": LAT, "timeslice_ns": 2 * MS}
    a = sim.run(sim.Case(procs=procs, **case))[0]
    b = sim.run(sim.Case(procs=plain, **case))[0]
    assert a["work_ns"] == b["work_ns"], "an unlimited neighbour never publishes: no credit"

"""The span union of meter.c (gs_spans_add): overlapping busy intervals of one process's
streams are counted once. Property: the sum of what each add returns equals the measure of
the union, and the kept spans stay sorted and disjoint."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st


def union_measure(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


intervals = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 2_000)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_adding_spans_one_by_one_counts_exactly_the_union(sim, ivs):
    spans, counted = [], 0
    for s, e in ivs:
        added, spans = sim.spans_add(spans, s, e)
        assert added >= 0, "an add never removes time"
        counted += added
    assert counted == union_measure(ivs), "every instant is counted exactly once"
    assert all(a[1] < b[0] for a, b in pairwise(spans)), f"spans not disjoint: {spans}"


def test_a_span_inside_a_counted_one_adds_nothing(sim):
    _, spans = sim.spans_add([], 0, 100)
    added, spans = sim.spans_add(spans, 10, 20)
    assert added == 0 and spans == [(0, 100)]


def test_touching_spans_merge_into_one(sim):
    _, spans = sim.spans_add([], 0, 100)
    added, spans = sim.spans_add(spans, 100, 150)
    assert added == 50 and spans == [(0, 150)]

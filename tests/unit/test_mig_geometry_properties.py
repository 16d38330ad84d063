"""Properties of mig.py: what choose_start returns is always a legal addition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuslice import mig
from mig_helpers import TABLES, legal_layouts


@given(legal_layouts(), st.data())
def test_a_chosen_start_always_keeps_the_gpu_legal(layout, data):
    table, slices = layout
    assert mig.legal(table, slices) is None
    p = data.draw(st.sampled_from(table))
    taken = [(s.start, next(q for q in table if q.name == s.profile).size) for s in slices]
    start = mig.choose_start(p, table, taken)
    if start is None:
        assert mig.free_starts(p, taken) == []
    else:
        assert mig.legal(table, [*slices, mig.MigSlice(profile=p.name, start=start)]) is None


@given(legal_layouts())
def test_legal_layouts_never_use_more_than_seven_compute_slices(layout):
    table, slices = layout
    assert sum(next(p for p in table if p.name == s.profile).compute for s in slices) <= 7


@given(st.sampled_from(TABLES), st.integers(1, 200_000), st.integers(0, 100))
def test_profile_for_is_the_smallest_that_holds(table, mib, cores):
    got = mig.profile_for(table, mib, cores)
    holds = [p for p in table if p.memory_mib >= mib and p.compute * 100 >= cores * 7]
    if got is None:
        assert holds == []
    else:
        assert got in holds and all(got.size <= p.size for p in holds)

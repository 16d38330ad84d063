"""Hypothesis strategies for MIG tests (not a test module; tests/ is on the path)."""

from __future__ import annotations

from hypothesis import strategies as st

from gpuslice import mig

TABLES = list(mig.CATALOG.values())


@st.composite
def legal_slices(draw: st.DrawFn, table: tuple[mig.Profile, ...], most: int = 8
                 ) -> list[mig.MigSlice]:
    """A legal set of instances on a GPU offering `table`, built by adding free placements."""
    slices: list[mig.MigSlice] = []
    for _ in range(draw(st.integers(0, most))):
        p = draw(st.sampled_from(table))
        taken = [(s.start, next(q for q in table if q.name == s.profile).size) for s in slices]
        starts = mig.free_starts(p, taken)
        if starts:
            slices.append(mig.MigSlice(profile=p.name, start=draw(st.sampled_from(starts))))
    return slices


@st.composite
def legal_layouts(draw: st.DrawFn) -> tuple[tuple[mig.Profile, ...], list[mig.MigSlice]]:
    """A board's table and a legal set of instances on it."""
    table = draw(st.sampled_from(TABLES))
    return table, draw(legal_slices(table))

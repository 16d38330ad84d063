"""Node scores (0..10) for fitting nodes and the deterministic choice of the best one.

Owns: `prioritize` (node policy applied to each placement's fullness after placement, via
the policy's `line` in one pass; equal to `score` by test) and
`best` (score desc, then the node policy's finer rank desc, then node name asc).
Does not: decide fit (fit.py). Fullness: memory and cores of the healthy GPUs, weighted
equally, including the pod (usage.NodeSnapshot.fullness).
Tests: tests/unit/allocator/test_score.py
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuslice.allocator.fit import Placement
from gpuslice.allocator.policies import NodePolicy


def fullness(fits: Mapping[str, Placement]) -> dict[str, float]:
    """node -> how full it will be with the pod (Placement.fullness, inlined for speed)."""
    out = {}
    for name, pl in fits.items():
        add = pl._add
        if add is None:
            out[name] = pl.fullness()
        else:
            s = pl.snapshot
            out[name] = ((s.used_mem + add[0]) * s.half_per_mib
                         + (s.used_cores + add[1]) * s.half_per_core)
    return out


def prioritize(node: NodePolicy, fits: Mapping[str, Placement]) -> dict[str, int]:
    """node -> score 0..10: `fullness` and `node.score` fused in one pass (the hot path)."""
    base, slope = node.line
    score = node.score
    out = {}
    for name, pl in fits.items():
        add = pl._add
        if add is None:
            f = pl.fullness()
        else:
            used_mem, per_mib, used_cores, per_core = pl.snapshot.weights
            f = (used_mem + add[0]) * per_mib + (used_cores + add[1]) * per_core
        out[name] = int(base + slope * f) if 0.0 <= f <= 1.0 else score(f)
    return out


def best(node: NodePolicy, fits: Mapping[str, Placement]) -> Placement | None:
    """The placement to take; equal scores fall to the finer rank, then the node name."""
    top: tuple[int, float] | None = None
    chosen: Placement | None = None
    full = fullness(fits)
    for name in sorted(full):
        f = full[name]
        key = (node.score(f), node.rank(f))
        if top is None or key > top:
            top, chosen = key, fits[name]
    return chosen

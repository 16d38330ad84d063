"""Topology (GPU level only): for multi-GPU containers prefer a well-connected set.

Order of preference among sets that fit: all on one NUMA node (None = unknown, a group of
its own), then all mutual NVLink peers (either side listing the other counts), then the
binpack order (lexicographically smallest binpack ranks). One GPU: plain binpack.
A preference only: whenever `count` candidates fit, `count` are returned.
Tests: tests/unit/allocator/test_policies.py
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from math import comb

from gpuslice.allocator.policies.base import POS, Candidate
from gpuslice.model import GPU

NAME = "topology"
MAX_SETS = 2000
"""Above this many candidate sets, fall back to a greedy choice per NUMA group."""


def _linked(a: GPU, b: GPU) -> bool:
    return b.uuid in a.nvlink_peers or a.uuid in b.nvlink_peers


def _numa(c: Candidate, gpus: Sequence[GPU]) -> tuple[int, int]:
    n = gpus[c[POS]].numa_node
    return (0, n) if n is not None else (1, c[POS])  # unknown NUMA: a group of its own


def _set_class(cs: Sequence[Candidate], gpus: Sequence[GPU]) -> int:
    """0 best: same NUMA and all NVLink; 1 same NUMA; 2 all NVLink; 3 neither."""
    same_numa = len({_numa(c, gpus) for c in cs}) == 1
    nvlink = all(_linked(gpus[a[POS]], gpus[b[POS]]) for a, b in combinations(cs, 2))
    return (0 if same_numa else 2) + (0 if nvlink else 1)


class _Gpu:
    name = NAME

    def choose(
        self, cands: Sequence[Candidate], count: int, gpus: Sequence[GPU]
    ) -> list[Candidate]:
        ordered = sorted(cands)  # tuple order is the binpack order
        if count <= 1 or len(ordered) <= count:
            return ordered[:count]
        if comb(len(ordered), count) <= MAX_SETS:
            best: tuple[Candidate, ...] | None = None
            best_class = 4
            for combo in combinations(ordered, count):  # lexicographic in binpack order
                k = _set_class(combo, gpus)
                if k < best_class:
                    best, best_class = combo, k
                    if k == 0:
                        break
            assert best is not None
            return list(best)
        groups: dict[tuple[int, int], list[Candidate]] = {}
        for c in ordered:
            groups.setdefault(_numa(c, gpus), []).append(c)
        for key in sorted(groups):
            if len(groups[key]) >= count:
                return groups[key][:count]
        return ordered[:count]

    def pre_first(self, count: int) -> bool:
        return count <= 1  # one GPU: binpack order; sets: topology first


gpu = _Gpu()

"""The two narrow interfaces every placement policy implements, and the candidate record.

Owns: `NodePolicy` (score a node 0..10 from how full it will be) and `GpuPolicy` (pick the
GPUs for one container among candidates that already fit), plus `Candidate`.
Does not: decide whether a GPU fits (allocator/search.py) or keep usage (allocator/state.py).
Invariants: policies are pure and deterministic; a GpuPolicy returns exactly `count` distinct
candidates whenever at least `count` are offered (preferences never reject).
Tests: tests/unit/allocator/test_policies.py
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpuslice.model import GPU

MAX_SCORE = 10
"""kube-scheduler's MaxExtenderPriority: extender scores run 0..10."""


Candidate = tuple[int, int, int, int, int]
"""A GPU that can take the container's slice: (pre, free MiB after, free cores after, NVML
index, position in NodeInventory.gpus). `pre` is a caller-supplied first sort key (e.g. 0 =
"adds nothing to the pod's footprint"). Plain tuples: cheap to build, and sorting them as-is
is the binpack order (position, unique, breaks the last ties)."""
PRE, FREE_MEM, FREE_CORES, INDEX, POS = range(5)


class NodePolicy(Protocol):
    name: str
    line: tuple[float, float]
    """(base, slope): for fullness f in 0..1, score(f) == int(base + slope * f) exactly, in
    floating point too (score.prioritize relies on it; test_policies checks it)."""

    def score(self, fullness: float) -> int:
        """0..10 from the node's fullness after placement (0.0 empty .. 1.0 full)."""
        ...

    def score_all(self, fullness: dict[str, float]) -> dict[str, int]:
        """`score` for many nodes at once (the hot path of prioritize)."""
        ...

    def rank(self, fullness: float) -> float:
        """A finer key than `score` (higher is better) used to break equal scores."""
        ...


class GpuPolicy(Protocol):
    name: str

    def choose(
        self, cands: Sequence[Candidate], count: int, gpus: Sequence[GPU]
    ) -> list[Candidate]:
        """`count` distinct candidates, best first; the caller guarantees len(cands) >= count."""
        ...

    def pre_first(self, count: int) -> bool:
        """True if `choose(cands, count, ...)` never takes a candidate with a larger PRE while
        one with a smaller PRE is left (the allocator then knows, from summaries alone, that
        an init container lands where it adds nothing to the pod's footprint)."""
        ...


def spread_key(c: Candidate) -> tuple[int, int, int, int, int]:
    return (c[PRE], -c[FREE_MEM], -c[FREE_CORES], c[INDEX], c[POS])


def clamp_score(x: float) -> int:
    """0..1 -> 0..10, halves rounded up; out-of-range inputs clamped."""
    return max(0, min(MAX_SCORE, int(x * MAX_SCORE + 0.5)))

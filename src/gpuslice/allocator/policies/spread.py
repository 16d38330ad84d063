"""Spread: prefer the emptiest node, and on a node the GPU with the most memory left.

Node score = 10 x (1 - fullness after placement); GPU order = most free memory after
placement, then most free cores, then NVML index.
Tests: tests/unit/allocator/test_policies.py
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuslice.allocator.policies.base import Candidate, clamp_score, spread_key
from gpuslice.model import GPU

NAME = "spread"


class _Node:
    name = NAME
    line = (10.5, -10.0)  # int(10.5 - f * 10)

    def score(self, fullness: float) -> int:
        f = fullness
        return int(10.5 - f * 10) if 0.0 < f <= 1.0 else clamp_score(1.0 - f)  # as score_all

    def score_all(self, fullness: dict[str, float]) -> dict[str, int]:
        return {k: (int(10.5 - f * 10) if 0.0 < f <= 1.0 else clamp_score(1.0 - f))
                for k, f in fullness.items()}

    def rank(self, fullness: float) -> float:
        return -fullness


class _Gpu:
    name = NAME

    def choose(
        self, cands: Sequence[Candidate], count: int, gpus: Sequence[GPU]
    ) -> list[Candidate]:
        return sorted(cands, key=spread_key)[:count]

    def pre_first(self, count: int) -> bool:
        return True  # spread_key starts with PRE


node = _Node()
gpu = _Gpu()

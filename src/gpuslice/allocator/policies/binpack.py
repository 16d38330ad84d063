"""Binpack: fill the fullest node, and on a node the GPU with the least memory left.

Node score = 10 x fullness after placement (memory and cores weighted equally);
GPU order = least free memory after placement, then least free cores, then NVML index.
Tests: tests/unit/allocator/test_policies.py
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuslice.allocator.policies.base import Candidate, clamp_score
from gpuslice.model import GPU

NAME = "binpack"


class _Node:
    name = NAME
    line = (0.5, 10.0)  # int(f * 10 + 0.5)

    def score(self, fullness: float) -> int:
        f = fullness
        return int(f * 10 + 0.5) if 0.0 <= f < 1.0 else clamp_score(f)  # same as score_all

    def score_all(self, fullness: dict[str, float]) -> dict[str, int]:
        return {k: (int(f * 10 + 0.5) if 0.0 <= f < 1.0 else clamp_score(f))
                for k, f in fullness.items()}

    def rank(self, fullness: float) -> float:
        return fullness


class _Gpu:
    name = NAME

    def choose(
        self, cands: Sequence[Candidate], count: int, gpus: Sequence[GPU]
    ) -> list[Candidate]:
        return sorted(cands)[:count]  # tuple order is the binpack order

    def pre_first(self, count: int) -> bool:
        return True  # PRE is the first sort key


node = _Node()
gpu = _Gpu()

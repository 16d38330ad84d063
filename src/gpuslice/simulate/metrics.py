"""What a replay measures: per-GPU usage over time and the numbers of one policy's report.

Owns: the time-weighted integrals (memory, cores, stranded memory), wait-time percentiles, the
Metrics struct and its definitions (docs/simulate.md, section 'Metrics', states them in prose).
Does not: place or order events (engine.py), render (report.py), or define what a pod holds on
a GPU: that is the allocator's public `footprint` (its lifecycle rule), charged here unchanged.
Invariants: usage is a step function that changes only at events; means integrate it over
[first arrival, last departure]; peaks are over states held for a positive time; fractions in 0..1.
Failure: none expected; engine.py checks this usage against the allocator's in tests.
Tests: tests/unit/simulate/test_usage_metrics.py, tests/unit/simulate/test_replay_engine.py
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

import msgspec

from gpuslice import mig
from gpuslice.allocator import Use, footprint
from gpuslice.allocator.mig import mig_footprint
from gpuslice.model import EXCLUSIVE_CORES, GPU, PodAssignment, PodRequest

__all__ = ["Metrics", "UsageTracker", "memory_threshold", "nearest_rank"]


def memory_threshold(pods: Iterable[PodRequest], gpus: Sequence[GPU]) -> int:
    """The median job's per-GPU memory request in MiB (lower median).

    A job's per-GPU request is its largest slice; percent requests are converted at the median
    GPU memory of the cluster. GPUs whose free memory is below this cannot take a typical job.
    """
    if not gpus:
        return 0
    median_gpu = statistics.median_low(g.memory_mib for g in gpus)
    per_job = []
    for pod in pods:
        sizes = [s.memory_mib if s.memory_mib is not None
                 else median_gpu * (s.memory_percent or 0) // 100 for s in pod.slices]
        if sizes:
            per_job.append(max(sizes))
    return statistics.median_low(per_job) if per_job else 0


def nearest_rank(sorted_values: Sequence[float], pct: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least pct % of values <= it."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class UsageTracker:
    """Allocated memory/cores/slots per GPU as a step function of time, integrated as it goes."""

    def __init__(self, gpus: Sequence[GPU], threshold_mib: int) -> None:
        self.gpus = list(gpus)
        self.index = {g.uuid: i for i, g in enumerate(self.gpus)}
        n = len(self.gpus)
        self.mem = [0] * n
        self.cores = [0] * n
        self.slots = [0] * n
        self.excl = [0] * n
        self.threshold = threshold_mib
        # MIG GPUs: the instances held (start, size) and the profile the median job would get
        self.spans: dict[int, list[tuple[int, int]]] = {
            i: [] for i, g in enumerate(self.gpus) if g.mig is not None}
        self.need = {i: mig.profile_for(g.mig.profiles, threshold_mib)
                     for i, g in enumerate(self.gpus) if g.mig is not None}
        self._spans_of: dict[str, dict[str, list[tuple[int, int]]]] = {}
        self.capacity_mib = sum(g.memory_mib for g in self.gpus)
        self.capacity_cores = EXCLUSIVE_CORES * n
        self.used_mib = 0
        self.used_cores = 0
        self.stranded_mib = sum(self._stranded(i) for i in range(n))
        self.start: float | None = None
        self.now: float | None = None
        self.area_mem = self.area_cores = self.area_frag = 0.0
        self.peak_mem = self.peak_cores = 0.0
        self._held: dict[str, dict[str, Use]] = {}

    def _stranded(self, i: int) -> int:
        """Free MiB on GPU i that the median job could not use (0 if it could). On a MIG GPU:
        when no free placement is left for the profile the median job gets."""
        free = self.gpus[i].memory_mib - self.mem[i]
        if i in self.spans:
            p = self.need[i]
            return free if p is None or not mig.free_starts(p, self.spans[i]) else 0
        blocked = (self.excl[i] > 0 or self.slots[i] >= self.gpus[i].split_count
                   or free < self.threshold)
        return free if blocked else 0

    def fractions(self) -> tuple[float, float, float]:
        """(memory utilisation, core utilisation, fragmentation) right now."""
        free = self.capacity_mib - self.used_mib
        mem = self.used_mib / self.capacity_mib if self.capacity_mib else 0.0
        cores = self.used_cores / self.capacity_cores if self.capacity_cores else 0.0
        frag = self.stranded_mib / free if free > 0 else 0.0
        return mem, cores, frag

    def advance(self, t: float) -> None:
        """Move the clock to t, integrating the usage held since the last call."""
        if self.now is None:
            self.start = self.now = t
            return
        dt = t - self.now
        if dt > 0:
            mem, cores, frag = self.fractions()
            self.area_mem += mem * dt
            self.area_cores += cores * dt
            self.area_frag += frag * dt
            self.peak_mem = max(self.peak_mem, mem)
            self.peak_cores = max(self.peak_cores, cores)
            self.now = t

    def _apply(self, fp: dict[str, Use], sign: int,
               spans: dict[str, list[tuple[int, int]]] | None = None) -> None:
        for uuid, f in fp.items():
            i = self.index[uuid]
            self.stranded_mib -= self._stranded(i)
            for span in (spans or {}).get(uuid, ()):
                if sign > 0:
                    self.spans[i].append(span)
                else:
                    self.spans[i].remove(span)
            self.mem[i] += sign * f.mem
            self.cores[i] += sign * f.cores
            self.slots[i] += sign * f.slots
            self.excl[i] += sign * f.excl
            self.used_mib += sign * f.mem
            self.used_cores += sign * f.cores
            self.stranded_mib += self._stranded(i)

    def hold(self, key: str, assignment: PodAssignment) -> None:
        is_mig = any(sl.mig is not None for sl in assignment.slices())
        fp = mig_footprint(assignment) if is_mig else footprint(assignment)
        self._held[key] = fp
        spans: dict[str, list[tuple[int, int]]] = {}
        for sl in assignment.slices():
            g = self.gpus[self.index[sl.uuid]]
            p = g.mig.profile(sl.mig.profile) if g.mig is not None and sl.mig else None
            if p is not None and sl.mig is not None:
                spans.setdefault(sl.uuid, []).append((sl.mig.start, p.size))
        if spans:
            self._spans_of[key] = spans
        self._apply(fp, +1, spans)

    def drop(self, key: str) -> None:
        self._apply(self._held.pop(key), -1, self._spans_of.pop(key, None))


class Metrics(msgspec.Struct, kw_only=True):
    """One policy's report. Fractions are 0..1, times are seconds; None where undefined."""

    policy: str
    jobs: int
    placed: int
    unplaced: int
    allocation_rate: float
    mean_memory_utilization: float
    peak_memory_utilization: float
    mean_core_utilization: float
    peak_core_utilization: float
    fragmentation: float
    wait_mean: float | None
    wait_p50: float | None
    wait_p95: float | None
    wait_max: float | None
    jobs_waited: int
    max_queue: int
    makespan: float
    unplaced_reasons: dict[str, int]
    gpus: int
    memory_mib: int
    median_request_mib: int

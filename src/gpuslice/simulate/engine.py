"""Discrete-event replay of a trace on a simulated cluster, placing pods with the real allocator.

Owns: event order, the waiting queue and its rule, each job's outcome (start and node, or why not).
Does not: decide placement (allocator.ClusterState.schedule does) or format results (report.py).
Rules: events by time; at equal times departures first, then by job order. A job that fits
nowhere on an EMPTY cluster is never placed (reason: most common rejection across nodes).
Otherwise it starts at once if it fits, else waits. Waiting jobs are retried in FIFO order whenever
capacity frees, and any that fits starts (FIFO with backfill, like kube-scheduler without
preemption): a big job never blocks smaller ones behind it, but may wait while they run.
Invariants: deterministic (no set/hash order, no clock); `check=True` compares usage with the
allocator's after every event. Tests: tests/unit/simulate/test_replay_engine.py
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import msgspec

from gpuslice.allocator import ClusterState, Policy, Rejection
from gpuslice.model import NodeInventory, PodRequest
from gpuslice.simulate.metrics import Metrics, UsageTracker, memory_threshold, nearest_rank
from gpuslice.simulate.trace import Job

__all__ = ["Outcome", "Replay", "replay"]

_DEPART, _ARRIVE = 0, 1  # departures sort before arrivals at the same time


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What happened to the job at position `index` of the replayed list: started at `start` on
    `node` using the GPUs of NVML index `gpus`, or never placed for `reason`."""

    index: int
    start: float | None = None
    node: str | None = None
    gpus: tuple[int, ...] = ()
    reason: str | None = None


class Replay(msgspec.Struct, kw_only=True):
    """Raw result of one replay: per-job outcomes and the usage integrals."""

    policy: str
    outcomes: list[Outcome]
    metrics: Metrics


def _shape(pod: PodRequest) -> PodRequest:
    """The pod without its identity: two jobs of one shape fit exactly the same places."""
    return msgspec.structs.replace(pod, namespace="", name="", uid="")


def _reason(failed: Mapping[str, Rejection]) -> str:
    """Most common rejection reason across nodes; ties go to the alphabetically first."""
    counts = Counter(r.reason for r in failed.values())
    if not counts:
        return "no nodes in the cluster"
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def replay(nodes: Sequence[NodeInventory], jobs: Sequence[Job], policy: Policy, *,
           on_progress: Callable[[int], None] | None = None, check: bool = False) -> Replay:
    """Replay `jobs` on `nodes` under `policy`; see the module header for the rules."""
    state, empty = ClusterState(), ClusterState()
    for inv in nodes:
        state.add_node(inv)
        empty.add_node(inv)
    gpus = [g for inv in nodes for g in inv.gpus]
    gpu_index = {g.uuid: g.index for g in gpus}
    tracker = UsageTracker(gpus, memory_threshold((j.pod for j in jobs), gpus))
    shapes: dict[PodRequest, int] = {}
    shape_of = [shapes.setdefault(_shape(j.pod), len(shapes)) for j in jobs]
    never: dict[int, str | None] = {}  # shape -> reason it fits no empty cluster (None: it fits)
    outcomes: list[Outcome | None] = [None] * len(jobs)
    keys = [f"{j.pod.key}#{n}" for n, j in enumerate(jobs)]  # names may repeat in a trace
    node_of: dict[int, str] = {}
    heap = [(j.arrival, _ARRIVE, n) for n, j in enumerate(jobs)]  # ties: position in `jobs`
    heapq.heapify(heap)
    pending: list[int] = []
    freed: set[str] = set()
    max_queue = 0
    done = 0

    def start(i: int, t: float) -> bool:
        placement = state.schedule(jobs[i].pod, policy)
        if placement is None:
            return False
        a = placement.assignment
        state.assign(keys[i], a)
        tracker.hold(keys[i], a)
        node_of[i] = a.node
        used = sorted({gpu_index[sl.uuid] for c in a.containers for sl in c.slices})
        outcomes[i] = Outcome(index=i, start=t, node=a.node, gpus=tuple(used))
        heapq.heappush(heap, (t + jobs[i].duration, _DEPART, i))
        return True

    def retry(t: float) -> None:
        nonlocal pending
        where = sorted(freed)
        freed.clear()
        failed_shapes: set[int] = set()  # starts only take capacity: a failed shape stays failed
        still: list[int] = []
        for i in pending:
            s = shape_of[i]
            if (s not in failed_shapes and state.filter(jobs[i].pod, policy, where).fits
                    and start(i, t)):
                continue
            failed_shapes.add(s)
            still.append(i)
        pending = still

    while heap:
        t, kind, i = heapq.heappop(heap)
        tracker.advance(t)
        if kind == _DEPART:
            state.release(keys[i])
            tracker.drop(keys[i])
            freed.add(node_of[i])
            if pending and not (heap and heap[0][0] == t and heap[0][1] == _DEPART):
                retry(t)
            elif not pending:
                freed.clear()
        elif not start(i, t):
            s = shape_of[i]
            if s not in never:
                fr = empty.filter(jobs[i].pod, policy)
                never[s] = None if fr.fits else _reason(fr.failed)
            if never[s] is None:
                pending.append(i)
                max_queue = max(max_queue, len(pending))
            else:
                outcomes[i] = Outcome(index=i, reason=never[s])
        if check:
            _check(state, tracker)
        done += 1
        if on_progress is not None and done % 256 == 0:
            on_progress(done)
    for i in pending:  # cannot happen (an empty cluster takes any placeable job); kept honest
        outcomes[i] = Outcome(index=i, reason="still waiting when the trace ended")
    if on_progress is not None:
        on_progress(done)
    final = [o for o in outcomes if o is not None]
    assert len(final) == len(jobs), "every job gets an outcome"
    return Replay(policy=policy.name, outcomes=final,
                  metrics=_summarize(policy.name, jobs, final, tracker, max_queue))


def _check(state: ClusterState, tracker: UsageTracker) -> None:
    """Our per-GPU usage equals the allocator's, GPU by GPU (tests run with this on)."""
    for u in state.gpu_usage():
        i = tracker.index[u.gpu.uuid]
        ours = (tracker.mem[i], tracker.cores[i], tracker.slots[i], tracker.excl[i] > 0)
        theirs = (u.memory_used_mib, u.cores_used, u.slices, bool(u.exclusive))
        assert ours == theirs, (
            f"usage of {u.node}/{u.gpu.uuid}: simulator {ours} != allocator {theirs}")


def _summarize(policy: str, jobs: Sequence[Job], outcomes: Sequence[Outcome],
               tracker: UsageTracker, max_queue: int) -> Metrics:
    waits = sorted(o.start - jobs[o.index].arrival for o in outcomes if o.start is not None)
    placed = len(waits)
    reasons = Counter(o.reason for o in outcomes if o.reason is not None)
    start = tracker.start if tracker.start is not None else 0.0
    end = tracker.now if tracker.now is not None else start
    span = end - start

    def mean(area: float) -> float:
        return round(area / span, 6) if span > 0 else 0.0

    return Metrics(
        policy=policy, jobs=len(jobs), placed=placed, unplaced=len(jobs) - placed,
        allocation_rate=round(placed / len(jobs), 6) if jobs else 0.0,
        mean_memory_utilization=mean(tracker.area_mem),
        peak_memory_utilization=round(tracker.peak_mem, 6),
        mean_core_utilization=mean(tracker.area_cores),
        peak_core_utilization=round(tracker.peak_cores, 6),
        fragmentation=mean(tracker.area_frag),
        wait_mean=round(sum(waits) / placed, 3) if placed else None,
        wait_p50=_r(nearest_rank(waits, 50)), wait_p95=_r(nearest_rank(waits, 95)),
        wait_max=_r(waits[-1] if waits else None),
        jobs_waited=sum(1 for w in waits if w > 0), max_queue=max_queue,
        makespan=round(span, 3),
        unplaced_reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        gpus=len(tracker.gpus), memory_mib=tracker.capacity_mib,
        median_request_mib=tracker.threshold)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)

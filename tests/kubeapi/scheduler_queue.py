"""The scheduler driver's queue of pods to schedule, kept as kube-scheduler keeps its own.
Owns: order (higher priority first, then earlier creation, then arrival), back-off after a
failure (initial doubling up to max), the unschedulable set (a pod that did not fit waits for
a cluster event, or `unschedulable_timeout`), and the "binding" state of a popped pod.
As kube-scheduler v1.36 (queueing hints on): a pod an extender refused moves back on ANY
cluster event, an assigned pod's update included (extenders register a wildcard event), and
an event seen while the pod was being scheduled sends it to back-off, not to the set; a pod
only the in-tree filters refused waits for an event that may make room.
Does not: schedule or talk to anything (scheduler_driver.py). Pure bookkeeping; time is
passed in or read from time.monotonic().
Tests: tests/integration/kubeapi/test_scheduler_driver_speaks_the_extender_wire.py"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass
class Pending:
    """A pod not bound yet. state: "queued" (in the heap, maybe backing off until ready_at),
    "unschedulable" (waits for a cluster event or flush_at), "binding" (popped)."""

    key: str
    order: tuple[int, str]
    state: str = "queued"
    attempts: int = 0
    ready_at: float = 0.0
    flush_at: float = 0.0
    by_extender: bool = False  # its last failure: an extender refused some node
    events_seen: int = 0  # the queue's event count when it was popped


class SchedulingQueue:
    def __init__(self, initial_backoff: float, max_backoff: float,
                 unschedulable_timeout: float) -> None:
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.unschedulable_timeout = unschedulable_timeout
        self._pending: dict[str, Pending] = {}
        self._unschedulable: set[str] = set()
        self._heap: list[tuple[int, str, int, str]] = []
        self._seq = itertools.count()
        self._events = 0  # cluster events so far

    def __contains__(self, key: str) -> bool:
        return key in self._pending

    def get(self, key: str) -> Pending | None:
        return self._pending.get(key)

    def add(self, key: str, pod: Obj) -> None:
        order = (-int(pod["spec"].get("priority") or 0),
                 pod["metadata"].get("creationTimestamp") or "")
        self._pending[key] = Pending(key, order)
        self._push(self._pending[key])

    def remove(self, key: str) -> None:
        self._pending.pop(key, None)
        self._unschedulable.discard(key)

    def pop_ready(self) -> Pending | None:
        """The first pod whose back-off is over, now in state "binding"; None if none."""
        now = time.monotonic()
        self._requeue({k for k in self._unschedulable if self._pending[k].flush_at <= now})
        deferred, found = [], None
        while self._heap:
            entry = heapq.heappop(self._heap)
            pending = self._pending.get(entry[3])
            if pending is None or pending.state != "queued":
                continue  # a stale entry
            if pending.ready_at > now:
                deferred.append(entry)
                continue
            found = pending
            found.state = "binding"
            found.events_seen = self._events
            break
        for entry in deferred:
            heapq.heappush(self._heap, entry)
        return found

    def next_wait(self) -> float:
        """Seconds until a pod may be ready (1 s when none waits)."""
        times = [p.ready_at if p.state == "queued" else p.flush_at
                 for p in self._pending.values() if p.state != "binding"]
        return max(0.01, min(times) - time.monotonic()) if times else 1.0

    def failed(self, pending: Pending, unschedulable: bool, by_extender: bool = False) -> None:
        """Back off; an unschedulable pod also waits for a cluster event (cluster_changed),
        unless an extender refused it and an event came while it was being scheduled."""
        if self._pending.get(pending.key) is not pending:
            return  # bound or deleted meanwhile
        pending.by_extender = by_extender
        if by_extender and pending.events_seen != self._events:
            unschedulable = False
        now = time.monotonic()
        pending.ready_at = now + min(self.initial_backoff * 2 ** (pending.attempts - 1),
                                     self.max_backoff)
        pending.flush_at = now + self.unschedulable_timeout
        if unschedulable:
            pending.state = "unschedulable"
            self._unschedulable.add(pending.key)
        else:
            pending.state = "queued"
            self._push(pending)

    def cluster_changed(self, may_make_room: bool = True) -> None:
        """A cluster event: unschedulable pods an extender refused go back to the queue, and
        all of them if it `may_make_room` (they still wait out their back-off)."""
        self._events += 1
        self._requeue({k for k in self._unschedulable
                       if may_make_room or self._pending[k].by_extender})

    def _requeue(self, keys: set[str]) -> None:
        for key in keys:
            self._unschedulable.discard(key)
            pending = self._pending[key]
            pending.state = "queued"
            self._push(pending)

    def _push(self, pending: Pending) -> None:
        heapq.heappush(self._heap, (*pending.order, next(self._seq), pending.key))

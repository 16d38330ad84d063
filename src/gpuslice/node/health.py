"""Which GPUs are healthy now: critical XIDs and GPUs that stop answering NVML.

Owns: the per-GPU health state the device plugin advertises and the inventory publishes.
Does not: wait for events (agent.py runs the backend's blocking wait in a thread) or publish.
Invariants: a GPU is unhealthy while NVML cannot query it, and for `recovery_s` after its last
critical XID; it is healthy again once both have passed (a reset GPU comes back by itself).
Tests: tests/unit/node/test_nvml.py, tests/integration/node/test_agent_with_kubelet.py
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gpuslice.node.nvml import GPUBackend, GPULost, HealthEvent

__all__ = ["Health"]


class Health:
    def __init__(self, backend: GPUBackend, uuids: Iterable[str], *, recovery_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._backend = backend
        self._uuids = tuple(uuids)
        self._recovery_s = recovery_s
        self._clock = clock
        self._xid_at: dict[str, tuple[float, int]] = {}
        self._lost: dict[str, str] = {}

    @property
    def unhealthy(self) -> dict[str, str]:
        """GPU UUID -> why it is unhealthy, for every unhealthy GPU."""
        out = {u: f"XID {x} {self._clock() - t:.0f}s ago" for u, (t, x) in self._xid_at.items()}
        out.update({u: f"NVML: {why}" for u, why in self._lost.items()})
        return out

    def on_events(self, events: Iterable[HealthEvent]) -> bool:
        """Record critical events; True when some GPU's health changed."""
        before = set(self.unhealthy)
        for e in events:
            if e.uuid in self._uuids:
                self._xid_at[e.uuid] = (self._clock(), e.xid)
        return set(self.unhealthy) != before

    def poll(self) -> bool:
        """Query every GPU once and expire old XIDs; True when some GPU's health changed."""
        before = set(self.unhealthy)
        now = self._clock()
        for u in self._uuids:
            try:
                self._backend.stats(u)
                self._lost.pop(u, None)
            except GPULost as exc:
                self._lost[u] = str(exc)
            seen = self._xid_at.get(u)
            if seen is not None and now - seen[0] >= self._recovery_s:
                del self._xid_at[u]
        return set(self.unhealthy) != before

"""Fault injection for the in-process API server: what a flaky control plane does to clients.
Owns: rules the server consults per request (fail the next N matching requests with 409, 410,
429, 500 or 503; add latency) and per watch (drop open watches, end them with 410 Expired,
send ERROR 410 to the next N watches, duplicate or reorder live events, bookmark now).
Named scenarios (kopf's style) are the SCENARIOS constants; `reset()` clears everything.
Thread-safe: tests call it from any thread; the server reads it on its own loop.
Tests: tests/integration/kubeapi/test_fault_injection.py"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

DUPLICATE_EVENTS = "duplicate-events"  # every live watch event is sent twice
REORDERED_EVENTS = "reordered-events"  # live watch events arrive in swapped pairs
SCENARIOS = (DUPLICATE_EVENTS, REORDERED_EVENTS)


@dataclass(frozen=True)
class Match:
    """Which requests a rule applies to; None matches anything."""

    method: str | None = None  # GET, POST, PUT, PATCH, DELETE
    resource: str | None = None  # plural: pods, nodes, leases, ...
    name: str | None = None
    subresource: str | None = None  # "status", "binding"; "" = the object itself
    watch: bool | None = None

    def __call__(self, method: str, resource: str, name: str, subresource: str,
                 watch: bool) -> bool:
        return all((
            self.method is None or self.method == method,
            self.resource is None or self.resource == resource,
            self.name is None or self.name == name,
            self.subresource is None or self.subresource == subresource,
            self.watch is None or self.watch == watch,
        ))


@dataclass
class _Failure:
    match: Match
    remaining: int
    code: int
    message: str


class Faults:
    """The handle tests get as `kube_api.faults` (None on a real API server)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[_Failure] = []
        self._latency: list[tuple[Match, float]] = []
        self._expire_next: list[list] = []  # [Match, remaining]
        self.scenarios: dict[str, str | None] = {}  # scenario -> resource (None = all)
        self._on_loop: Callable[[Callable[[], None]], None] | None = None
        self._watch_control: Callable[[str, str | None], None] | None = None

    # ---- requests -------------------------------------------------------------------------

    def fail_next(self, count: int = 1, *, code: int = 500, message: str = "",
                  method: str | None = None, resource: str | None = None,
                  name: str | None = None, subresource: str | None = None,
                  watch: bool | None = None) -> None:
        """Answer the next `count` matching requests with `code` (409 Conflict, 410 Gone,
        429 TooManyRequests, 500 InternalError, 503 ServiceUnavailable) and a real Status."""
        with self._lock:
            self._failures.append(_Failure(
                Match(method, resource, name, subresource, watch), count, code, message))

    def add_latency(self, seconds: float, *, method: str | None = None,
                    resource: str | None = None) -> None:
        """Delay every matching request by `seconds` before it is handled."""
        with self._lock:
            self._latency.append((Match(method, resource), seconds))

    def take_failure(self, method: str, resource: str, name: str, subresource: str,
                     watch: bool) -> tuple[int, str] | None:
        if not self._failures:  # the common case, without the lock
            return None
        with self._lock:
            for f in self._failures:
                if f.remaining > 0 and f.match(method, resource, name, subresource, watch):
                    f.remaining -= 1
                    return f.code, f.message
        return None

    def latency(self, method: str, resource: str) -> float:
        if not self._latency:
            return 0.0
        with self._lock:
            return sum(s for m, s in self._latency if m(method, resource, "", "", False))

    # ---- watches --------------------------------------------------------------------------

    def expire_next_watch(self, count: int = 1, *, resource: str | None = None) -> None:
        """The next `count` watch requests (on `resource`) get HTTP 200 then ERROR 410."""
        with self._lock:
            self._expire_next.append([Match(resource=resource), count])

    def take_watch_expiry(self, resource: str) -> bool:
        with self._lock:
            for rule in self._expire_next:
                if rule[1] > 0 and rule[0]("GET", resource, "", "", True):
                    rule[1] -= 1
                    return True
        return False

    def drop_watches(self, resource: str | None = None) -> None:
        """Close every open watch stream (on `resource`) now, without a final event."""
        self._control("drop", resource)

    def expire_watches(self, resource: str | None = None) -> None:
        """End every open watch (on `resource`) with an ERROR event carrying 410 Expired."""
        self._control("expire", resource)

    def bookmark_now(self, resource: str | None = None) -> None:
        """Send a BOOKMARK on every open watch that allowed bookmarks."""
        self._control("bookmark", resource)

    def compact(self) -> None:
        """Forget the history: every resourceVersion older than now gets 410 from here on."""
        self._control("compact", None)

    def scenario(self, name: str, resource: str | None = None) -> None:
        if name not in SCENARIOS:
            raise ValueError(f"unknown watch scenario {name!r}; known: {', '.join(SCENARIOS)}")
        with self._lock:
            self.scenarios[name] = resource

    def scenario_on(self, name: str, resource: str) -> bool:
        with self._lock:
            return name in self.scenarios and self.scenarios[name] in (None, resource)

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
            self._latency.clear()
            self._expire_next.clear()
            self.scenarios.clear()

    def _control(self, action: str, resource: str | None) -> None:
        if self._watch_control is None:
            raise RuntimeError("these faults need a running server")
        self._watch_control(action, resource)

"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it:
of several replicas, one leads (the scheduler extender reserves GPUs only there).

Owns: `LeaderElector.run()`: try to acquire every `retry_period_s` (jittered) until the Lease
is free (no holder, or its holder did not renew for `leaseDurationSeconds`, timed on the local
clock from when this replica last saw the record change, so clock skew does not matter); while
leading, renew every `retry_period_s`; step down (is_leader False, on_stopped_leading) when no
renew succeeded for `renew_deadline_s`; release on stop (holderIdentity "" and a 1 s duration,
so another replica takes over at once). Every write carries the resourceVersion it was
computed from: two replicas racing for one Lease get one success and one 409.
Invariant: `is_leader` is computed from when the last successful renew was sent, so it turns
False by the renew deadline even while an API call hangs; renew_deadline_s <
lease_duration_s keeps the old leader's view ending before anyone else may acquire.
Does not: fence writes (a paused process may act after losing the Lease; the extender's
writes carry resourceVersions for that). RBAC: get, create, patch on leases (the namespace).
(scheduler/follow.py instead follows the Lease of the kube-scheduler in the same pod.)
Tests: tests/unit/kube/test_lease.py, tests/integration/kube/test_two_electors_one_leader.py
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from gpuslice.kube import errors
from gpuslice.kube.client import dict_view
from gpuslice.kube.events import EventRecorder

__all__ = ["LeaderElector", "default_identity"]

log = logging.getLogger(__name__)

Callback = Callable[[], Awaitable[None] | None]


def default_identity() -> str:
    """Host name plus a random suffix, unique per process (as client-go's callers do)."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Leader election for one Lease `namespace/name` and this replica's `identity`."""

    def __init__(self, client: AsyncClient, name: str, namespace: str, *,
                 identity: str | None = None, lease_duration_s: int = 15,
                 renew_deadline_s: float = 10.0, retry_period_s: float = 2.0,
                 on_started_leading: Callback | None = None,
                 on_stopped_leading: Callback | None = None,
                 on_new_leader: Callable[[str], Awaitable[None] | None] | None = None,
                 recorder: EventRecorder | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not (isinstance(lease_duration_s, int) and lease_duration_s >= 1):
            raise ValueError(f"lease_duration_s={lease_duration_s!r}: whole seconds, at least 1")
        if not 0 < retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError(
                f"need 0 < retry_period_s ({retry_period_s}) < renew_deadline_s "
                f"({renew_deadline_s}) < lease_duration_s ({lease_duration_s}), so a leader "
                "steps down before anyone else may take the Lease")
        self.client, self.name, self.namespace = client, name, namespace
        self.identity = identity or default_identity()
        self.lease_duration_s, self.renew_deadline_s = lease_duration_s, renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_started_leading, self.on_stopped_leading = on_started_leading, on_stopped_leading
        self.on_new_leader, self.recorder, self.clock = on_new_leader, recorder, clock
        self.leader: str = ""  # the holder last seen in the Lease ("" = none)
        self._leading = False
        self._renewed_at = float("-inf")
        self._observed: tuple[str, str, int] | None = None  # (holder, renewTime, duration)
        self._observed_at = float("-inf")
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written

    @property
    def is_leader(self) -> bool:
        """True only while a renew succeeded less than renew_deadline_s ago."""
        return self._leading and self.clock() - self._renewed_at < self.renew_deadline_s

    async def run(self) -> None:
        """Campaign, lead, and campaign again after losing the Lease, until cancelled; a
        held Lease is then released. Never raises for API failures (they are logged)."""
        try:
            while True:
                await self._acquire()
                await self._lead()
        finally:
            if self._leading:
                await asyncio.shield(self._release())

    # -- the two phases ----------------------------------------------------------------------
    async def _acquire(self) -> None:
        while not await self._try_acquire_or_renew():
            await asyncio.sleep(self.retry_period_s * random.uniform(1.0, 1.2))
        self._leading = True
        log.info("%s is now the leader (lease %s/%s)", self.identity, self.namespace,
                 self.name, extra={"lease": self.name})
        if self.recorder is not None and self._lease is not None:
            self.recorder.emit(self._lease, "Normal", "LeaderElection",
                               f"{self.identity} became leader")
        await self._call(self.on_started_leading)

    async def _lead(self) -> None:
        while True:
            await asyncio.sleep(self.retry_period_s)
            left = self.renew_deadline_s - (self.clock() - self._renewed_at)
            renewed = False
            if left > 0:
                try:  # asyncio.timeout, not wait_for: a stop's cancel is never dropped (aio.py)
                    async with asyncio.timeout(left):
                        renewed = await self._try_acquire_or_renew()
                except TimeoutError:
                    log.warning("renewing lease %s/%s took longer than the renew deadline",
                                self.namespace, self.name)
            if not renewed and not self.is_leader:
                break
        self._leading = False
        log.warning("%s lost the lease %s/%s: no renew for %.1fs; not leading", self.identity,
                    self.namespace, self.name, self.renew_deadline_s, extra={"lease": self.name})
        await self._call(self.on_stopped_leading)

    # -- one attempt ------------------------------------------------------------------------
    async def _try_acquire_or_renew(self) -> bool:
        """One read and at most one guarded write; True when this replica holds the Lease."""
        try:
            return await self._attempt()
        except errors.APIError as exc:
            (log.debug if isinstance(exc, errors.Conflict) else log.warning)(
                "lease %s/%s: %s", self.namespace, self.name, exc, extra={"lease": self.name})
            return False

    async def _attempt(self) -> bool:
        view = dict_view(Lease)
        now_s, sent_at = _micro_time(), self.clock()  # sent_at: a renew counts from its start
        try:
            with errors.translate(f"get lease {self.namespace}/{self.name}"):
                lease = dict(await self.client.get(view, self.name, namespace=self.namespace))
        except errors.NotFound:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity,
                             "leaseDurationSeconds": self.lease_duration_s,
                             "acquireTime": now_s, "renewTime": now_s, "leaseTransitions": 0}}
            with errors.translate(f"create lease {self.namespace}/{self.name}"):
                created = await self.client.create(view(body), namespace=self.namespace)
            return await self._held(dict(created), sent_at)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        await self._observe(holder, str(spec.get("renewTime") or ""),
                            int(spec.get("leaseDurationSeconds") or self.lease_duration_s))
        ours = holder == self.identity
        if holder and not ours and self.clock() < self._observed_at + self._observed[2]:
            return False  # held by another replica that renewed recently
        change: dict[str, Any] = {"holderIdentity": self.identity,
                                  "leaseDurationSeconds": self.lease_duration_s,
                                  "renewTime": now_s}
        if not ours:
            change["acquireTime"] = now_s
            change["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        patch = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                 "spec": change}
        with errors.translate(f"update lease {self.namespace}/{self.name}"):
            updated = await self.client.patch(view, self.name, patch, namespace=self.namespace,
                                              patch_type=PatchType.MERGE)
        return await self._held(dict(updated), sent_at)

    async def _held(self, lease: dict[str, Any], sent_at: float) -> bool:
        self._lease = lease
        spec = lease.get("spec") or {}
        await self._observe(spec.get("holderIdentity") or "", str(spec.get("renewTime") or ""),
                            int(spec.get("leaseDurationSeconds") or self.lease_duration_s))
        self._renewed_at = sent_at  # not the reply's arrival: a slow reply must not extend it
        return True

    async def _observe(self, holder: str, renew_time: str, duration: int) -> None:
        record = (holder, renew_time, duration)
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        if holder != self.leader:
            self.leader = holder
            if holder and self.on_new_leader is not None:
                await self._call(lambda: self.on_new_leader(holder))  # type: ignore[misc]

    async def _release(self) -> None:
        """Give the Lease up (only if still ours), so the next leader need not wait it out."""
        self._leading = False
        try:
            with errors.translate(f"release lease {self.namespace}/{self.name}"):
                lease = dict(await self.client.get(dict_view(Lease), self.name,
                                                   namespace=self.namespace))
                if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                    now_s = _micro_time()
                    await self.client.patch(
                        dict_view(Lease), self.name,
                        {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                         "spec": {"holderIdentity": "", "leaseDurationSeconds": 1,
                                  "renewTime": now_s, "acquireTime": now_s}},
                        namespace=self.namespace, patch_type=PatchType.MERGE)
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        except errors.APIError as exc:
            log.warning("could not release lease %s/%s: %s; the next leader waits for it to "
                        "expire", self.namespace, self.name, exc)
        await self._call(self.on_stopped_leading)

    async def _call(self, callback: Callable[[], Any] | None) -> None:
        if callback is None:
            return
        try:
            result = callback()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("leader election callback failed")


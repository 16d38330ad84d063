"""Leading together with kube-scheduler: follow the Lease of the kube-scheduler in this pod.

Why: kube-scheduler calls the extender on loopback (the verbs have no authentication), so the
extender that binds must be the one beside the kube-scheduler that leads. Two independent
elections could pick kube-scheduler in one pod and the extender in another, and then nothing
would bind. With `leaderElection.follow: true` the extender does not campaign: it is the leader
while kube-scheduler's Lease (its `resourceName`/`resourceNamespace`) is held by an identity of
this host (client-go's `<hostname>_<uuid>`) and keeps being renewed.
Owns: `LeaseFollower` (same `is_leader` and `run()` as kube.lease.LeaderElector).
Invariants: a renewal counts from when this replica saw renewTime change, on its own clock
(no clock-skew assumption); no change for leaseDurationSeconds = not leading. Never writes.
Failure: API errors are logged and read as "not leading" once the last renewal seen is too old.
RBAC: get on leases. Tests: tests/unit/scheduler/test_follow.py,
tests/integration/scheduler/test_follower_refuses_bind.py (a Lease written by the test),
tests/integration/scheduler/test_extender_follows_kube_scheduler_lease.py (the real one)
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

from gpuslice.kube import errors
from gpuslice.kube.client import dict_view

__all__ = ["LeaseFollower"]

log = logging.getLogger(__name__)


class LeaseFollower:
    def __init__(self, client: AsyncClient, name: str, namespace: str, *,
                 host: str | None = None, retry_period_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.name, self.namespace = client, name, namespace
        self.host = host or socket.gethostname()
        self.retry_period_s, self.clock = retry_period_s, clock
        self.holder = ""  # the holder last seen
        self._renew: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._renewed_at = float("-inf")  # local time that record was first seen
        self._duration = 0.0

    @property
    def is_leader(self) -> bool:
        # client-go's identity is hostname + "_" + a UUID (no "_" in it): cut at the LAST "_",
        # or a host name with "_" in it never matches and "gpu" matches "gpu_2_<uuid>"
        ours = self.holder.rpartition("_")[0] == self.host
        return ours and self.clock() - self._renewed_at < self._duration

    async def run(self) -> None:
        """Read the Lease every retry period until cancelled."""
        while True:
            await self.observe()
            await asyncio.sleep(self.retry_period_s)

    async def observe(self) -> None:
        try:
            with errors.translate(f"get lease {self.namespace}/{self.name}"):
                lease = dict(await self.client.get(dict_view(Lease), self.name,
                                                   namespace=self.namespace))
        except errors.APIError as exc:
            log.warning("cannot read kube-scheduler's lease: %s", exc,
                        extra={"lease": self.name})
            return
        spec = lease.get("spec") or {}
        was = self.is_leader
        self.holder = str(spec.get("holderIdentity") or "")
        record = (self.holder, str(spec.get("renewTime") or ""))
        if record != self._renew:
            self._renew, self._renewed_at = record, self.clock()
        self._duration = float(spec.get("leaseDurationSeconds") or 0)
        if was != self.is_leader:
            log.info("%s leading with this pod's kube-scheduler (lease holder %s)",
                     "now" if self.is_leader else "no longer", self.holder or "none",
                     extra={"lease": self.name})

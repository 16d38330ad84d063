"""Before a pod is left nowhere to go because of pods in flight, read those pods again.

Owns: `FlightRecheck`. kube-scheduler parks a pod that an extender refused on every node and
tries it again on the next cluster event, such as the kubelet's status write that ends a flight.
The extender learns of that write from its own watch, which may show it after kube-scheduler has
already tried the pod again. Refused on a flight that has ended, the pod would then wait for
kube-scheduler's 5-minute flush, as nothing else happens on a quiet node. So when a filter would
leave a pod no node and names pods in flight, those pods are read from the API server first,
and applied to the pod informer as its watch would apply them (only if newer than what it
showed). The read starts after kube-scheduler's call, so after whatever event caused that call:
the refusal rests on what the API held then, and a flight that ends later makes an event of its
own.
Does not: decide anything (filter.py), or read anything on the paths that place a pod.
Failure: a read that fails is logged and counted; the filter answers from the watch as before.
Tests: tests/unit/scheduler/test_recheck.py; with the real kube-scheduler,
tests/integration/scheduler/test_waiting_pod_is_requeued.py (the watch made late)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from prometheus_client import Counter

from gpuslice.kube import errors
from gpuslice.kube.cache import Informer
from gpuslice.kube.client import dict_view
from gpuslice.scheduler.state import ExtenderState

__all__ = ["FlightRecheck"]

log = logging.getLogger(__name__)

MAX_PODS = 8  # pods read per filter call; more in flight on the offered nodes is rare


class FlightRecheck:
    """`await recheck(keys)`: read pods `keys` ("namespace/name") again; True when the state
    changed, so the filter should decide again."""

    def __init__(self, client: AsyncClient, pods: Informer[Any], state: ExtenderState,
                 counter: Counter) -> None:
        self.client, self.pods, self.state, self.counter = client, pods, state, counter
        self._view = dict_view(Pod)

    async def __call__(self, keys: Collection[str]) -> bool:
        if not keys:
            return False
        before = self.state.generation
        read = await asyncio.gather(*(self._read(k) for k in sorted(keys)[:MAX_PODS]))
        changed = self.state.generation != before
        self.counter.labels("flight ended" if changed else "still in flight" if all(read)
                            else "read failed").inc()
        return changed

    async def _read(self, key: str) -> bool:
        namespace, name = key.split("/", 1)
        try:
            with errors.translate(f"get pod {key}"):
                pod = dict(await self.client.get(self._view, name, namespace=namespace))
        except errors.NotFound:
            await self.pods.observe_gone(key)
            return True
        except errors.APIError as exc:
            log.warning("could not read a pod in flight again; the filter answers from the "
                        "watch: %s", exc, extra={"pod": key})
            return False
        await self.pods.observe(pod)
        return True

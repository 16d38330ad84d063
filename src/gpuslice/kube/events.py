"""Kubernetes Events about pods and nodes (`kubectl describe` shows them): why a pod did not
fit, why a bind failed, what the node agent refused.

Owns: `EventRecorder(client, component)`: core/v1 Events with type Normal or Warning, a
CamelCase reason, a message of at most 1 KiB (longer ones trimmed in the middle), the
involvedObject taken from the pod or node; a repeat of the same (object, type, reason,
message) within `window_s` bumps `count` and `lastTimestamp` of the Event already posted,
as client-go's recorder does, instead of posting a new one.
Best effort: an API failure is logged as a warning, never raised (kopf); a wrong type or
reason is a programming error and raises ValueError at once.
`record()` waits for the API; `emit()` returns at once (background task; `flush()` waits);
past `max_pending` unfinished emits (a slow API), new ones are dropped with one warning.
Posts about one (object, reason, message) run one at a time, so a burst aggregates.
RBAC: create, patch on events (core group) in the namespaces of the objects (nodes: default).
Tests: tests/unit/kube/test_events.py, tests/integration/kube/test_events_against_api.py
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from gpuslice.kube import errors
from gpuslice.kube.client import dict_view

__all__ = ["MAX_MESSAGE_BYTES", "EventRecorder", "trim_message"]

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1024
_INFIX = "..."
_REASON = re.compile(r"[A-Z][A-Za-z0-9]*\Z")
_MAX_REMEMBERED = 4096  # aggregation keys kept (oldest forgotten first): bounded memory


def trim_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """`message` if it fits in `limit` UTF-8 bytes, else its head + '...' + its tail (the
    end of a message often says the fix, so keep both ends)."""
    raw = message.encode()
    if len(raw) <= limit:
        return message
    half = (limit - len(_INFIX)) // 2
    head = raw[:half].decode(errors="ignore")  # a cut multi-byte character is dropped
    tail = raw[len(raw) - (limit - len(_INFIX) - half):].decode(errors="ignore")
    return head + _INFIX + tail


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _involved(obj: Mapping[str, Any] | Any) -> dict[str, str]:
    if not isinstance(obj, Mapping):  # a lightkube typed object
        obj = obj.to_dict()
    meta = obj.get("metadata") or {}
    ref = {"apiVersion": obj.get("apiVersion") or "v1", "kind": obj.get("kind") or "",
           "name": meta.get("name") or "", "namespace": meta.get("namespace") or "",
           "uid": meta.get("uid") or "", "resourceVersion": meta.get("resourceVersion") or ""}
    if not ref["kind"] or not ref["name"]:
        raise ValueError("an Event needs an object with kind and metadata.name "
                         "(objects from kube.cache/patch keep them; trimmers must too)")
    return {k: v for k, v in ref.items() if v}


class EventRecorder:
    """Posts Events for one component (`gpuslice-scheduler`, `gpuslice-node-agent`)."""

    def __init__(self, client: AsyncClient, component: str, *, host: str | None = None,
                 window_s: float = 600.0, max_pending: int = 1000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.component = component
        self.host = (host or socket.gethostname())[:128]
        self.window_s = window_s
        self.clock = clock
        # (uid/ns/kind/name, type, reason, message) -> [event namespace, name, count, last post]
        self._seen: OrderedDict[tuple[str, ...], list[Any]] = OrderedDict()
        self._locks: dict[tuple[str, ...], tuple[asyncio.Lock, int]] = {}  # key -> lock, users
        self._tasks: set[asyncio.Task[None]] = set()
        self.max_pending = max_pending
        self.dropped = 0  # emits refused because max_pending were unfinished

    def emit(self, obj: Mapping[str, Any] | Any, type_: str, reason: str, message: str) -> None:
        """Post in the background; returns at once. Arguments are checked now."""
        args = self._checked(obj, type_, reason, message)
        if len(self._tasks) >= self.max_pending:
            if self.dropped % 1000 == 0:
                log.warning("%d events still being posted (slow API?); dropping new ones "
                            "(%d so far)", len(self._tasks), self.dropped + 1)
            self.dropped += 1
            return
        task = asyncio.get_running_loop().create_task(self._post(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def record(self, obj: Mapping[str, Any] | Any, type_: str, reason: str,
                     message: str) -> None:
        """Post and wait for the API (errors are logged, not raised)."""
        await self._post(*self._checked(obj, type_, reason, message))

    async def flush(self) -> None:
        """Wait for every event emit() started (call before shutting down)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    def _checked(self, obj: Any, type_: str, reason: str,
                 message: str) -> tuple[dict[str, str], str, str, str]:
        if type_ not in ("Normal", "Warning"):
            raise ValueError(f"event type {type_!r}: must be 'Normal' or 'Warning'")
        if not _REASON.match(reason) or len(reason) > 128:
            raise ValueError(f"event reason {reason!r}: must be CamelCase, like BindFailed")
        return _involved(obj), type_, reason, trim_message(message)

    async def _post(self, ref: dict[str, str], type_: str, reason: str, message: str) -> None:
        where = f"{ref['namespace']}/{ref['name']}" if "namespace" in ref else ref["name"]
        target = f"{ref['kind'].lower()} {where}"
        key = (ref.get("uid", ""), ref.get("namespace", ""), ref["kind"], ref["name"], type_,
               reason, message)
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:  # one post per key at a time, so a burst of repeats aggregates
                await self._post_locked(key, ref, type_, reason, message)
        except errors.APIError as exc:
            log.warning("could not post event %s %s on %s: %s", type_, reason, target, exc,
                        extra={"reason": reason, "object": target})
        except Exception:  # best effort: an event must never break the caller
            log.exception("could not post event %s %s on %s", type_, reason, target)
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    async def _post_locked(self, key: tuple[str, ...], ref: dict[str, str], type_: str,
                           reason: str, message: str) -> None:
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[3] <= self.window_s:
            namespace, name, count, _ = seen
            try:
                with errors.translate(f"patch event {namespace}/{name}"):
                    await self.client.patch(
                        dict_view(Event), name, {"count": count + 1, "lastTimestamp": _now()},
                        namespace=namespace, patch_type=PatchType.MERGE)
            except errors.NotFound:
                pass  # expired (events live about an hour): post a new one below
            else:
                seen[2], seen[3] = count + 1, now
                self._seen.move_to_end(key)
                return
        namespace = ref.get("namespace") or "default"  # cluster-scoped objects: default
        name = f"{ref['name']}.{time.time_ns():x}"  # client-go's naming: unique per post
        stamp = _now()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref, "type": type_, "reason": reason, "message": message,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": self.component, "reportingInstance": self.host,
        }
        with errors.translate(f"create event {namespace}/{name}"):
            await self.client.create(dict_view(Event)(event), namespace=namespace)
        self._seen[key] = [namespace, name, 1, now]
        self._seen.move_to_end(key)
        while len(self._seen) > _MAX_REMEMBERED:
            self._seen.popitem(last=False)

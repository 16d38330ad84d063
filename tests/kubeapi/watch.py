"""Watch streams of the test API server: chunked JSON lines, one event per line.
Owns: the start of a watch (synthetic ADDED, or every change after a resourceVersion, or
ERROR 410 when that is too old; sendInitialEvents and its closing BOOKMARK), then live events
with selector-aware types (store.Watcher), BOOKMARKs on an idle watch that allowed them, the
end at timeoutSeconds, Tables for kubectl, and the faults that act on open watches (drop,
expire, bookmark now, duplicate or reordered events).
Does not: keep history or decide what a watcher sees (store.py).
Events queued together go out in one write (one TLS record, one syscall): bursts are common.
Tests: tests/integration/kubeapi/test_watch_resumes_expires_and_bookmarks.py,
test_fault_injection.py"""

from __future__ import annotations

import asyncio
import time

import msgspec
from aiohttp import web

from . import errors, tables
from .errors import ApiProblem
from .faults import DUPLICATE_EVENTS, REORDERED_EVENTS, Faults
from .resources import ResourceType
from .store import Matcher, Obj, Store, Watcher

JSON = "application/json"


class WatchStreams:
    """Serves watch requests and keeps the open ones, so faults can reach them."""

    def __init__(self, store: Store, faults: Faults, *, bookmark_interval: float,
                 watch_timeout: float) -> None:
        self.store = store
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.watches: set[tuple[ResourceType, Watcher]] = set()
        self._lines_cache: dict[tuple[int, str], tuple[Obj, bytes]] = {}

    def control(self, action: str, resource: str | None) -> None:
        """Put a control item (drop, expire, bookmark) on every open watch of `resource`."""
        for rt, watcher in list(self.watches):
            if resource is None or rt.plural == resource:
                watcher.queue.put_nowait((f"__{action}__", {"rv": self.store.rv}))

    async def serve(self, request: web.BaseRequest, rt: ResourceType, namespace: str | None,
                    matcher: Matcher) -> web.StreamResponse:
        q = request.query
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        initial = q.get("sendInitialEvents") in ("true", "1")
        if initial and (not bookmarks or q.get("resourceVersionMatch") != "NotOlderThan"):
            raise errors.invalid(rt, "", [("sendInitialEvents", "FieldValueForbidden",
                                             "Forbidden: sendInitialEvents requires "
                                             "allowWatchBookmarks=true and "
                                             "resourceVersionMatch=NotOlderThan")])
        try:
            timeout = float(q.get("timeoutSeconds") or self.watch_timeout)
        except ValueError:
            raise errors.bad_request(f"invalid timeoutSeconds {q.get('timeoutSeconds')!r}") \
                from None
        as_table = tables.wanted(request)
        response = web.StreamResponse(headers={"Content-Type": JSON})
        response.enable_chunked_encoding()
        if self.faults.take_watch_expiry(rt.plural):
            await response.prepare(request)
            await self._write(response, "ERROR", errors.expired(
                f"too old resource version: {q.get('resourceVersion', '0')} "
                f"({self.store.rv})").status)
            return response
        try:
            watcher, backlog = self.store.watch(rt, namespace, matcher,
                                                q.get("resourceVersion"), initial)
        except ApiProblem as p:
            if p.code != 410:
                raise
            await response.prepare(request)
            await self._write(response, "ERROR", p.status)
            return response
        start_rv = self.store.rv
        if as_table:  # kubectl get -w: each event's object is a one-row Table
            watcher.present = lambda obj: tables.table(rt, [obj], obj["metadata"][
                "resourceVersion"])
            watcher.plain = False
        self.watches.add((rt, watcher))
        try:
            await response.prepare(request)
            lines = [_line(kind, watcher.present(obj)) for kind, obj in backlog]
            if initial:
                lines.append(_line("BOOKMARK", self._bookmark(
                    rt, start_rv, {"k8s.io/initial-events-end": "true"})))
            for at in range(0, len(lines), 500):
                await response.write(b"".join(lines[at:at + 500]))
            await self._stream(response, rt, watcher, bookmarks, time.monotonic() + timeout)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watches.discard((rt, watcher))
            self.store.unwatch(watcher)
        return response

    async def _stream(self, response: web.StreamResponse, rt: ResourceType, watcher: Watcher,
                      bookmarks: bool, deadline: float) -> None:
        """Send queued events until the deadline or a control item ends the watch. Events
        queued together go out in one write (one TLS record, one syscall), as bursts are
        common (a thousand pods created at once)."""
        held: list[bytes] = []  # REORDERED_EVENTS keeps one event back
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            items = []
            if watcher.queue.empty():  # wait_for costs a task and a timer: only when idle
                wait = min(left, self.bookmark_interval) if bookmarks else left
                try:
                    items.append(await asyncio.wait_for(watcher.queue.get(), wait))
                except TimeoutError:
                    if bookmarks and deadline - time.monotonic() > 0:
                        await self._write(response, "BOOKMARK",
                                          self._bookmark(rt, self.store.rv))
                    continue
            while not watcher.queue.empty() and len(items) < 500:
                items.append(watcher.queue.get_nowait())
            out, end = self._lines(rt, watcher, items, bookmarks, held)
            if out:
                await response.write(b"".join(out))
            if end:
                return
        if held:
            await response.write(b"".join(held))

    def _lines(self, rt: ResourceType, watcher: Watcher, items: list[tuple[str, Obj]],
               bookmarks: bool, held: list[bytes]) -> tuple[list[bytes], bool]:
        """The lines for queued items, and whether the watch ends after them."""
        out: list[bytes] = []
        reorder = self.faults.scenario_on(REORDERED_EVENTS, rt.plural)
        duplicate = self.faults.scenario_on(DUPLICATE_EVENTS, rt.plural)
        for kind, obj in items:
            if kind in ("__drop__", "__expire__"):
                out.extend(held)
                held.clear()
                if kind == "__expire__":
                    out.append(_line("ERROR", errors.expired(
                        f"too old resource version: {obj['rv']} ({obj['rv'] + 1})").status))
                return out, True
            if kind == "__bookmark__":
                if bookmarks:
                    out.append(_line("BOOKMARK", self._bookmark(rt, obj["rv"])))
                continue
            line = self._encoded(kind, obj) if watcher.plain else _line(kind, watcher.present(obj))
            if reorder and not held:
                held.append(line)
                continue
            out.append(line)
            if duplicate:
                out.append(line)
            out.extend(held)
            held.clear()
        return out, False

    def _encoded(self, kind: str, obj: Obj) -> bytes:
        """One encoding of an event for every watcher that sends it as is (the objects are
        never mutated; the cache holds a reference, so an id is not reused while cached)."""
        key = (id(obj), kind)
        hit = self._lines_cache.get(key)
        if hit is not None:
            return hit[1]
        if len(self._lines_cache) > 4096:
            self._lines_cache.clear()
        line = _line(kind, obj)
        self._lines_cache[key] = (obj, line)
        return line

    def _bookmark(self, rt: ResourceType, rv: int, annotations: dict[str, str] | None = None
                  ) -> Obj:
        meta: Obj = {"resourceVersion": str(rv), "creationTimestamp": None}
        if annotations:
            meta["annotations"] = annotations
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}

    async def _write(self, response: web.StreamResponse, kind: str, obj: Obj) -> None:
        await response.write(_line(kind, obj))


def _line(kind: str, obj: Obj) -> bytes:
    return msgspec.json.encode({"type": kind, "object": obj}) + b"\n"



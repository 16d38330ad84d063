"""A list+watch cache (an informer) of one kind of object: the services' view of the cluster.

Owns: `Informer.run()`: list (paged, a page ahead), deliver every object as ADDED, set
`synced`, then watch from the list's resourceVersion with bookmarks, keeping the last
resourceVersion seen. Each listed or watched object is decoded through the caller's `schema`
(only the fields its trim reads are built) and trimmed. `store` maps "namespace/name" (or
"name") to the trimmed object; `handler(Change)` sees each change.
`observe` / `observe_gone` apply what a GET found as the watch would (scheduler/recheck.py).
Invariants: the handler's view never goes backwards: a change is delivered only when the
object's resourceVersion is newer than the one held, compared as integers when both are
(etcd-backed servers, i.e. every real one); otherwise (opaque versions) it is delivered. A
deletion leaves a tombstone so a late, re-ordered event cannot bring the object back.
On 410 Gone (HTTP 410 or an ERROR event): list again and deliver only the difference
(ADDED/MODIFIED/DELETED; a name reused by a new uid is DELETED then ADDED). Other failures:
exponential back-off with jitter (capped, reset after a healthy minute), then resume from
the last resourceVersion. A watch that ends at once with nothing counts as a failure: never
a hot loop. Invalid (400/422: a bad selector) is raised: retrying cannot fix it.
Does not: decode gpuslice annotations (the caller's `trim` does) or write to the API.
RBAC: list, watch on the resource. Tests: tests/unit/kube/test_cache_*.py,
tests/integration/kube/test_cache_*.py
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Generic, NamedTuple, TypedDict, TypeVar

import httpx2
import msgspec
from lightkube import ALL_NS, AsyncClient
from lightkube.core import resource as lkr
from lightkube.core.client import FieldSelector, LabelSelector
from lightkube.core.selector import build_selector

from gpuslice.kube import errors
from gpuslice.kube.client import dict_view, type_meta

__all__ = ["Backoff", "Change", "Informer", "decoder", "newer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_TOMBSTONES = 10_000  # deleted keys remembered, oldest forgotten first
_TRIM_BATCH = 100  # listed objects decoded and trimmed between two turns of the event loop


_pausing = 0  # lists under way that paused the collector (the collector is process-wide)
_resume = False  # whether the first of them found it on


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off during a list: its pages are millions of new
    objects that reference counting frees, and the collections they set off walk everything
    held so far again and again (40,000 pods: about half of the list's CPU). Concurrent lists
    share one pause; cycles made meanwhile are collected as it ends (one young collection)."""
    global _pausing, _resume
    if _pausing == 0:
        _resume = gc.isenabled()
        gc.disable()
    _pausing += 1
    try:
        yield
    finally:
        _pausing -= 1
        if _pausing == 0 and _resume:
            gc.enable()
            gc.collect(0)  # what the next allocation would set off anyway, now, known done


class _Page(TypedDict, total=False):
    metadata: dict[str, Any]
    items: list[msgspec.Raw] | None


class _Event(TypedDict, total=False):
    type: Any
    object: msgspec.Raw


def decoder(schema: Any = None) -> Callable[[bytes | msgspec.Raw], Any]:
    """JSON -> the object, decoded through `schema` (a TypedDict tree: the fields it does not
    name are skipped, never built, which is most of a Pod's or a Node's bytes); JSON that does
    not fit it is decoded whole, as with no schema."""
    if schema is None:
        return msgspec.json.decode
    typed = msgspec.json.Decoder(schema)

    def decode(data: bytes | msgspec.Raw) -> Any:
        try:
            return typed.decode(data)
        except msgspec.ValidationError:
            return msgspec.json.decode(data)

    return decode


# a list reply of another shape is undecodable (errors.translate: Unavailable, retried with
# back-off, as lightkube's list answered it); a watch line of another shape is skipped
_decode_page = msgspec.json.Decoder(_Page).decode
_decode_event = decoder(_Event)


class _Entry(NamedTuple, Generic[T]):
    """An object as the view keeps it."""

    key: str
    version: str
    uid: str
    trimmed: T


class Change(NamedTuple, Generic[T]):
    """One change the handler sees. ADDED: old is None; DELETED: new is None (old = last held)."""

    type: str  # "ADDED" | "MODIFIED" | "DELETED"
    key: str
    old: T | None
    new: T | None


def newer(candidate: str, held: str | None) -> bool:
    """Whether resourceVersion `candidate` may replace `held`: as integers when both are
    (every etcd-backed server), else yes (versions are opaque by the API's contract)."""
    if held is None:
        return True
    if candidate.isdigit() and held.isdigit():
        return int(candidate) > int(held)
    return True


def _latest(candidate: str | None, held: str | None) -> str | None:
    """The watch position to keep: the highest version seen, or the last when opaque."""
    if candidate is None:
        return held
    if held is not None and candidate.isdigit() and held.isdigit():
        return candidate if int(candidate) > int(held) else held
    return candidate


class Backoff:
    """Exponential back-off with +-jitter, capped; the exponent resets once no failure came for
    `reset_after_s` (a healthy period), as client-go's ExponentialBackoffManager."""

    def __init__(self, initial_s: float = 0.5, cap_s: float = 30.0, factor: float = 2.0,
                 jitter: float = 0.5, reset_after_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.initial_s, self.cap_s, self.factor = initial_s, cap_s, factor
        self.jitter, self.reset_after_s, self.clock = jitter, reset_after_s, clock
        self.failures = 0
        self._last: float | None = None

    def next_delay(self, at_least_s: float = 0.0) -> float:
        """Record one failure and return how long to wait before the next attempt."""
        now = self.clock()
        if self._last is not None and now - self._last >= self.reset_after_s:
            self.failures = 0
        self._last = now
        base = min(self.cap_s, self.initial_s * self.factor ** min(self.failures, 64))
        self.failures += 1
        return max(at_least_s, base * random.uniform(1 - self.jitter, 1 + self.jitter))


class _Restart(Exception):
    """The watch ended in a way that needs a fresh list (410 Gone as an ERROR event)."""

    def __init__(self, delivered: int) -> None:
        super().__init__(delivered)
        self.delivered = delivered


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The non-blank lines of a stream as bytes, however the chunks cut them (an event of a
    few MiB spans many): msgspec decodes bytes directly, without a text decoder per chunk."""
    parts: list[bytes] = []
    async for chunk in chunks:
        if b"\n" not in chunk:
            parts.append(chunk)
            continue
        *lines, rest = chunk.split(b"\n")
        if parts:
            lines[0] = b"".join((*parts, lines[0]))
            parts.clear()
        for line in lines:
            if line.strip():
                yield line
        if rest:
            parts.append(rest)
    tail = b"".join(parts)
    if tail.strip():
        yield tail


class Informer(Generic[T]):
    """List+watch one resource into `store`; see the module docstring for the guarantees.

    client: lightkube AsyncClient (kube.client.make_client); resource: a lightkube resource
    class (Pod, Node, ...); namespace: None for all namespaces; labels/fields: lightkube
    selectors ({"gpuslice.io/managed": "true"}, {"spec.nodeName": "gpu-1"}); trim(obj) keeps
    what the caller needs (default: the whole dict); schema: the fields trim reads, as a
    TypedDict tree (decoder()), so a list or an event builds nothing else (None: all of
    them); handler(change) may be sync or async.
    """

    def __init__(self, client: AsyncClient, resource: type, *, namespace: str | None = None,
                 labels: LabelSelector | None = None, fields: FieldSelector | None = None,
                 trim: Callable[[dict[str, Any]], T] = lambda obj: obj,  # type: ignore
                 handler: Callable[[Change[T]], Awaitable[None] | None] | None = None,
                 schema: Any = None, page_size: int = 500, watch_timeout_s: int = 300,
                 backoff: Backoff | None = None, name: str | None = None) -> None:
        self.client, self.resource = client, resource
        # lightkube reads namespace=None as "the client's default namespace"
        namespaced = issubclass(resource, lkr.NamespacedResource)
        self.namespace = (namespace or ALL_NS) if namespaced else None
        self.labels, self.fields = labels, fields
        self.trim, self.handler, self._decode = trim, handler, decoder(schema)
        self._type_meta = type_meta(resource)
        self.page_size, self.watch_timeout_s = page_size, watch_timeout_s
        self.backoff = backoff or Backoff()
        self.name = name or resource.__name__.lower() + "s"
        self.store: dict[str, T] = {}
        self.synced = asyncio.Event()
        self.resource_version: str | None = None  # where the next watch starts
        self.relists = 0  # lists after the first (410s): for tests and metrics
        self._view = dict_view(resource)
        self._versions: dict[str, tuple[str, str]] = {}  # key -> (resourceVersion, uid)
        self._tombstones: OrderedDict[str, str] = OrderedDict()  # key -> version deleted at
        self._stopped = False
        self._task: asyncio.Task[None] | None = None

    # -- public --------------------------------------------------------------------------
    async def run(self, *, _iterations: int | None = None) -> None:
        """List and watch until stop() (returns) or cancellation. `_iterations` bounds the
        number of list/watch attempts, for tests."""
        if self._stopped:
            return
        self._task = asyncio.get_running_loop().create_task(self._loop(_iterations))
        try:
            await self._task
        except asyncio.CancelledError:
            if not self._stopped:
                raise
        finally:
            self._task = None

    def stop(self) -> None:
        """End run() as soon as possible (from any coroutine of the same loop); for good."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    # -- the loop ------------------------------------------------------------------------
    async def _loop(self, iterations: int | None) -> None:
        just_listed = False
        while iterations is None or iterations > 0:
            if iterations is not None:
                iterations -= 1
            delay, listing = 0.0, self.resource_version is None
            try:
                if listing:
                    await self._list()
                else:
                    started, delivered = time.monotonic(), await self._watch()
                    if not delivered and time.monotonic() - started < 1.0:
                        # an empty watch that ended at once: a proxy or server in trouble
                        delay = self.backoff.next_delay()
                        log.warning("watch of %s ended at once; retrying in %.1fs", self.name,
                                    delay, extra={"resource": self.name})
            except (_Restart, errors.Gone) as exc:
                self.resource_version = None  # list again at once, unless a list itself
                # expired (paging too slow) or the last list was outdated at once
                if listing or (just_listed and not getattr(exc, "delivered", 0)):
                    delay = self.backoff.next_delay()
                    log.warning("%s of %s: 410 Gone %s; listing again in %.1fs",
                                "list" if listing else "watch", self.name,
                                "while paging" if listing else "right after a list", delay)
            except errors.Invalid:
                raise  # a bad selector or resource: retrying cannot help
            except errors.APIError as exc:
                delay = self.backoff.next_delay(getattr(exc, "retry_after", None) or 0.0)
                log.warning("%s; retrying in %.1fs", exc, delay, extra={"resource": self.name})
            just_listed = listing and self.resource_version is not None
            if delay:
                await asyncio.sleep(delay)

    async def _list(self) -> None:
        with _collector_paused():
            await self._list_and_replace()

    async def _list_and_replace(self) -> None:
        what = f"list {self.name}"
        entries: list[_Entry[T]] = []
        version = ""
        with errors.translate(what):
            async with contextlib.aclosing(self._pages()) as pages:
                async for items, at in pages:
                    version = at  # the list's: the same on every page
                    # trimmed as each page comes (40,000 whole pods held at once are ~1 GB), a
                    # batch at a time, each after a turn of the event loop: the next page's
                    # request goes out first, and no other task waits longer than a batch
                    for i in range(0, len(items), _TRIM_BATCH):
                        await asyncio.sleep(0)
                        entries += [entry for raw in items[i:i + _TRIM_BATCH]
                                    if (entry := self._entry(self._object(raw))) is not None]
        if not version:
            raise errors.Unavailable(f"{what}: the reply has no resourceVersion to watch from")
        await self._replace(entries)
        self.resource_version = version
        if self.synced.is_set():
            self.relists += 1
        self.synced.set()
        log.info("listed %d %s at resourceVersion %s", len(entries), self.name, version,
                 extra={"resource": self.name})

    async def _watch(self) -> int:
        """One watch request; returns how many events it delivered when the server ends it."""
        count = 0
        async for event in self._stream():
            kind = event.get("type") if isinstance(event, dict) else None
            obj = event.get("object") if isinstance(event, dict) else None
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
                log.warning("watch of %s: malformed event skipped", self.name)
                continue
            if kind == "ERROR":
                error = errors.from_status(obj, f"watch {self.name}")
                if isinstance(error, errors.Gone):
                    log.info("%s; listing again", error)
                    raise _Restart(count)
                raise error
            meta = obj.get("metadata") or {}
            if kind == "BOOKMARK":
                self.resource_version = _latest(meta.get("resourceVersion"),
                                                self.resource_version)
                continue
            if kind not in ("ADDED", "MODIFIED", "DELETED") or not meta.get("name"):
                log.warning("watch of %s: unexpected event %r skipped", self.name, kind)
                continue
            self.resource_version = _latest(meta.get("resourceVersion"), self.resource_version)
            await self._apply(kind, obj)
            count += 1
        return count

    async def _stream(self) -> AsyncIterator[Any]:
        """The events of one HTTP watch, decoded as dicts. lightkube's public watch() has no
        allowWatchBookmarks and reconnects by itself without a back-off, so this sends one
        request built by lightkube's own request builder (auth, paths, TLS stay lightkube's)."""
        generic = self.client._client  # lightkube 1.0: GenericAsyncClient
        # as client-go: between 1x and 2x, so many watchers do not all reconnect together
        timeout_s = int(self.watch_timeout_s * random.uniform(1.0, 2.0))
        params: dict[str, Any] = {"resourceVersion": self.resource_version,
                                  "allowWatchBookmarks": "true", "timeoutSeconds": timeout_s,
                                  **self._selectors()}
        what = f"watch {self.name}"
        with errors.translate(what):
            request = generic.prepare_request("list", res=self._view, namespace=self.namespace,
                                              watch=True, params=params)
            # the server ends the watch after timeoutSeconds; a silent connection past that
            # (plus a margin) is dead, whatever TCP thinks
            request.timeout = httpx2.Timeout(10.0, read=timeout_s + 30.0)
            response = await generic.send(generic.build_adapter_request(request), stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    generic.raise_for_status(response)
                async for line in _lines(response.aiter_bytes()):
                    event = _decode_event(line)
                    if isinstance(event, dict) and isinstance(event.get("object"), msgspec.Raw):
                        raw = event["object"]  # an ERROR's Status is read whole
                        event["object"] = (msgspec.json.decode(raw) if event.get("type") == "ERROR"
                                           else self._object(raw))
                    yield event
            finally:
                await response.aclose()

    async def _pages(self) -> AsyncIterator[tuple[list[Any], str]]:
        """The list, a page (`page_size` objects, as undecoded JSON) at a time, with the
        resourceVersion it was read at. The next page is asked for before this one is handed
        over, so the API server serves it while the caller decodes this one (two pages held at
        most). Sent as lightkube's own list would be (its request builder: auth, paths, TLS),
        but each object is decoded by the caller, through the schema."""
        params: dict[str, Any] = {"limit": self.page_size, **self._selectors()}
        ahead: asyncio.Task[Any] | None = asyncio.ensure_future(self._page(params))
        try:
            while ahead is not None:
                page = await ahead
                meta = page.get("metadata") or {}
                token = meta.get("continue")
                ahead = asyncio.ensure_future(self._page({**params, "continue": token})) \
                    if token else None
                yield page.get("items") or [], str(meta.get("resourceVersion") or "")
        finally:
            if ahead is not None:  # a list given up: its next page is not wanted, nor its error
                ahead.cancel()
                ahead.add_done_callback(lambda task: task.cancelled() or task.exception())

    async def _page(self, params: dict[str, Any]) -> Any:
        generic = self.client._client  # lightkube 1.0: GenericAsyncClient
        request = generic.prepare_request("list", res=self._view, namespace=self.namespace,
                                          params=params)
        response = await generic.send(generic.build_adapter_request(request))
        generic.raise_for_status(response)
        return _decode_page(response.content)

    def _object(self, raw: msgspec.Raw) -> Any:
        """A listed or watched object, through the schema, with its apiVersion and kind (a
        list's items come without them; whatever names the object, an Event, needs them)."""
        obj = self._decode(raw)
        if isinstance(obj, dict) and "kind" not in obj:
            obj.update(self._type_meta)
        return obj

    def _selectors(self) -> dict[str, str]:
        params = {}
        if self.labels:
            params["labelSelector"] = build_selector(self.labels)
        if self.fields:
            params["fieldSelector"] = build_selector(self.fields, for_fields=True)
        return params

    async def observe(self, obj: dict[str, Any]) -> None:
        """Apply an object of this informer's selection read outside the watch (a GET), as
        its watch event would be: delivered only if newer than what the handler has seen, and
        the watch's older events about it are then dropped."""
        await self._apply("MODIFIED", obj)

    async def observe_gone(self, key: str) -> None:
        """A GET found no object `key`: deliver its deletion now. The watch's own comes later
        and changes nothing; a watch event about it newer than the version held (its deletion
        under way, say) still shows it until then."""
        held = self._versions.get(key)
        if held is not None:
            self._forget(key, held[0])
            await self._deliver(Change("DELETED", key, self.store.pop(key, None), None))

    # -- keeping the view ------------------------------------------------------------------
    def _key(self, meta: Mapping[str, Any]) -> str:
        namespace = meta.get("namespace")
        return f"{namespace}/{meta['name']}" if namespace else meta["name"]

    async def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        key, version = self._key(meta), str(meta.get("resourceVersion") or "")
        held = self._versions.get(key)
        if held is None and key in self._tombstones and not newer(version,
                                                                  self._tombstones[key]):
            return  # a late event about an object already deleted
        if held is not None and not newer(version, held[0]):
            return  # a duplicate or an event older than what the handler has seen
        if kind == "DELETED":
            if held is not None:
                self._forget(key, version)
                await self._deliver(Change("DELETED", key, self.store.pop(key, None), None))
            else:
                self._bury(key, version)
            return
        await self._put(obj, held)

    def _entry(self, obj: Any) -> _Entry[T] | None:
        """An object as the view keeps it (None: no name, or its trim failed)."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not meta.get("name"):
            return None
        key = self._key(meta)
        try:
            trimmed = self.trim(obj)
        except Exception:
            log.exception("trim of %s %s failed; the object is ignored", self.name, key)
            return None
        return _Entry(key, str(meta.get("resourceVersion") or ""), str(meta.get("uid") or ""),
                      trimmed)

    async def _put(self, obj: dict[str, Any], held: tuple[str, str] | None) -> None:
        if (entry := self._entry(obj)) is not None:
            await self._hold(entry, held)

    async def _hold(self, entry: _Entry[T], held: tuple[str, str] | None) -> None:
        key, version, uid, trimmed = entry
        if held is not None and held[1] and uid and held[1] != uid:
            # the name now belongs to a new object: the old one was deleted meanwhile
            self._forget(key, version)
            await self._deliver(Change("DELETED", key, self.store.pop(key, None), None))
            held = None
        self._versions[key] = (version, uid)
        self._tombstones.pop(key, None)
        old = self.store.get(key)
        self.store[key] = trimmed
        await self._deliver(Change("ADDED" if held is None else "MODIFIED", key, old, trimmed))

    def _forget(self, key: str, version: str) -> None:
        self._versions.pop(key, None)
        self._bury(key, version)

    def _bury(self, key: str, version: str) -> None:
        self._tombstones[key] = version
        self._tombstones.move_to_end(key)
        while len(self._tombstones) > _TOMBSTONES:
            self._tombstones.popitem(last=False)

    async def _replace(self, entries: list[_Entry[T]]) -> None:
        """Make the view equal a fresh list, delivering only the difference."""
        listed: set[str] = set()
        for entry in entries:
            listed.add(entry.key)
            held = self._versions.get(entry.key)
            if held is None or newer(entry.version, held[0]):
                await self._hold(entry, held)
        for key in [k for k in self._versions if k not in listed]:
            self._forget(key, self._versions[key][0])
            await self._deliver(Change("DELETED", key, self.store.pop(key, None), None))
        self._tombstones.clear()  # the list is the whole truth now

    async def _deliver(self, change: Change[T]) -> None:
        if self.handler is None:
            return
        try:
            result = self.handler(change)
            if result is not None and inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("handler of %s failed on %s %s", self.name, change.type, change.key)


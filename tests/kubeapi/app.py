"""HTTP face of the test API server: kube-apiserver's paths, verbs, bodies and watch streams.
Owns: URL parsing (core and group paths, namespaced and cluster-scoped, subresources, the
legacy /watch/ prefix), discovery and /version, request bodies (JSON; YAML for apply),
Status replies, chunked watch streams with BOOKMARK/ERROR events, fault hooks per request,
and a log of requests for tests. kubectl gets Tables when it asks for them.
Does not: hold state (store.py) or run threads (server.py).
Tests: tests/integration/kubeapi/"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import msgspec
import yaml
from aiohttp import web

from . import errors, protobuf, resources, tables
from .admission import Admission
from .errors import ApiProblem
from .faults import DUPLICATE_EVENTS, REORDERED_EVENTS, Faults
from .resources import BY_PATH, ResourceType
from .selectors import field_matcher, label_matcher
from .store import Obj, Store, Watcher

log = logging.getLogger("kubeapi")
JSON = "application/json"
VERSION = {
    "major": "1", "minor": "36", "gitVersion": "v1.36.0-gpuslice-test", "gitCommit": "",
    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
    "compiler": "gc", "platform": "linux/amd64",
}


@dataclass
class RequestRecord:
    """One request as the server saw it (tests assert on these: no hot loops, retries...)."""

    method: str
    path: str
    query: dict[str, str]
    status: int = 0


@dataclass
class Target:
    rt: ResourceType
    namespace: str | None
    name: str
    subresource: str


def reply(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status, content_type=JSON)


def problem_reply(p: ApiProblem) -> web.Response:
    return reply(p.status, p.code)


class ApiApp:
    """The aiohttp application and the per-server settings its handlers read."""

    def __init__(self, store: Store, faults: Faults, *, bookmark_interval: float,
                 watch_timeout: float) -> None:
        self.store = store
        self.faults = faults
        self.admission = Admission(store)
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.requests: deque[RequestRecord] = deque(maxlen=20000)
        self.watches: set[tuple[ResourceType, Watcher]] = set()
        self._lines_cache: dict[tuple[int, str], tuple[Obj, bytes]] = {}
        self.app = web.Application(client_max_size=16 * 1024 * 1024)
        self.app.router.add_route("*", "/{path:.*}", self.handle)

    # ---- watch control (called on the loop by faults) ---------------------------------------

    def control(self, action: str, resource: str | None) -> None:
        if action == "compact":
            self.store.compact()
            return
        for rt, watcher in list(self.watches):
            if resource is None or rt.plural == resource:
                watcher.queue.put_nowait((f"__{action}__", {"rv": self.store.rv}))

    # ---- dispatch -------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        record = RequestRecord(request.method, request.path, dict(request.query))
        self.requests.append(record)
        try:
            response = await self._dispatch(request)
        except ApiProblem as p:
            response = problem_reply(p)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug here must reach the test as a Status, with its cause
            log.exception("%s %s failed", request.method, request.path)
            response = problem_reply(errors.internal(f"{type(e).__name__}: {e}"))
        record.status = response.status
        return response

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts or parts[0] not in ("api", "apis"):
            return self._non_resource(parts)
        if parts[0] == "api":
            if len(parts) == 1:
                return reply(resources.api_versions())
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return reply(resources.api_group_list())
            if len(parts) == 2:
                return self._found(resources.api_group(parts[1]))
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            return self._found(resources.resource_list(group, version))
        watch_prefix = rest[0] == "watch"
        if watch_prefix:
            rest = rest[1:]
        target = self._target(group, version, rest)
        watch = watch_prefix or request.query.get("watch") in ("true", "1")
        await self._faults(request, target, watch)
        return await self._verb(request, target, watch)

    def _non_resource(self, parts: list[str]) -> web.Response:
        path = "/".join(parts)
        if path == "version":
            return reply(VERSION)
        if path in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if path == "openapi/v3":
            return reply(resources.openapi_v3_index())
        if path.startswith("openapi/v3/"):
            return self._found(resources.openapi_v3(path.removeprefix("openapi/v3/")))
        raise errors.path_not_found()

    def _found(self, doc: dict[str, Any] | None) -> web.Response:
        if doc is None:
            raise errors.path_not_found()
        return reply(doc)

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        if (rest[0] == "namespaces" and len(rest) >= 3
                and (rt := BY_PATH.get((group, version, rest[2]))) and rt.namespaced):
            ns, tail = rest[1], rest[3:]
        else:
            rt = BY_PATH.get((group, version, rest[0]))
            if rt is None:
                raise errors.path_not_found()
            ns, tail = None, rest[1:]
        if len(tail) > 2 or (len(tail) == 2 and tail[1] not in rt.subresources):
            raise errors.path_not_found()
        if rt.namespaced and ns is None and tail:
            raise errors.path_not_found()
        return Target(rt, ns, tail[0] if tail else "", tail[1] if len(tail) == 2 else "")

    async def _faults(self, request: web.Request, t: Target, watch: bool) -> None:
        delay = self.faults.latency(request.method, t.rt.plural)
        if delay:
            await asyncio.sleep(delay)
        failure = self.faults.take_failure(request.method, t.rt.plural, t.name, t.subresource,
                                           watch)
        if failure is None:
            return
        code, message = failure
        if code == 409:
            raise errors.conflict(t.rt, t.name, message or errors.STALE, t.subresource)
        if code == 410:
            raise errors.expired(message or "too old resource version: 1 (2)")
        if code == 429:
            raise ApiProblem(429, "TooManyRequests", message or "too many requests",
                             {"retryAfterSeconds": 1})
        if code == 503:
            raise ApiProblem(503, "ServiceUnavailable", message or "the server is currently "
                             "unable to handle the request")
        raise errors.internal(message or "injected fault")

    async def _verb(self, request: web.Request, t: Target, watch: bool) -> web.StreamResponse:
        method, store, q = request.method, self.store, request.query
        manager = q.get("fieldManager") or request.headers.get("User-Agent", "").split("/")[0]
        dry_run = q.get("dryRun") == "All"
        if not t.name:
            if method == "GET" and watch:
                return await self._watch(request, t)
            if method == "GET":
                return self._list(request, t)
            if method == "POST" and (t.namespace is not None or not t.rt.namespaced):
                body = await _body(request)
                _check_kind(t.rt, body)
                _check_namespace(t, body)
                body, warnings = await self.admission.create(
                    t.rt, t.namespace, store.admission_view(t.rt, t.namespace, body, manager),
                    manager=manager, dry_run=dry_run)
                obj = store.create(t.rt, t.namespace, body, manager=manager, dry_run=dry_run,
                                   admitted=True)
                response = reply(obj, 201)
                for warning in warnings:
                    response.headers.add("Warning", f'299 - "{warning}"')
                return response
            if method == "DELETE":
                items = store.delete_collection(t.rt, t.namespace, self._matcher(t, q),
                                                await _options(request))
                return reply({"kind": f"{t.rt.kind}List", "apiVersion": t.rt.api_version,
                              "metadata": {"resourceVersion": str(store.rv)}, "items": items})
            raise errors.method_not_allowed(method, t.rt.plural)
        if t.subresource == "binding":
            if method != "POST":
                raise errors.method_not_allowed(method, "pods/binding")
            store.bind(t.namespace or "", t.name, await _body(request))
            return reply({"kind": "Status", "apiVersion": "v1", "metadata": {},
                          "status": "Success", "code": 201}, 201)
        if method == "GET":
            return self._get(request, t)
        if method == "PUT":
            body = await _body(request)
            _check_kind(t.rt, body)
            _check_namespace(t, body)
            return reply(store.update(t.rt, t.namespace, t.name, body,
                                      subresource=t.subresource, manager=manager,
                                      dry_run=dry_run))
        if method == "PATCH":
            content_type = request.content_type
            if content_type == "application/apply-patch+yaml":
                return reply(self._apply(request, t, await _body(request), manager, dry_run))
            return reply(store.patch(t.rt, t.namespace, t.name, content_type,
                                     await _body(request), subresource=t.subresource,
                                     manager=manager, dry_run=dry_run))
        if method == "DELETE" and not t.subresource:
            return reply(store.delete(t.rt, t.namespace, t.name, await _options(request)))
        raise errors.method_not_allowed(method, t.rt.plural)

    def _apply(self, request: web.Request, t: Target, body: Obj, manager: str,
               dry_run: bool) -> Obj:
        """Server-side apply, simplified: create if missing, else a strategic merge patch
        (no field ownership or apply conflicts)."""
        if not request.query.get("fieldManager"):
            raise errors.bad_request("PATCH, application/apply-patch+yaml: fieldManager is "
                                     "required for apply requests")
        try:
            self.store.get(t.rt, t.namespace, t.name)
        except ApiProblem as p:
            if p.code != 404 or t.subresource:
                raise
            return self.store.create(t.rt, t.namespace, body, manager=manager, dry_run=dry_run)
        return self.store.patch(t.rt, t.namespace, t.name,
                                "application/strategic-merge-patch+json", body,
                                subresource=t.subresource, manager=manager, dry_run=dry_run)

    def _matcher(self, t: Target, q: Any):
        labels = label_matcher(q.get("labelSelector"))
        fields = field_matcher(t.rt, q.get("fieldSelector"))
        return lambda obj: labels(obj) and fields(obj)

    def _get(self, request: web.Request, t: Target) -> web.Response:
        obj = self.store.get(t.rt, t.namespace, t.name)
        if tables.wanted(request):
            return reply(tables.table(t.rt, [obj], obj["metadata"]["resourceVersion"]))
        return reply(obj)

    def _list(self, request: web.Request, t: Target) -> web.Response:
        q = request.query
        try:
            limit = int(q.get("limit", "0") or 0)
        except ValueError:
            raise errors.bad_request(f"invalid limit {q.get('limit')!r}") from None
        items, rv, token = self.store.list(
            t.rt, t.namespace, self._matcher(t, q), rv=q.get("resourceVersion"),
            rv_match=q.get("resourceVersionMatch"), limit=limit, token=q.get("continue"))
        if tables.wanted(request):
            return reply(tables.table(t.rt, items, rv, token))
        meta = {"resourceVersion": rv, **({"continue": token} if token else {})}
        return reply({"kind": f"{t.rt.kind}List", "apiVersion": t.rt.api_version,
                      "metadata": meta, "items": items})

    # ---- watch ----------------------------------------------------------------------------

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        initial = q.get("sendInitialEvents") in ("true", "1")
        if initial and (not bookmarks or q.get("resourceVersionMatch") != "NotOlderThan"):
            raise errors.invalid(t.rt, "", [("sendInitialEvents", "FieldValueForbidden",
                                             "Forbidden: sendInitialEvents requires "
                                             "allowWatchBookmarks=true and "
                                             "resourceVersionMatch=NotOlderThan")])
        try:
            timeout = float(q.get("timeoutSeconds") or self.watch_timeout)
        except ValueError:
            raise errors.bad_request(f"invalid timeoutSeconds {q.get('timeoutSeconds')!r}") \
                from None
        matcher = self._matcher(t, q)
        as_table = tables.wanted(request)
        response = web.StreamResponse(headers={"Content-Type": JSON})
        response.enable_chunked_encoding()
        if self.faults.take_watch_expiry(t.rt.plural):
            await response.prepare(request)
            await self._write(response, "ERROR", errors.expired(
                f"too old resource version: {q.get('resourceVersion', '0')} "
                f"({self.store.rv})").status)
            return response
        try:
            watcher, backlog = self.store.watch(t.rt, t.namespace, matcher,
                                                q.get("resourceVersion"), initial)
        except ApiProblem as p:
            if p.code != 410:
                raise
            await response.prepare(request)
            await self._write(response, "ERROR", p.status)
            return response
        start_rv = self.store.rv
        if as_table:  # kubectl get -w: each event's object is a one-row Table
            watcher.present = lambda obj: tables.table(t.rt, [obj], obj["metadata"][
                "resourceVersion"])
            watcher.plain = False
        self.watches.add((t.rt, watcher))
        try:
            await response.prepare(request)
            for kind, obj in backlog:
                await self._write(response, kind, watcher.present(obj))
            if initial:
                await self._write(response, "BOOKMARK", self._bookmark(
                    t.rt, start_rv, {"k8s.io/initial-events-end": "true"}))
            await self._stream(response, t.rt, watcher, bookmarks, time.monotonic() + timeout)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watches.discard((t.rt, watcher))
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
            wait = min(left, self.bookmark_interval) if bookmarks else left
            try:
                items = [await asyncio.wait_for(watcher.queue.get(), wait)]
            except TimeoutError:
                if bookmarks and deadline - time.monotonic() > 0:
                    await self._write(response, "BOOKMARK", self._bookmark(rt, self.store.rv))
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
            if self.faults.scenario_on(REORDERED_EVENTS, rt.plural) and not held:
                held.append(line)
                continue
            out.append(line)
            if self.faults.scenario_on(DUPLICATE_EVENTS, rt.plural):
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


async def _body(request: web.Request) -> Any:
    if request.content_type == "application/vnd.kubernetes.protobuf":
        return protobuf.decode(await request.read())
    if "protobuf" in request.content_type or "cbor" in request.content_type:
        raise errors.unsupported_media_type(request.content_type)
    raw = await request.read()
    try:
        if request.content_type.endswith("yaml"):
            body = yaml.safe_load(raw)
        else:
            body = msgspec.json.decode(raw)
    except (msgspec.DecodeError, yaml.YAMLError) as e:
        raise errors.bad_request(f"the body of the request could not be decoded: {e}") \
            from None
    if request.method != "PATCH" and not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a JSON object")
    return body


async def _options(request: web.Request) -> Obj:
    options: Obj = {}
    if request.can_read_body:
        raw = await request.read()
        try:
            options = msgspec.json.decode(raw) if raw.strip() else {}
        except msgspec.DecodeError as e:
            raise errors.bad_request(f"the DeleteOptions could not be decoded: {e}") from None
        if not isinstance(options, dict):
            raise errors.bad_request("the DeleteOptions must be a JSON object")
    q = request.query
    if "gracePeriodSeconds" in q:
        try:
            options["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
        except ValueError:
            raise errors.bad_request(f"invalid gracePeriodSeconds "
                                     f"{q['gracePeriodSeconds']!r}") from None
    if q.get("dryRun") == "All":
        options["dryRun"] = ["All"]
    return options


def _check_kind(rt: ResourceType, body: Obj) -> None:
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if (kind and kind != rt.kind) or (api_version and api_version != rt.api_version):
        raise errors.bad_request(f"the API version in the data ({api_version}) does not match "
                                 f"the expected API version ({rt.api_version})"
                                 if api_version != rt.api_version else
                                 f"the kind in the data ({kind}) does not match the expected "
                                 f"kind ({rt.kind})")


def _check_namespace(t: Target, body: Obj) -> None:
    ns = (body.get("metadata") or {}).get("namespace")
    if t.rt.namespaced and ns and ns != t.namespace:
        raise errors.bad_request("the namespace of the provided object does not match the "
                                 "namespace sent on the request")

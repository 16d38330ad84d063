"""HTTP face of the test API server: kube-apiserver's paths, verbs, bodies and watch streams.
Owns: URL parsing (core and group paths, namespaced and cluster-scoped, subresources, the
legacy /watch/ prefix), discovery and /version, request bodies (JSON; YAML for apply; a few
protobuf kinds), Status replies, fault hooks per request, and a log of requests for tests.
kubectl gets Tables when it asks for them.
Does not: hold state (store.py), stream watches (watch.py) or run threads (server.py).
Tests: tests/integration/kubeapi/"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

import msgspec
import yaml
from aiohttp import web

from . import errors, protobuf, resources, tables
from .admission import Admission
from .errors import ApiProblem
from .faults import Faults
from .resources import BY_PATH, ResourceType
from .selectors import field_matcher, label_matcher
from .store import Obj, Store
from .watch import WatchStreams

log = logging.getLogger("kubeapi")
JSON = "application/json"
MAX_BODY = 16 * 1024 * 1024
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
    authorization: str = ""  # the Authorization header: tests tell clients apart by token


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


def page_not_found() -> web.Response:
    """What kube-apiserver answers for a path no API serves (an unknown group, /nope): plain
    text, not a Status."""
    return web.Response(text="404 page not found\n", status=404, charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


class ApiApp:
    """The aiohttp application and the per-server settings its handlers read."""

    def __init__(self, store: Store, faults: Faults, *, bookmark_interval: float,
                 watch_timeout: float) -> None:
        self.store = store
        self.faults = faults
        self.admission = Admission(store)
        self.watch = WatchStreams(store, faults, bookmark_interval=bookmark_interval,
                                  watch_timeout=watch_timeout)
        self.requests: deque[RequestRecord] = deque(maxlen=20000)

    def server(self) -> web.Server:
        """aiohttp's low-level server: every request goes to handle(), which parses the path
        itself (an Application's router would only match one catch-all route, per request)."""
        loop = asyncio.get_running_loop()

        def request(message: Any, payload: Any, protocol: Any, writer: Any,
                    task: Any) -> web.BaseRequest:
            return web.BaseRequest(message, payload, protocol, writer, task, loop,
                                   client_max_size=MAX_BODY)

        return web.Server(self.handle, request_factory=request, access_log=None)

    # ---- watch control (called on the loop by faults) ---------------------------------------

    def control(self, action: str, resource: str | None) -> None:
        if action == "compact":
            self.store.compact()
        else:
            self.watch.control(action, resource)

    # ---- dispatch -------------------------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        record = RequestRecord(request.method, request.path, dict(request.query),
                               authorization=request.headers.get("Authorization", ""))
        self.requests.append(record)
        if request.headers.get("Expect", "").lower() == "100-continue":  # as a router would
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
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

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
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
            if resources.api_group(parts[1]) is None:
                return page_not_found()  # no handler for the group: Go's http.NotFound
            if len(parts) == 2:
                return reply(resources.api_group(parts[1]))
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
        return page_not_found()

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

    async def _faults(self, request: web.BaseRequest, t: Target, watch: bool) -> None:
        delay = self.faults.latency(request.method, t.rt.plural)
        if delay:  # a slow server: the request has arrived whole and is handled late, even
            await request.read()  # if its client has given up by then (aiohttp keeps it)
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

    async def _verb(self, request: web.BaseRequest, t: Target, watch: bool) -> web.StreamResponse:
        method, store, q = request.method, self.store, request.query
        manager = q.get("fieldManager") or request.headers.get("User-Agent", "").split("/")[0]
        dry_run = q.get("dryRun") == "All"
        if not t.name:
            if method == "GET" and watch:
                return await self.watch.serve(request, t.rt, t.namespace, self._matcher(t, q))
            if method == "GET":
                return self._list(request, t)
            if method == "POST" and (t.namespace is not None or not t.rt.namespaced):
                body = await _body(request)
                _check_kind(t.rt, body)
                _check_namespace(t, body)
                view = store.admission_view(t.rt, t.namespace, body, manager)
                body, warnings = await self.admission.create(t.rt, t.namespace, view,
                                                             manager=manager, dry_run=dry_run)
                obj = store.create(t.rt, t.namespace, body, manager=manager, dry_run=dry_run,
                                   admitted=view)
                response = reply(obj, 201)
                for warning in warnings:
                    response.headers.add("Warning", f'299 - "{warning}"')
                return response
            if method == "DELETE":
                items = store.delete_collection(t.rt, t.namespace, self._matcher(t, q),
                                                await _options(request))
                return reply({"kind": f"{t.rt.kind}List", "apiVersion": t.rt.api_version,
                              "metadata": {"resourceVersion": str(store.rv)},
                              "items": [{k: v for k, v in o.items()
                                         if k not in ("kind", "apiVersion")} for o in items]})
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

    def _apply(self, request: web.BaseRequest, t: Target, body: Obj, manager: str,
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

    def _get(self, request: web.BaseRequest, t: Target) -> web.Response:
        obj = self.store.get(t.rt, t.namespace, t.name)
        if tables.wanted(request):
            return reply(tables.table(t.rt, [obj], obj["metadata"]["resourceVersion"]))
        return reply(obj)

    def _list(self, request: web.BaseRequest, t: Target) -> web.Response:
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

async def _body(request: web.BaseRequest) -> Any:
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


async def _options(request: web.BaseRequest) -> Obj:
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

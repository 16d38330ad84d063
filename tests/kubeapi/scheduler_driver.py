"""Plays kube-scheduler against an HTTP extender, for end-to-end tests and benchmarks.
Owns: list+watch of pods and nodes, a FIFO queue of pending pods of one scheduler name
(priority, then creation), one scheduling cycle at a time: own filters -> extender `filter`
-> `prioritize` (skipped with one feasible node) -> `bind` (or a Binding it posts itself),
with the bodies kube-scheduler v1.36 sends (capitalised Go field names; Pod without kind,
apiVersion or managedFields; NodeNames, or a full NodeList when nodeCacheCapable is false).
Binding runs in the background while the next pod is scheduled, as in kube-scheduler.
On failure: a Warning FailedScheduling event ("0/N nodes are available: ..."), the pod's
PodScheduled=False condition, and a retry with back-off (1 s doubling to 10 s); extender
errors read like Go's (`Post "URL": context deadline exceeded ...`); ignorable extenders are
skipped when they fail. Configure it from the extender entry of a KubeSchedulerConfiguration.
Tests: tests/integration/kubeapi/test_scheduler_driver_speaks_the_extender_wire.py"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from . import scheduler_filters as filters

log = logging.getLogger("kubeapi.scheduler_driver")
Obj = dict[str, Any]
GO_HEADERS = {"User-Agent": "Go-http-client/1.1", "Content-Type": "application/json",
              "Accept-Encoding": "gzip"}
UNRESOLVABLE_OWN = (filters.UNSCHEDULABLE, filters.SELECTOR, "node(s) had untolerated taint")


@dataclass(frozen=True)
class DriverConfig:
    """The extender entry of a KubeSchedulerConfiguration, plus the scheduler's own knobs."""

    url_prefix: str
    filter_verb: str = "filter"
    prioritize_verb: str = "prioritize"
    bind_verb: str = ""
    weight: int = 1
    node_cache_capable: bool = False
    ignorable: bool = False
    http_timeout: float = 30.0
    managed_resources: Mapping[str, bool] = field(default_factory=dict)  # name -> ignored
    scheduler_name: str = "gpuslice-scheduler"
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    percentage_of_nodes_to_score: int = 0
    async_binding: bool = True
    unschedulable_timeout: float = 300.0  # podMaxInUnschedulablePodsDuration
    seed: int | None = None

    @classmethod
    def from_extender(cls, extender: Mapping[str, Any], **overrides: Any) -> DriverConfig:
        """Read one `extenders[]` entry (KubeSchedulerConfiguration YAML keys)."""
        timeout = str(extender.get("httpTimeout", "30s"))
        return cls(
            url_prefix=extender["urlPrefix"], filter_verb=extender.get("filterVerb", ""),
            prioritize_verb=extender.get("prioritizeVerb", ""),
            bind_verb=extender.get("bindVerb", ""), weight=int(extender.get("weight", 1)),
            node_cache_capable=bool(extender.get("nodeCacheCapable", False)),
            ignorable=bool(extender.get("ignorable", False)),
            http_timeout=_seconds(timeout),
            managed_resources={r["name"]: bool(r.get("ignoredByScheduler", False))
                               for r in extender.get("managedResources") or []},
            **overrides)


def _seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return float(text[: -len(unit)]) * units[unit]
    raise ValueError(f"httpTimeout {text!r}: expected a Go duration such as 30s or 500ms")


class ExtenderError(Exception):
    """The extender could not be reached or answered with an error; the text is Go's."""


@dataclass
class DriverStats:
    attempts: int = 0
    bound: int = 0
    failed: int = 0
    verb_seconds: dict[str, list[float]] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (pod key, message)


@dataclass
class _Pending:
    """A pod this scheduler has not bound yet. state: "queued" (in the heap, maybe backing
    off until ready_at), "unschedulable" (waits for a cluster event or flush_at), "binding"."""

    pod_key: str
    state: str = "queued"
    attempts: int = 0
    ready_at: float = 0.0
    flush_at: float = 0.0


class SchedulerDriver:
    """`async with SchedulerDriver(kubeconfig, config) as driver: ...`"""

    def __init__(self, kubeconfig: Path, config: DriverConfig) -> None:
        self.kubeconfig = kubeconfig
        self.config = config
        self.stats = DriverStats()
        self.pods: dict[str, Obj] = {}
        self.nodes: dict[str, Obj] = {}
        self._assumed: dict[str, str] = {}  # pod key -> node, until the watch shows it bound
        self._bound: set[str] = set()  # keys of this scheduler's pods that are bound
        self._placed: dict[str, tuple[str, dict[str, float]]] = {}  # key -> (node, requests)
        self._used: dict[str, dict[str, float]] = {}  # node -> requests of pods placed there
        self._allocatable: dict[str, dict[str, float]] = {}  # node -> allocatable, parsed
        self._pending: dict[str, _Pending] = {}
        self._unschedulable: set[str] = set()  # keys of pending pods in that state
        self._heap: list[tuple[int, str, int, str]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._binds: set[asyncio.Task[None]] = set()
        self._random = random.Random(config.seed)
        self._next_start = 0
        self._api: aiohttp.ClientSession | None = None
        self._extender: aiohttp.ClientSession | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> SchedulerDriver:
        from lightkube import KubeConfig
        from lightkube.config.client_adapter import verify_cluster

        config = KubeConfig.from_file(self.kubeconfig).get()
        tls = verify_cluster(config.cluster, config.user, config.abs_file)
        headers = {"Authorization": f"Bearer {config.user.token}"} if config.user.token else {}
        self._api = aiohttp.ClientSession(
            base_url=config.cluster.server, headers=headers,
            connector=aiohttp.TCPConnector(ssl=tls, limit=32),
            timeout=aiohttp.ClientTimeout(total=30))
        self._extender = aiohttp.ClientSession(
            headers=GO_HEADERS, timeout=aiohttp.ClientTimeout(total=self.config.http_timeout))
        synced = [asyncio.get_running_loop().create_future() for _ in range(2)]
        self._tasks = [asyncio.create_task(self._informer("/api/v1/nodes", self._on_node,
                                                          synced[0])),
                       asyncio.create_task(self._informer("/api/v1/pods", self._on_pod,
                                                          synced[1]))]
        await asyncio.wait_for(asyncio.gather(*synced), 30)
        self._tasks.append(asyncio.create_task(self._loop()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._binds:  # let bindings under way finish, as a scheduler shutting down would
            await asyncio.wait(self._binds, timeout=5)
        for task in [*self._tasks, *self._binds]:
            task.cancel()
        for task in [*self._tasks, *self._binds]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for session in (self._api, self._extender):
            if session:
                await session.close()

    async def wait_until_bound(self, count: int, timeout: float) -> int:
        """Wait until `count` pods of this scheduler are bound; return how many are."""
        deadline = time.monotonic() + timeout
        while self.stats.bound < count and time.monotonic() < deadline:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
        return self.stats.bound

    # ---- informers ------------------------------------------------------------------------

    async def _informer(self, path: str, handle: Any, synced: asyncio.Future[None]) -> None:
        """List, then watch from the list's resourceVersion; relist on 410 or a broken stream."""
        assert self._api is not None
        backoff = 0.1
        while True:
            try:
                async with self._api.get(path) as reply:
                    reply.raise_for_status()
                    body = await reply.json()
                handle("SYNC", body["items"])
                if not synced.done():
                    synced.set_result(None)
                rv = body["metadata"]["resourceVersion"]
                while rv:
                    rv = await self._watch(path, rv, handle)
                backoff = 0.1
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as e:
                log.warning("informer %s: %s; retrying in %.1f s", path, e, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _watch(self, path: str, rv: str, handle: Any) -> str:
        """One watch; returns the resourceVersion to resume from, "" to relist."""
        assert self._api is not None
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "300"}
        async with self._api.get(path, params=params, timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=30)) as reply:
            reply.raise_for_status()
            async for line in _lines(reply):
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return ""
                rv = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    handle(event["type"], [event["object"]])
        return rv

    def _on_node(self, kind: str, nodes: list[Obj]) -> None:
        if kind == "SYNC":
            self.nodes, self._allocatable = {}, {}
        for node in nodes:
            name = node["metadata"]["name"]
            if kind == "DELETED":
                self.nodes.pop(name, None)
                self._allocatable.pop(name, None)
            else:
                self.nodes[name] = node
                self._allocatable[name] = filters.node_allocatable(node)
        self._cluster_changed()

    def _on_pod(self, kind: str, pods: list[Obj]) -> None:
        if kind == "SYNC":
            self.pods, self._bound, self._placed, self._used = {}, set(), {}, {}
        freed = False
        for pod in pods:
            key = _key(pod)
            old = self.pods.get(key)
            bound = bool(pod["spec"].get("nodeName"))
            if kind == "DELETED":
                self.pods.pop(key, None)
                self._pending.pop(key, None)
                self._bound.discard(key)
                self._place(key, None)
                freed = freed or bound
                continue
            self.pods[key] = pod
            if bound:
                self._assumed.pop(key, None)
                self._pending.pop(key, None)
                if self._ours(pod):
                    self._bound.add(key)
                ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                self._place(key, None if ended else pod["spec"]["nodeName"])
                freed = freed or (ended and old is not None and old.get("status") != pod.get(
                    "status"))
            elif self._ours(pod) and not pod["metadata"].get("deletionTimestamp") and \
                    not pod["spec"].get("schedulingGates") and key not in self._pending:
                self._pending[key] = _Pending(key)  # gated pods wait, as in PreEnqueue
                self._push(pod)
        self.stats.bound = len(self._bound)
        self._changed.set()
        if freed:
            self._cluster_changed()

    def _cluster_changed(self) -> None:
        """Something that may make room happened: unschedulable pods go back to the queue
        (they still wait out their back-off)."""
        self._requeue(self._unschedulable)
        self._wake.set()

    def _requeue(self, keys: set[str]) -> None:
        for key in list(keys):
            self._unschedulable.discard(key)
            pending = self._pending.get(key)
            if pending is not None and pending.state == "unschedulable" and key in self.pods:
                pending.state = "queued"
                self._push(self.pods[key])

    def _ours(self, pod: Obj) -> bool:
        return pod["spec"].get("schedulerName") == self.config.scheduler_name

    def _push(self, pod: Obj) -> None:
        priority = int(pod["spec"].get("priority") or 0)
        created = pod["metadata"].get("creationTimestamp") or ""
        heapq.heappush(self._heap, (-priority, created, next(self._seq), _key(pod)))
        self._wake.set()

    # ---- the scheduling loop --------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            key = self._pop_ready()
            if key is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._next_ready())
                continue
            pod = self.pods.get(key)
            if pod is None or pod["spec"].get("nodeName") or pod["metadata"].get(
                    "deletionTimestamp"):
                self._pending.pop(key, None)
                continue
            await self._schedule_one(pod, self._pending[key])

    def _pop_ready(self) -> str | None:
        now = time.monotonic()
        self._requeue({k for k in self._unschedulable
                       if k not in self._pending or self._pending[k].flush_at <= now})
        deferred, found = [], None
        while self._heap:
            entry = heapq.heappop(self._heap)
            pending = self._pending.get(entry[3])
            if pending is None or pending.state != "queued":
                continue  # a stale entry
            if pending.ready_at > now:
                deferred.append(entry)
                continue
            found = entry[3]
            pending.state = "binding"
            break
        for entry in deferred:
            heapq.heappush(self._heap, entry)
        return found

    def _next_ready(self) -> float:
        times = [p.ready_at if p.state == "queued" else p.flush_at
                 for p in self._pending.values() if p.state != "binding"]
        return max(0.01, min(times) - time.monotonic()) if times else 1.0

    async def _schedule_one(self, pod: Obj, pending: _Pending) -> None:
        self.stats.attempts += 1
        pending.attempts += 1
        key = _key(pod)
        try:
            node = await self._choose(pod)
        except ExtenderError as e:
            await self._failed(pod, pending, str(e), wait_for_event=False)
            return
        except _Unschedulable as e:
            await self._failed(pod, pending, e.message, wait_for_event=True)
            return
        self._assumed[key] = node
        self._place(key, node)
        bind = self._bind(pod, node, pending)
        if self.config.async_binding:
            task = asyncio.create_task(bind)
            self._binds.add(task)
            task.add_done_callback(self._binds.discard)
        else:
            await bind

    async def _choose(self, pod: Obj) -> str:
        names = sorted(self.nodes)
        feasible, reasons, unresolvable = self._own_filters(pod, names)
        interested = self._interested(pod)
        if feasible and interested and self.config.filter_verb:
            try:
                passed, failed, stuck = await self._extender_filter(pod, feasible)
                reasons.update(failed)
                reasons.update(stuck)
                unresolvable |= set(stuck)
                feasible = [n for n in feasible if n in set(passed)]
            except ExtenderError:
                if not self.config.ignorable:
                    raise
        if not feasible:
            raise _Unschedulable(filters.failure_message(len(names), reasons, unresolvable))
        if len(feasible) == 1 or not (interested and self.config.prioritize_verb):
            return self._random.choice(feasible) if len(feasible) > 1 else feasible[0]
        scores = await self._extender_prioritize(pod, feasible)
        best = max(scores.get(n, 0) for n in feasible)
        return self._random.choice([n for n in feasible if scores.get(n, 0) == best])

    def _own_filters(self, pod: Obj, names: list[str]) -> tuple[list[str], dict[str, str],
                                                                 set[str]]:
        ignored = {n for n, skip in self.config.managed_resources.items() if skip}
        requests = filters.pod_requests(pod)
        want = filters.nodes_to_find(len(names), self.config.percentage_of_nodes_to_score)
        feasible: list[str] = []
        reasons: dict[str, str] = {}
        start = self._next_start % len(names) if names else 0
        checked = 0
        for i in range(len(names)):
            if len(feasible) >= want:
                break
            name = names[(start + i) % len(names)]
            checked += 1
            why = filters.node_reasons(pod, self.nodes[name], requests,
                                       self._allocatable[name], self._used.get(name, {}),
                                       ignored)
            if why:
                reasons[name] = why[0]
            else:
                feasible.append(name)
        self._next_start = start + checked
        unresolvable = {n for n, r in reasons.items() if r.startswith(UNRESOLVABLE_OWN)}
        return feasible, reasons, unresolvable

    def _place(self, key: str, node: str | None) -> None:
        """Account `key`'s requests to `node` (None: to no node), as the scheduler cache does
        for bound and assumed pods."""
        placed = self._placed.get(key)
        if placed and placed[0] == node:
            return
        if placed:
            totals = self._used[placed[0]]
            for name, value in placed[1].items():
                totals[name] -= value
            del self._placed[key]
        if node is not None and key in self.pods:
            requests = filters.pod_requests(self.pods[key])
            self._placed[key] = (node, requests)
            totals = self._used.setdefault(node, {})
            for name, value in requests.items():
                totals[name] = totals.get(name, 0) + value

    def _interested(self, pod: Obj) -> bool:
        managed = self.config.managed_resources
        return not managed or bool(filters.requested_names(pod) & set(managed))

    # ---- extender calls -------------------------------------------------------------------

    def _args(self, pod: Obj, names: list[str]) -> Obj:
        """ExtenderArgs exactly as kube-scheduler marshals it."""
        if self.config.node_cache_capable:
            return {"Pod": _as_sent(pod), "Nodes": None, "NodeNames": names}
        items = [{k: v for k, v in self.nodes[n].items() if k not in ("kind", "apiVersion")}
                 for n in names]
        return {"Pod": _as_sent(pod), "Nodes": {"metadata": {}, "items": items},
                "NodeNames": None}

    async def _post(self, verb: str, body: Any) -> Any:
        assert self._extender is not None
        url = f"{self.config.url_prefix.rstrip('/')}/{verb}"
        start = time.perf_counter()
        try:
            async with self._extender.post(url, data=json.dumps(body).encode()) as reply:
                if reply.status != 200:
                    raise ExtenderError(f"failed {verb} with extender at URL {url}, code "
                                        f"{reply.status}")
                raw = await reply.read()
        except TimeoutError:
            raise ExtenderError(f'Post "{url}": context deadline exceeded (Client.Timeout '
                                "exceeded while awaiting headers)") from None
        except aiohttp.ClientConnectorError as e:
            raise ExtenderError(f'Post "{url}": dial tcp {e.host}:{e.port}: connect: '
                                f"{e.strerror or e}") from None
        except aiohttp.ClientError as e:
            raise ExtenderError(f'Post "{url}": {e}') from None
        finally:
            self.stats.verb_seconds.setdefault(verb, []).append(time.perf_counter() - start)
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ExtenderError(f"{verb}: extender reply is not JSON: {e}") from None

    async def _extender_filter(self, pod: Obj, names: list[str]) -> tuple[
            list[str], dict[str, str], dict[str, str]]:
        result = _fold_keys(await self._post(self.config.filter_verb, self._args(pod, names)))
        if result.get("error"):
            raise ExtenderError(result["error"])
        if self.config.node_cache_capable:
            passed = list(result.get("nodenames") or [])
        else:
            passed = [n["metadata"]["name"] for n in (result.get("nodes") or {}).get("items")
                      or []]
        return (passed, dict(result.get("failednodes") or {}),
                dict(result.get("failedandunresolvablenodes") or {}))

    async def _extender_prioritize(self, pod: Obj, names: list[str]) -> dict[str, int]:
        try:
            reply = await self._post(self.config.prioritize_verb, self._args(pod, names))
        except ExtenderError as e:  # kube-scheduler ignores prioritize errors
            log.warning("prioritize failed, scores ignored: %s", e)
            return {}
        scores: dict[str, int] = {}
        for item in reply if isinstance(reply, list) else []:
            host = item.get("Host", item.get("host"))  # Go decodes keys ignoring case
            scores[host] = int(item.get("Score", item.get("score", 0))) * self.config.weight
        return scores

    # ---- binding and failures -------------------------------------------------------------

    async def _bind(self, pod: Obj, node: str, pending: _Pending) -> None:
        meta = pod["metadata"]
        try:
            if self.config.bind_verb and self._interested(pod):
                result = _fold_keys(await self._post(self.config.bind_verb, {
                    "PodName": meta["name"], "PodNamespace": meta["namespace"],
                    "PodUID": meta["uid"], "Node": node}))
                if result.get("error"):
                    raise ExtenderError(result["error"])
            else:
                await self._default_bind(pod, node)
        except ExtenderError as e:
            self._assumed.pop(_key(pod), None)
            self._place(_key(pod), None)
            await self._failed(pod, pending, f"binding rejected: {e}", wait_for_event=False)
            return
        await self._event(pod, "Normal", "Scheduled",
                          f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}")

    async def _default_bind(self, pod: Obj, node: str) -> None:
        assert self._api is not None
        meta = pod["metadata"]
        try:
            async with self._api.post(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
                    json={"apiVersion": "v1", "kind": "Binding", "metadata": {
                        "name": meta["name"], "namespace": meta["namespace"],
                        "uid": meta["uid"]}, "target": {"kind": "Node", "name": node}}) as reply:
                if reply.status >= 300:
                    body = await reply.json(content_type=None)
                    raise ExtenderError(body.get("message", str(body)))
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise ExtenderError(f"binding {meta['name']}: {e}") from None

    async def _failed(self, pod: Obj, pending: _Pending, message: str,
                      wait_for_event: bool) -> None:
        key = _key(pod)
        self.stats.failed += 1
        self.stats.failures.append((key, message))
        if self._pending.get(key) is pending:
            now = time.monotonic()
            pending.ready_at = now + min(
                self.config.initial_backoff * 2 ** (pending.attempts - 1), self.config.max_backoff)
            pending.flush_at = now + self.config.unschedulable_timeout
            pending.state = "unschedulable" if wait_for_event else "queued"
            if wait_for_event:
                self._unschedulable.add(key)
            else:
                self._push(pod)
        await self._event(pod, "Warning", "FailedScheduling", message)
        await self._mark_unschedulable(pod, message)

    async def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        assert self._api is not None
        meta = pod["metadata"]
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": message, "lastProbeTime": None,
                     "lastTransitionTime": _now()}
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._api.patch(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                    data=json.dumps({"status": {"conditions": [condition]}}).encode(),
                    headers={"Content-Type": "application/strategic-merge-patch+json"}):
                pass

    async def _event(self, pod: Obj, kind: str, reason: str, message: str) -> None:
        """A core/v1 Event, best effort (as kube-scheduler's recorder)."""
        assert self._api is not None
        meta = pod["metadata"]
        now = _now()
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta["uid"],
                                   "resourceVersion": meta.get("resourceVersion", "")},
                "type": kind, "reason": reason, "message": message[:1024],
                "source": {"component": self.config.scheduler_name},
                "reportingComponent": self.config.scheduler_name,
                "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        try:
            async with self._api.post(f"/api/v1/namespaces/{meta['namespace']}/events",
                                      json=body) as reply:
                reply.raise_for_status()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("event %s for %s/%s not posted: %s", reason, meta["namespace"],
                        meta["name"], e)


class _Unschedulable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def _lines(reply: aiohttp.ClientResponse) -> Any:
    """The stream's lines, however long (aiohttp's readline stops at 64 KiB)."""
    buffer = b""
    async for chunk in reply.content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _key(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _as_sent(pod: Obj) -> Obj:
    """The pod as kube-scheduler's informer holds it: no kind/apiVersion, no managedFields."""
    meta = {k: v for k, v in pod["metadata"].items() if k != "managedFields"}
    return {**{k: v for k, v in pod.items() if k not in ("kind", "apiVersion")},
            "metadata": meta}


def _fold_keys(value: Any) -> Any:
    """Go's encoding/json matches keys case-insensitively; fold the top level."""
    return {k.lower(): v for k, v in value.items()} if isinstance(value, dict) else {}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

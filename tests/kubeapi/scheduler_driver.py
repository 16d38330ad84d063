"""Plays kube-scheduler against an HTTP extender, for end-to-end tests and benchmarks.
Owns: list+watch of pods and nodes, the scheduler's cache (bound and assumed pods per node),
and one scheduling cycle at a time for pods of one scheduler name: own filters
(scheduler_filters.py) -> extender `filter` -> `prioritize` (skipped with one feasible node)
-> `bind` (or a Binding it posts itself), with kube-scheduler's bodies
(scheduler_extender.py), taking pods from scheduler_queue.py. Binding runs in the background
while the next pod is scheduled, as in kube-scheduler; pods with scheduling gates wait.
On failure: a Warning FailedScheduling event ("0/N nodes are available: ..."), the pod's
PodScheduled=False condition, and a retry after back-off (1 s doubling to 10 s); an ignorable
extender that fails is skipped. Configure it from the extender entry of a
KubeSchedulerConfiguration (DriverConfig.from_extender).
Tests: tests/integration/kubeapi/test_scheduler_driver_speaks_the_extender_wire.py"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from gpuslice.aio import wait_set

from . import scheduler_filters as filters
from .scheduler_extender import ExtenderClient, ExtenderError
from .scheduler_queue import Pending, SchedulingQueue

log = logging.getLogger("kubeapi.scheduler_driver")
Obj = dict[str, Any]
_NOTHING: dict[str, float] = {}
JSON_BODY = {"Content-Type": "application/json"}  # bodies are encoded with msgspec, not json=
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


@dataclass
class DriverStats:
    attempts: int = 0
    bound: int = 0
    failed: int = 0
    verb_seconds: dict[str, list[float]] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (pod key, message)


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
        self._plain: set[str] = set()  # nodes neither unschedulable nor tainted
        self._names: list[str] | None = None  # sorted(self.nodes), until a node changes
        self._queue = SchedulingQueue(config.initial_backoff, config.max_backoff,
                                      config.unschedulable_timeout)
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._binds: set[asyncio.Task[None]] = set()
        self._random = random.Random(config.seed)
        self._next_start = 0
        self._api: aiohttp.ClientSession | None = None
        self._extender: ExtenderClient | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> SchedulerDriver:
        self._api = api_session(self.kubeconfig, limit=32, timeout=30)
        self._extender = ExtenderClient(self.config.url_prefix, self.config.http_timeout,
                                        self.config.node_cache_capable,
                                        self.stats.verb_seconds)
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
        if self._api:
            await self._api.close()
        if self._extender:
            await self._extender.close()

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
                    body = msgspec.json.decode(await reply.read())
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
                event = msgspec.json.decode(line)
                if event["type"] == "ERROR":
                    return ""
                rv = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    handle(event["type"], [event["object"]])
        return rv

    def _on_node(self, kind: str, nodes: list[Obj]) -> None:
        self._names = None
        if kind == "SYNC":
            self.nodes, self._allocatable, self._plain = {}, {}, set()
        for node in nodes:
            name = node["metadata"]["name"]
            self._plain.discard(name)
            if kind == "DELETED":
                self.nodes.pop(name, None)
                self._allocatable.pop(name, None)
            else:
                self.nodes[name] = node
                self._allocatable[name] = filters.node_allocatable(node)
                if filters.is_plain(node):
                    self._plain.add(name)
        self._cluster_changed()

    def _on_pod(self, kind: str, pods: list[Obj]) -> None:
        if kind == "SYNC":
            self.pods, self._bound, self._placed, self._used = {}, set(), {}, {}
        freed = changed = False
        for pod in pods:
            key = _key(pod)
            old = self.pods.get(key)
            bound = bool(pod["spec"].get("nodeName"))
            if kind == "DELETED":
                self.pods.pop(key, None)
                self._queue.remove(key)
                self._bound.discard(key)
                self._place(key, None)
                freed = freed or bound
                continue
            self.pods[key] = pod
            if bound:
                changed = changed or old != pod  # an assigned pod added or updated
                self._assumed.pop(key, None)
                self._queue.remove(key)
                if self._ours(pod):
                    self._bound.add(key)
                ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                self._place(key, None if ended else pod["spec"]["nodeName"])
                freed = freed or (ended and old is not None and old.get("status") != pod.get(
                    "status"))
            elif self._ours(pod) and not pod["metadata"].get("deletionTimestamp") and \
                    not pod["spec"].get("schedulingGates") and key not in self._queue:
                self._queue.add(key, pod)  # gated pods wait, as in PreEnqueue
                self._wake.set()
        self.stats.bound = len(self._bound)
        self._changed.set()
        if freed or changed:
            self._cluster_changed(may_make_room=freed)

    def _cluster_changed(self, may_make_room: bool = True) -> None:
        self._queue.cluster_changed(may_make_room)
        self._wake.set()

    def _ours(self, pod: Obj) -> bool:
        return pod["spec"].get("schedulerName") == self.config.scheduler_name

    # ---- the scheduling loop --------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            pending = self._queue.pop_ready()
            if pending is None:
                self._wake.clear()
                await wait_set(self._wake, self._queue.next_wait())
                continue
            pod = self.pods.get(pending.key)
            if pod is None or pod["spec"].get("nodeName") or pod["metadata"].get(
                    "deletionTimestamp"):
                self._queue.remove(pending.key)
                continue
            await self._schedule_one(pod, pending)

    async def _schedule_one(self, pod: Obj, pending: Pending) -> None:
        self.stats.attempts += 1
        pending.attempts += 1
        try:
            node = await self._choose(pod)
        except ExtenderError as e:
            await self._failed(pod, pending, str(e), unschedulable=False)
            return
        except _Unschedulable as e:
            await self._failed(pod, pending, e.message, unschedulable=True,
                               by_extender=e.by_extender)
            return
        self._assumed[pending.key] = node
        self._place(pending.key, node)
        bind = self._bind(pod, node, pending)
        if self.config.async_binding:
            task = asyncio.create_task(bind)
            self._binds.add(task)
            task.add_done_callback(self._binds.discard)
        else:
            await bind

    async def _choose(self, pod: Obj) -> str:
        if self._names is None:
            self._names = sorted(self.nodes)
        names = self._names
        feasible, reasons, unresolvable = self._own_filters(pod, names)
        interested = self._interested(pod)
        by_extender = False
        if feasible and interested and self.config.filter_verb:
            assert self._extender is not None
            try:
                passed, failed, stuck = await self._extender.filter(
                    self.config.filter_verb, pod, feasible, self.nodes)
                reasons.update(failed)
                reasons.update(stuck)
                unresolvable |= set(stuck)
                passing = set(passed)
                by_extender = len(passing) < len(feasible)
                feasible = [n for n in feasible if n in passing]
            except ExtenderError:
                if not self.config.ignorable:
                    raise
        if not feasible:
            raise _Unschedulable(filters.failure_message(len(names), reasons, unresolvable),
                                 by_extender)
        if len(feasible) == 1 or not (interested and self.config.prioritize_verb):
            return self._random.choice(feasible) if len(feasible) > 1 else feasible[0]
        assert self._extender is not None
        try:
            scores = await self._extender.prioritize(self.config.prioritize_verb, pod,
                                                     feasible, self.nodes)
        except ExtenderError as e:  # kube-scheduler ignores prioritize errors
            log.warning("prioritize failed, scores ignored: %s", e)
            scores = {}
        scores = {n: score * self.config.weight for n, score in scores.items()}
        best = max(scores.get(n, 0) for n in feasible)
        return self._random.choice([n for n in feasible if scores.get(n, 0) == best])

    def _own_filters(self, pod: Obj, names: list[str]) -> tuple[list[str], dict[str, str],
                                                                 set[str]]:
        ignored = {n for n, skip in self.config.managed_resources.items() if skip}
        requests = filters.fit_requests(filters.pod_requests(pod), ignored)
        selector = bool((pod.get("spec") or {}).get("nodeSelector"))
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
            if selector or name not in self._plain:
                why = filters.placement_reasons(pod, self.nodes[name]) + filters.resource_reasons(
                    requests, self._allocatable[name], self._used.get(name, {}))
                reason = why[0] if why else None
            else:  # the common case: only the first resource that does not fit matters
                reason = filters.first_resource_reason(requests, self._allocatable[name],
                                                       self._used.get(name, _NOTHING))
            if reason:
                reasons[name] = reason
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

    # ---- binding and failures -------------------------------------------------------------

    async def _bind(self, pod: Obj, node: str, pending: Pending) -> None:
        meta = pod["metadata"]
        try:
            if self.config.bind_verb and self._interested(pod):
                assert self._extender is not None
                await self._extender.bind(self.config.bind_verb, pod, node)
            else:
                await self._default_bind(pod, node)
        except ExtenderError as e:
            self._assumed.pop(pending.key, None)
            self._place(pending.key, None)
            await self._failed(pod, pending, f"binding rejected: {e}", unschedulable=False)
            return
        await self._event(pod, "Normal", "Scheduled",
                          f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}")

    async def _default_bind(self, pod: Obj, node: str) -> None:
        assert self._api is not None
        meta = pod["metadata"]
        try:
            async with self._api.post(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
                    data=msgspec.json.encode({"apiVersion": "v1", "kind": "Binding", "metadata": {
                        "name": meta["name"], "namespace": meta["namespace"],
                        "uid": meta["uid"]}, "target": {"kind": "Node", "name": node}}),
                    headers=JSON_BODY) as reply:
                if reply.status >= 300:
                    body = await reply.json(content_type=None)
                    raise ExtenderError(body.get("message", str(body)))
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise ExtenderError(f"binding {meta['name']}: {e}") from None

    async def _failed(self, pod: Obj, pending: Pending, message: str,
                      unschedulable: bool, by_extender: bool = False) -> None:
        self.stats.failed += 1
        self.stats.failures.append((pending.key, message))
        self._queue.failed(pending, unschedulable, by_extender)
        self._wake.set()
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
                    data=msgspec.json.encode({"status": {"conditions": [condition]}}),
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
                                      data=msgspec.json.encode(body), headers=JSON_BODY) as reply:
                reply.raise_for_status()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("event %s for %s/%s not posted: %s", reason, meta["namespace"],
                        meta["name"], e)


def api_session(kubeconfig: Path, *, limit: int, timeout: float) -> aiohttp.ClientSession:
    """A plain aiohttp session on the kubeconfig's server, CA, client certificate and token."""
    from lightkube import KubeConfig
    from lightkube.config.client_adapter import verify_cluster

    config = KubeConfig.from_file(kubeconfig).get()
    tls = verify_cluster(config.cluster, config.user, config.abs_file)
    headers = {"Authorization": f"Bearer {config.user.token}"} if config.user.token else {}
    return aiohttp.ClientSession(base_url=config.cluster.server, headers=headers,
                                 connector=aiohttp.TCPConnector(ssl=tls, limit=limit),
                                 timeout=aiohttp.ClientTimeout(total=timeout))


class _Unschedulable(Exception):
    def __init__(self, message: str, by_extender: bool) -> None:
        super().__init__(message)
        self.message, self.by_extender = message, by_extender


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


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

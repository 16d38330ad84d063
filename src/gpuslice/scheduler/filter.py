"""The `filter` verb: which of the offered nodes can take the pod, and why each other cannot.

Owns: `Evaluator` (a pod against nodes, from the cache for names or from the given Node objects,
the in-flight rule applied, its answers kept per node while that node's flights stay the same;
the last result is kept for the `prioritize` that follows, with the allocator's kept scores),
the extender's own reasons (`WAITING`, `UNACCOUNTED`) and the reply to filter.
Does not: score (prioritize.py), reserve (bind.py; nothing here changes the state).
Invariants: one short reason per cause, identical across nodes (kube-scheduler counts them);
per-node numbers go to the log and the pod event. FailedAndUnresolvable: what preemption cannot
cure (allocator's UNRESOLVABLE, a pod waited for, a node whose assignments cannot be counted).
With full Nodes the answer comes from those objects' inventories and nothing is reserved.
Failure: a pod the dialects reject raises RequestError; the route answers it in `Error`.
Tests: tests/unit/scheduler/test_filter.py, test_filter_flights.py,
test_kept_answers_properties.py
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from itertools import compress, filterfalse
from operator import attrgetter, not_
from typing import Any

import msgspec

from gpuslice import codec, dialects, handoff
from gpuslice.allocator import AllocationError, ClusterState, Placement, Policy, Rejection
from gpuslice.allocator.reasons import no_inventory
from gpuslice.errors import CodecError
from gpuslice.model import PodRequest
from gpuslice.scheduler import wire
from gpuslice.scheduler.state import ExtenderState

__all__ = ["UNACCOUNTED", "WAITING", "Evaluator", "Verdict", "filter_reply", "unfit_message"]

WAITING = "waiting for pod {} to be allocated on this node"
UNACCOUNTED = "node has GPU assignments gpuslice cannot account for"
_CACHE_S = 2.0  # a filter's result serves the prioritize that follows, if nothing changed
_REQUESTS = 1024  # parsed pods kept (filter, prioritize and bind parse the same pod)
_REASON, _RESOLVABLE = attrgetter("reason"), attrgetter("resolvable")


class Refusal(msgspec.Struct, frozen=True):
    """The extender's own refusals, shaped like the allocator's Rejection."""

    reason: str  # short, identical across nodes for one cause
    resolvable: bool
    detail: str  # this node's numbers (logs, events)


Refused = Rejection | Refusal  # a Rejection words its detail only when it is read


class Verdict:
    """A pod against some nodes: `fits` (node -> placement) and `failed` (node -> refusal);
    `scores` as the allocator's FilterResult.scores (None: ask ClusterState.prioritize)."""

    __slots__ = ("failed", "fits", "pod", "scores")

    def __init__(self, pod: PodRequest, fits: dict[str, Placement],
                 failed: dict[str, Refused],
                 scores: Callable[[], Mapping[str, int] | None] | None = None) -> None:
        self.pod, self.fits, self.failed, self.scores = pod, fits, failed, scores


class Evaluator:
    """Evaluates pods against the cached cluster (or against given Node objects)."""

    def __init__(self, state: ExtenderState, policy: Policy,
                 defaults: dialects.Defaults | None = None, *,
                 scheduler_name: str = "gpuslice-scheduler") -> None:
        self.state, self.policy = state, policy
        self.defaults = defaults or dialects.Defaults()
        self.scheduler_name = scheduler_name
        self._last: tuple[tuple[Any, ...], float, Verdict] | None = None
        self._requests: dict[tuple[Any, Any], PodRequest] = {}
        self._seen: OrderedDict[str, Mapping[str, Any]] = OrderedDict()  # uid -> pod, bounded
        self._devices: dict[str, tuple[handoff.DeviceRequest, ...]] = {}
        self._blocked: dict[tuple[Any, ...], tuple[Mapping[Any, Any], Refusal | None]] = {}
        self._all_fit: tuple[Verdict, list[str]] | None = None  # see all_fit

    def ours(self, pod: Mapping[str, Any]) -> bool:
        """Whether the pod is scheduled by our profile (else the extender has no opinion)."""
        return (pod.get("spec") or {}).get("schedulerName") == self.scheduler_name

    def request(self, pod: Mapping[str, Any]) -> PodRequest:
        """The pod's request (RequestError: every problem), parsed once per pod version.
        Remembers the pod too: bind starts from it when the watch has not shown it yet."""
        meta = pod.get("metadata") or {}
        key = (meta.get("uid"), meta.get("resourceVersion"))
        req = self._requests.get(key) if key[0] and key[1] else None
        if req is None:
            req = dialects.parse_pod(pod, self.defaults)
            if len(self._requests) >= _REQUESTS:
                self._requests.clear()
            self._requests[key] = req
            self._seen.pop(str(key[0]), None)
            self._seen[str(key[0])] = pod
            if len(self._seen) > _REQUESTS:
                self._seen.popitem(last=False)
        return req

    def seen(self, uid: str) -> Mapping[str, Any] | None:
        """The latest version of the pod a filter/prioritize/bind call carried, if any."""
        return self._seen.get(uid)

    def cached(self, pod: Mapping[str, Any], names: list[str]) -> Verdict:
        """`names` against the cache; reuses the previous call's result for the same pod while
        the state is unchanged (prioritize right after filter)."""
        meta = pod.get("metadata") or {}
        key = (meta.get("uid"), meta.get("resourceVersion"), self.state.generation)
        now = time.monotonic()
        last = self._last
        if last is not None and last[0] == key and now - last[1] < _CACHE_S:
            v = last[2]
            if all(map(v.fits.__contains__, names)):  # prioritize: the names that passed
                self._all_fit = (v, names)
                return v
            if all(n in v.fits or n in v.failed for n in names):
                return v
        req = self.request(pod)
        cluster = self.state.cluster
        if len(names) * 2 >= self.state.node_count():  # most nodes: the column path
            fr = cluster.filter(req, self.policy)
        else:
            fr = cluster.filter(req, self.policy, [n for n in names
                                                   if self.state.has_inventory(n)])
        fits = fr.fits  # fresh dicts: ours to change
        failed: dict[str, Refused] = fr.failed  # type: ignore[assignment]
        for n in [n for n in filterfalse(fits.__contains__, names) if n not in failed]:
            failed[n] = no_inventory(n)  # the GPU inventory does not know it
        verdict = Verdict(req, fits, failed, fr.scores)
        self._hand_off(pod, verdict, cached=True)
        self._last = (key, now, verdict)
        return verdict

    def all_fit(self, v: Verdict, names: list[str]) -> bool:
        """Whether every name is in `v.fits` (known at once when `cached` just tested it)."""
        done = self._all_fit
        return (done is not None and done[0] is v and done[1] is names) or all(
            map(v.fits.__contains__, names))

    def _device_requests(self, pod: Mapping[str, Any]) -> tuple[handoff.DeviceRequest, ...]:
        """handoff.device_requests, once per pod (a pod's containers never change)."""
        uid = (pod.get("metadata") or {}).get("uid")
        got = self._devices.get(uid) if uid else None
        if got is None:
            got = handoff.device_requests(pod)
            if len(self._devices) >= _REQUESTS:
                self._devices.clear()
            if uid:
                self._devices[uid] = got
        return got

    def given(self, pod: Mapping[str, Any], nodes: wire.NodeList) -> tuple[Verdict, list[str]]:
        """The pod against full Node objects (nodeCacheCapable: false): their inventories, the
        slices the cache knows are held there, nothing reserved. Returns the node names too."""
        req = self.request(pod)
        cluster = ClusterState()
        names: list[str] = []
        failed: dict[str, Refused] = {}
        for raw in nodes.items:
            meta = wire.decode(bytes(raw), wire.NodeHead).metadata
            names.append(meta.name)
            text = (meta.annotations or {}).get(codec.INVENTORY_ANNOTATION)
            try:
                if text is None:
                    raise CodecError("no inventory")
                cluster.add_node(codec.decode_inventory(text, node=meta.name))
                for key, a in self.state.held_on(meta.name).items():
                    cluster.assign(key, a)
            except CodecError:
                failed[meta.name] = no_inventory(meta.name)
            except AllocationError as exc:
                failed[meta.name] = Refusal(UNACCOUNTED, False, str(exc))
        fr = cluster.filter(req, self.policy, [n for n in names if n not in failed])
        failed.update(fr.failed)
        verdict = Verdict(req, fr.fits, failed)
        self._hand_off(pod, verdict, cached=False)
        return verdict, names

    def _hand_off(self, pod: Mapping[str, Any], v: Verdict, *, cached: bool) -> None:
        """Refuse fitting nodes whose cached assignments cannot all be counted, and nodes
        where the pod could be confused with an in-flight pod (handoff.blocking_flight).
        Only the few nodes with waiting assignments or pods in flight are looked at."""
        fits = v.fits
        if cached:
            for name in self.state.nodes_waiting():
                if name in fits:
                    del fits[name]
                    v.failed[name] = Refusal(UNACCOUNTED, False, f"{self.state.waiting(name)} "
                                             "pod(s) on this node hold slices its inventory "
                                             "cannot hold")
        flying = [n for n in self.state.nodes_with_flights() if n in fits]
        if not flying:
            return
        requests = self._device_requests(pod)
        if not requests:
            return
        first = (requests[0].resource, requests[0].quantity)
        fixed = {s.container: s.memory_mib for s in v.pod.slices}  # None: percent of the GPU
        same = (handoff.request_shape(requests, v.pod, fixed)  # type: ignore[arg-type]
                if None not in fixed.values() else None)  # absolute memory: one shape anywhere
        by_size: dict[int, tuple[Any, ...]] = {}  # percent: the shape on nodes of one GPU size
        mine = self.state.flight_node(v.pod.key)  # where the pod is in flight itself, if anywhere
        if len(self._blocked) > 16 * self.state.node_count():
            self._blocked.clear()
        for name in flying:
            by = self.state.unstarted_by_first(name)
            flights = by.get(first)
            if not flights or all(f.shape == same for f in flights):
                continue  # nothing there the node agent could confuse with this pod
            shape = same
            if shape is None:
                pl = fits[name]
                size = pl.snapshot.uniform_mem
                shape = by_size.get(size) if size else None
                if shape is None:
                    shape = handoff.request_shape(requests, v.pod, _memory_per_gpu(v.pod, pl))
                    if size:
                        by_size[size] = shape
            refusal = self._waiting(name, by, requests, shape, v.pod.key, mine)
            if refusal is not None:
                del fits[name]
                v.failed[name] = refusal

    def _waiting(self, name: str, by: Mapping[tuple[str, int], list[handoff.Flight]],
                 requests: tuple[handoff.DeviceRequest, ...], shape: tuple[Any, ...], key: str,
                 mine: str | None) -> Refusal | None:
        """handoff.blocking_flight on node `name` as a refusal, kept per (node, first request,
        shape) while the node's index `by` is the same object (state.py replaces it when a pod
        in flight there changes); not kept where the asking pod is in flight itself (`mine`),
        as a pod's own flight never blocks it."""
        memo_key = (name, requests[0].resource, requests[0].quantity, shape)
        memo = self._blocked.get(memo_key)
        if memo is not None and memo[0] is by and name != mine:
            return memo[1]
        flights = by[(requests[0].resource, requests[0].quantity)]
        f = handoff.blocking_flight(requests, shape, flights, key=key)
        refusal = None if f is None else Refusal(
            WAITING.format(f.key), False, f"its first device request {f.pending[0].resource}="
            f"{f.pending[0].quantity} looks the same to the node agent")
        if name != mine:
            self._blocked[memo_key] = (by, refusal)
        return refusal


def _memory_per_gpu(pod: PodRequest, pl: Placement) -> dict[str, int]:
    """container -> MiB per GPU of its slices on the placement's node. Chosen GPUs are always
    healthy, so on a node whose healthy GPUs are one size percent requests resolve without
    placing the pod (placing it here, on every node with a pod in flight, was the slow part)."""
    size = pl.snapshot.uniform_mem
    if size:
        return {s.container: s.memory_mib if s.memory_mib is not None
                else size * s.memory_percent // 100  # type: ignore[operator]
                for s in pod.slices}
    return {c.container: c.slices[0].memory_mib for c in pl.assignment.containers if c.slices}


def filter_reply(v: Verdict, names: list[str]) -> wire.FilterResult:
    """The reply for NodeNames (names in request order); the route swaps in Nodes if needed."""
    fits, refused = v.fits, v.failed
    # runs for every node on every scheduling attempt: the name tests stay in C (filter)
    passed = list(filter(fits.__contains__, names))
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    if len(passed) < len(names):
        out = list(filterfalse(fits.__contains__, names))  # no per-name Python below either
        why = list(map(refused.__getitem__, out))
        curable = list(map(_RESOLVABLE, why))
        failed = dict(zip(compress(out, curable), map(_REASON, compress(why, curable)),
                          strict=True))
        cured = list(map(not_, curable))
        unresolvable = dict(zip(compress(out, cured), map(_REASON, compress(why, cured)),
                                strict=True))
    return wire.FilterResult(NodeNames=passed, FailedNodes=failed,
                             FailedAndUnresolvableNodes=unresolvable)


def unfit_message(v: Verdict, names: list[str], limit: int = 3) -> str:
    """`0/N nodes can take the GPU request: 3 insufficient GPU memory (node-a: …), …`."""
    counts = Counter(v.failed[n].reason for n in names if n in v.failed)
    parts = []
    for reason, count in counts.most_common(limit):
        example = next(n for n in names if n in v.failed and v.failed[n].reason == reason)
        parts.append(f"{count} {reason} ({example}: {v.failed[example].detail})")
    more = sum(counts.values()) - sum(c for _, c in counts.most_common(limit))
    tail = f", {more} other" if more else ""
    return f"0/{len(names)} nodes can take the GPU request: {', '.join(parts)}{tail}"

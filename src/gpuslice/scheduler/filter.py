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
from itertools import compress
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

__all__ = ["UNACCOUNTED", "WAITING", "Evaluator", "Verdict", "filter_reply", "unfit_message",
           "waited_for"]

WAITING = "waiting for pod {} to be allocated on this node"
UNACCOUNTED = "node has GPU assignments gpuslice cannot account for"
_CACHE_S = 2.0  # a filter's result serves the prioritize that follows, if nothing changed
_RECENT = 16  # pods whose last answer is kept for that
_REQUESTS = 4096  # parsed pods kept (filter, prioritize and bind parse the same pod; a burst
# of pods created at once is filtered before the first is bound)
_REASON, _RESOLVABLE = attrgetter("reason"), attrgetter("resolvable")


class Refusal(msgspec.Struct, frozen=True):
    """The extender's own refusals, shaped like the allocator's Rejection."""

    reason: str  # short, identical across nodes for one cause
    resolvable: bool
    detail: str  # this node's numbers (logs, events)
    waits_for: str = ""  # WAITING: the key of the pod in flight (recheck.py reads it again)


Refused = Rejection | Refusal  # a Rejection words its detail only when it is read


class Verdict:
    """A pod against some nodes: `fits` (node -> placement) and `failed` (node -> refusal; a
    name the inventory does not know is in neither, `refusal` words it); `scores` as the
    allocator's FilterResult.scores (None: ask ClusterState.prioritize), which may still
    score the nodes in `dropped` (refused by the in-flight rule after scoring); `every`: every
    cached node was decided, so any offered name is answered."""

    __slots__ = ("dropped", "every", "failed", "fits", "pod", "scores")

    def __init__(self, pod: PodRequest, fits: dict[str, Placement],
                 failed: dict[str, Refused],
                 scores: Callable[[], Mapping[str, int] | None] | None = None, *,
                 every: bool = False) -> None:
        self.pod, self.fits, self.failed, self.scores = pod, fits, failed, scores
        self.every = every
        self.dropped: list[str] = []

    def refusal(self, name: str) -> Refused:
        """Why node `name` cannot take the pod (it must not be in `fits`)."""
        return self.failed.get(name) or no_inventory(name)

    def covers(self, names: list[str]) -> bool:
        return self.every or all(n in self.fits or n in self.failed for n in names)


class Evaluator:
    """Evaluates pods against the cached cluster (or against given Node objects)."""

    def __init__(self, state: ExtenderState, policy: Policy,
                 defaults: dialects.Defaults | None = None, *,
                 scheduler_name: str = "gpuslice-scheduler") -> None:
        self.state, self.policy = state, policy
        self.defaults = defaults or dialects.Defaults()
        self.scheduler_name = scheduler_name
        # (uid, resourceVersion) -> (state generation, when, verdict): the last few pods' answers
        # (bind calls for other pods come between one pod's filter and its prioritize)
        self._recent: OrderedDict[tuple[Any, Any], tuple[int, float, Verdict]] = OrderedDict()
        self._requests: dict[tuple[Any, Any], PodRequest] = {}
        self._seen: OrderedDict[str, Mapping[str, Any]] = OrderedDict()  # uid -> pod, bounded
        self._devices: dict[str, tuple[handoff.DeviceRequest, ...]] = {}
        # (*_request_key, gang) -> node -> (its in-flight index, refusal): see _hand_off
        self._blocked: dict[tuple[Any, ...], dict[str, tuple[Any, Refusal | None]]] = {}

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

    def cached(self, pod: Mapping[str, Any], names: list[str], *,
               as_filtered: bool = False) -> Verdict:
        """`names` against the cache; reuses the previous call's result for the same pod
        version while the state is unchanged, or, `as_filtered`, even if other pods were placed
        since (prioritize right after filter scores what the filter saw; bind checks again)."""
        meta = pod.get("metadata") or {}
        key, generation = (meta.get("uid"), meta.get("resourceVersion")), self.state.generation
        now = time.monotonic()
        last = self._recent.get(key) if key[0] else None  # no uid: nothing to tell pods apart
        if last is not None and (last[0] == generation or as_filtered) \
                and now - last[1] < _CACHE_S and last[2].covers(names):
            return last[2]
        req = self.request(pod)
        cluster = self.state.cluster
        every = len(names) * 2 >= self.state.node_count()  # most nodes: the column path
        if every:
            fr = cluster.filter(req, self.policy)
        else:
            fr = cluster.filter(req, self.policy, [n for n in names
                                                   if self.state.has_inventory(n)])
        # fresh dicts: ours to change; names the inventory lacks are refused by Verdict.refusal
        verdict = Verdict(req, fr.fits, fr.failed, fr.scores,  # type: ignore[arg-type]
                          every=every)
        self._hand_off(pod, verdict, cached=True)
        if key[0]:
            self._recent.pop(key, None)
            self._recent[key] = (generation, now, verdict)
            if len(self._recent) > _RECENT:
                self._recent.popitem(last=False)
        return verdict

    def device_requests(self, pod: Mapping[str, Any]) -> tuple[handoff.DeviceRequest, ...]:
        """handoff.device_requests, once per pod (a pod's containers never change), from the
        pod's parse (`request`; the webhook named every device resource, so the defaults do not
        change the answer)."""
        uid = (pod.get("metadata") or {}).get("uid")
        got = self._devices.get(uid) if uid else None
        if got is None:
            got = handoff.device_requests(pod, self.defaults, parsed=self.request(pod))
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
                    self._drop(v, name, Refusal(UNACCOUNTED, False, f"{self.state.waiting(name)} "
                                                "pod(s) on this node hold slices its inventory "
                                                "cannot hold"))
        flying = [n for n in self.state.nodes_with_flights() if n in fits]
        if not flying:
            return
        requests = self.device_requests(pod)
        if not requests:
            return
        gang = dialects.gang_of(pod)  # pods of other gangs are not interchangeable either
        fixed = {s.container: s.memory_mib for s in v.pod.slices}  # None: percent of the GPU
        same = (handoff.request_shape(requests, v.pod, fixed, gang=gang)  # type: ignore[arg-type]
                if None not in fixed.values() else None)  # absolute memory: one shape anywhere
        mine = self.state.flight_node(v.pod.key)  # where the pod is in flight itself, if anywhere
        if len(self._blocked) > 64:
            self._blocked.clear()
        # kept per node while the node's index is the same object (state.py replaces it when a
        # pod in flight there changes); never where the pod is in flight itself, as a pod's
        # own flight never blocks it
        kept = self._blocked.setdefault((*_request_key(requests, v.pod), gang), {})
        by_size: dict[int, tuple[Any, ...]] = {}  # percent: the shape on nodes of one GPU size
        for name, by in zip(flying, self.state.unstarted_on(flying), strict=True):
            got = kept.get(name)
            if got is not None and got[0] is by and name != mine:
                refusal = got[1]
            else:
                refusal, keep = _blocking(name, by, requests, same, v, by_size, gang)
                if keep and name != mine:
                    kept[name] = (by, refusal)
            if refusal is not None:
                self._drop(v, name, refusal)

    @staticmethod
    def _drop(v: Verdict, name: str, refusal: Refusal) -> None:
        del v.fits[name]
        v.failed[name] = refusal
        v.dropped.append(name)


def _request_key(requests: tuple[handoff.DeviceRequest, ...], pod: PodRequest) -> tuple[Any, ...]:
    """What the in-flight rule reads of a pod on a given node: per GPU container, in order, its
    device request and its slices as asked (percent or MiB), container names left out."""
    by_name = {s.container: s for s in pod.slices}
    return tuple((r.resource, r.quantity, r.kind) + (
        (s.priority, s.count, s.memory_mib, s.memory_percent, s.cores) if s else ())
        for r in requests for s in (by_name.get(r.container),))


def _blocking(name: str, by: Mapping[tuple[str, int], list[handoff.Flight]],
              requests: tuple[handoff.DeviceRequest, ...], same: tuple[Any, ...] | None,
              v: Verdict, by_size: dict[int, tuple[Any, ...]], gang: str = ""
              ) -> tuple[Refusal | None, bool]:
    """handoff.blocking_flight on node `name` as a refusal, and whether it may be kept (not
    where a percent request's shape came from this placement: a node of mixed GPU sizes)."""
    flights = by.get((requests[0].resource, requests[0].quantity))
    if not flights or all(f.shape == same for f in flights):
        return None, True  # nothing there the node agent could confuse with this pod
    shape, keep = same, True
    if shape is None:
        pl = v.fits[name]
        size = pl.snapshot.uniform_mem
        shape = by_size.get(size) if size else None
        if shape is None:
            shape = handoff.request_shape(requests, v.pod, _memory_per_gpu(v.pod, pl),
                                          gang=gang)
            if size:
                by_size[size] = shape
        keep = bool(size)
    f = handoff.blocking_flight(requests, shape, flights, key=v.pod.key)
    return None if f is None else Refusal(
        WAITING.format(f.key), False, f"its first device request {f.pending[0].resource}="
        f"{f.pending[0].quantity} looks the same to the node agent", f.key), keep


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


def waited_for(v: Verdict, names: list[str]) -> set[str]:
    """The pods in flight that keep the pod off any of `names`."""
    return {r.waits_for for n in names if isinstance(r := v.failed.get(n), Refusal)
            and r.waits_for}


def filter_reply(v: Verdict, names: list[str]) -> wire.FilterResult:
    """The reply for NodeNames (names in request order); the route swaps in Nodes if needed."""
    # runs for every node on every scheduling attempt: one hashing pass over the fresh names,
    # the rest in C too (compress, map)
    fit = list(map(v.fits.__contains__, names))
    if False not in fit:
        return wire.FilterResult(NodeNames=names)
    out = list(compress(names, map(not_, fit)))
    why = list(map(v.failed.get, out))
    if not all(why):  # names the inventory does not know (`None in` would call __eq__)
        why = [w or no_inventory(n) for n, w in zip(out, why, strict=True)]
    curable = list(map(_RESOLVABLE, why))
    cured = list(map(not_, curable))
    return wire.FilterResult(NodeNames=list(compress(names, fit)),
                             FailedNodes=_reasons(out, why, curable),
                             FailedAndUnresolvableNodes=_reasons(out, why, cured))


def _reasons(names: list[str], why: list[Refused], keep: list[bool]) -> dict[str, str]:
    return dict(zip(compress(names, keep), map(_REASON, compress(why, keep)), strict=True))


def unfit_message(v: Verdict, names: list[str], limit: int = 3) -> str:
    """`0/N nodes can take the GPU request: 3 insufficient GPU memory (node-a: …), …`."""
    why = {n: v.refusal(n) for n in names if n not in v.fits}
    counts = Counter(r.reason for r in why.values())
    parts = []
    for reason, count in counts.most_common(limit):
        example = next(n for n, r in why.items() if r.reason == reason)
        parts.append(f"{count} {reason} ({example}: {why[example].detail})")
    more = sum(counts.values()) - sum(c for _, c in counts.most_common(limit))
    tail = f", {more} other" if more else ""
    return f"0/{len(names)} nodes can take the GPU request: {', '.join(parts)}{tail}"

"""The extender's view of the cluster: GPU inventories, held slices and in-flight pods.

Owns: `ExtenderState` (a ClusterState rebuilt from node inventory and pod assignment
annotations alone, plus the in-flight pods per node) and the trimmers that keep only the
fields it reads from watched nodes and pods.
Does not: talk to the API (service.py feeds it from kube Informers) or choose GPUs (allocator/).
Invariants: only assignments gpuslice's bind wrote are believed: a pod holds its slices while
it is bound and not terminal/deleted, carries the managed label, its assignment names the node
it is bound to (spec.nodeName: the Binding writes both in one update) and only containers that
ask for a GPU; any other assignment (a tenant's forgery, on a pod running elsewhere or on none)
is logged and holds nothing, nor puts the pod in flight. `assume` (bind) holds slices before
the watch shows them, until the watch shows the Binding or the in-flight timeout (`sweep`).
An assignment that cannot be committed (its node unknown, or over-committed against the
inventory) waits on its node and is retried whenever that node changes; the filter
refuses a node with waiting assignments, so nothing is ever double-booked.
Failure: malformed annotations are logged and read as absent; nothing here raises on input.
Tests: tests/unit/scheduler/test_state.py
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from operator import attrgetter
from typing import Any, TypedDict

import msgspec

from gpuslice import codec, dialects, handoff
from gpuslice.allocator import AllocationError, ClusterState
from gpuslice.errors import CodecError
from gpuslice.model import NodeInventory, PodAssignment

__all__ = ["ExtenderState", "NodeFields", "PodFields", "gang_key", "pod_key", "trim_node",
           "trim_pod"]

log = logging.getLogger(__name__)

_KEEP_ANNOTATIONS = frozenset({codec.ASSIGNMENT_ANNOTATION, handoff.BOUND_AT, handoff.ALLOCATED,
                               *dialects.ANNOTATIONS})
_CONTAINER_KEYS = ("name", "restartPolicy", "resources")
_INIT_AND_APP = ("initContainers", "containers")


# What trim_node and trim_pod read, as schemas for the informers (kube/cache.py decoder()):
# a watched Pod or Node is decoded into these fields alone, its env, managedFields, images and
# the rest skipped unbuilt. tests/unit/scheduler/test_trim_fields.py holds each trim equal
# through its schema and without.
class _Meta(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    annotations: Any
    labels: Any


class NodeFields(TypedDict, total=False):
    metadata: _Meta


class _Container(TypedDict, total=False):
    name: Any
    restartPolicy: Any
    resources: Any


class _PodSpec(TypedDict, total=False):
    nodeName: Any
    schedulerName: Any
    initContainers: list[_Container]
    containers: list[_Container]


class _Named(TypedDict, total=False):
    name: Any


class _PodStatus(TypedDict, total=False):
    phase: Any
    initContainerStatuses: list[_Named]
    containerStatuses: list[_Named]


class PodFields(TypedDict, total=False):
    metadata: _Meta
    spec: _PodSpec
    status: _PodStatus


def trim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """A watched Node reduced to its name, resourceVersion and inventory annotation."""
    meta = node.get("metadata") or {}
    ann = meta.get("annotations") or {}
    kept = {codec.INVENTORY_ANNOTATION: ann[codec.INVENTORY_ANNOTATION]} \
        if codec.INVENTORY_ANNOTATION in ann else {}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion"),
                         "annotations": kept}}


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A watched Pod reduced to what placement, bind and the hand-off read."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ann = meta.get("annotations") or {}
    out_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                     "creationTimestamp", "deletionTimestamp") if k in meta}
    out_meta["annotations"] = {k: v for k, v in ann.items() if k in _KEEP_ANNOTATIONS}
    labels = meta.get("labels") or {}
    if handoff.MANAGED_LABEL in labels:
        out_meta["labels"] = {handoff.MANAGED_LABEL: labels[handoff.MANAGED_LABEL]}
    out_spec: dict[str, Any] = {k: spec[k] for k in ("nodeName", "schedulerName") if k in spec}
    for key in ("initContainers", "containers"):
        if isinstance(spec.get(key), list):
            out_spec[key] = [{k: c[k] for k in _CONTAINER_KEYS if k in c}
                             for c in spec[key] if isinstance(c, Mapping)]
    status = pod.get("status") or {}
    out_status = {"phase": status["phase"]} if status.get("phase") else {}
    for key in ("initContainerStatuses", "containerStatuses"):  # the kubelet admitted it
        if status.get(key):
            out_status[key] = [{"name": c.get("name")} for c in status[key]
                               if isinstance(c, Mapping)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": out_spec,
            "status": out_status}


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def gang_key(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, gpuslice.io/gang) of the pod, as gang_nodes and gang_held take it; None when
    it names none (or an invalid one: dialects.gang_of)."""
    gang = dialects.gang_of(pod)
    return (pod_key(pod).split("/", 1)[0], gang) if gang else None


class _Facts(msgspec.Struct, frozen=True):
    """What the state reads off one observed pod."""

    uid: str
    assignment: PodAssignment | None  # None also when it is not one gpuslice's bind wrote
    bound_at: float | None
    flight: handoff.Flight | None  # computed without a timeout; the reader checks the age
    source: tuple[Any, ...]  # what they were read from: uid, deleting, our three annotations,
    #                          spec.nodeName, the managed label, admitted by the kubelet


class _Assumed(msgspec.Struct, frozen=True):
    uid: str
    assignment: PodAssignment
    flight: handoff.Flight | None
    since: float


def _not_ours(pod: Mapping[str, Any], a: PodAssignment, node: str, *, managed: bool) -> str:
    """Why `a` cannot be one gpuslice's bind wrote on `pod` ("" when it can): the Binding sets
    the assignment and spec.nodeName in one update, on a managed pod, for its GPU containers."""
    if not managed:
        return f"the pod is not labelled {handoff.MANAGED_LABEL}=true"
    if not node:
        return f"it names node {a.node} but the pod is bound to no node"
    if a.node != node:
        return f"it names node {a.node} but the pod is bound to {node}"
    spec = pod.get("spec") or {}
    gpu = {c.get("name") for key in _INIT_AND_APP for c in spec.get(key) or ()
           if isinstance(c, Mapping) and dialects.is_gpu_pod({"spec": {key: [c]}})}
    for c in a.containers:
        if c.container not in gpu:
            return f"its container {c.container!r} asks for no GPU"
    return ""


class ExtenderState:
    """Mutable cluster view fed by node and pod events; single-threaded (one asyncio loop)."""

    def __init__(self, *, timeout_s: float = 30.0, clock: Callable[[], float] = time.time) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self.cluster = ClusterState()
        self.generation = 0  # bumped on every change a filter could see
        self._inv_text: dict[str, str] = {}
        self._pods: dict[str, Mapping[str, Any]] = {}
        self._facts: dict[str, _Facts] = {}
        self._assumed: dict[str, _Assumed] = {}
        self._held: dict[str, PodAssignment] = {}  # what self.cluster holds, by pod
        self._held_on: dict[str, set[str]] = {}  # node -> keys held there
        self._waiting: dict[str, set[str]] = {}  # node -> keys
        self._waits_on: dict[str, str] = {}  # key -> node
        self._node_flights: dict[str, set[str]] = {}  # node -> keys
        self._flies_on: dict[str, str] = {}  # key -> node
        self._first: dict[str, tuple[str, int]] = {}  # key -> first device request, unstarted
        # node -> (oldest bound_at, unstarted_by_first): dropped when a pod there changes
        self._unstarted: dict[str, tuple[float, dict[tuple[str, int], list[handoff.Flight]]]] = {}
        self._requests: dict[str, tuple[handoff.DeviceRequest, ...]] = {}  # uid -> (immutable)
        # (namespace, gpuslice.io/gang) -> node -> pods of it held there; key -> its gang then
        self._gangs: dict[tuple[str, str], dict[str, int]] = {}
        self._held_gang: dict[str, tuple[str, str]] = {}
        # (namespace, gang) -> (node, when, gang size or 0): the filter's latest choice for a
        # pod of the gang, which its bind may not have reached yet (kube-scheduler pipelines
        # the next pod)
        self._gang_chosen: dict[tuple[str, str], tuple[str, float, int]] = {}

    # -- events --------------------------------------------------------------------------
    def on_node(self, kind: str, node: Mapping[str, Any]) -> None:
        """ADDED / MODIFIED / DELETED of a (trimmed) Node."""
        name = (node.get("metadata") or {}).get("name") or ""
        text = ((node.get("metadata") or {}).get("annotations") or {}).get(
            codec.INVENTORY_ANNOTATION)
        if kind == "DELETED" or not isinstance(text, str):
            if self._inv_text.pop(name, None) is not None:
                self._lost(self.cluster.remove_node(name))
            return
        if self._inv_text.get(name) == text:
            return  # a status update: the inventory did not change
        try:
            inv = codec.decode_inventory(text, node=name)
            dropped = self.cluster.add_node(inv)
        except (CodecError, AllocationError) as exc:
            log.warning("node has an unusable GPU inventory, treated as none: %s", exc,
                        extra={"node": name})
            self._inv_text.pop(name, None)
            self._lost(self.cluster.remove_node(name))
            return
        self._inv_text[name] = text
        self._lost(dropped)
        self._retry(name)

    def on_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        """ADDED / MODIFIED / DELETED of a (trimmed) managed Pod."""
        key = pod_key(pod)
        old = self._facts.get(key)
        facts = None if kind == "DELETED" else self._read(key, pod)
        if facts is not None and facts is old:
            self._pods[key] = pod  # e.g. a status update: nothing placement reads changed
            return
        if facts is None:
            self._pods.pop(key, None)
            self._facts.pop(key, None)
            self._assumed.pop(key, None)
            if old is not None:
                self._requests.pop(old.uid, None)
        else:
            self._pods[key] = pod
            self._facts[key] = facts
            a = self._assumed.get(key)
            if a is not None and (a.uid != facts.uid or facts.assignment == a.assignment):
                del self._assumed[key]  # the watch caught up (or it is another pod now)
        self._apply(key)

    def assume(self, key: str, uid: str, assignment: PodAssignment,
               flight: handoff.Flight | None) -> None:
        """Hold `assignment` for a pod being bound, before the watch shows it (bind.py).
        Raises AllocationError, changing nothing, when it no longer fits."""
        old = self._unhold(key)
        gang = flight.gang if flight is not None else None
        try:
            self._hold(key, assignment, gang)
        except AllocationError:
            if old is not None:
                self._hold(key, old, gang)
            raise
        self._assumed[key] = _Assumed(uid, assignment, flight, self.clock())
        if flight is not None:
            self._requests[uid] = flight.requests
        self._apply(key)

    def forget(self, key: str) -> None:
        """Drop what `assume` held (a bind that failed for good); the pod reverts to what its
        annotations say."""
        if self._assumed.pop(key, None) is not None:
            self._apply(key)

    def sweep(self) -> None:
        """Release what time has ended: assumptions (binds the watch never showed) and gang
        choices (gang_nodes) older than the in-flight timeout. Call every second or so."""
        old = self.clock() - self.timeout_s
        for key in [k for k, a in self._assumed.items() if a.since <= old]:
            del self._assumed[key]
            self._apply(key)
        for g in [g for g, (_, when, _) in self._gang_chosen.items() if when <= old]:
            del self._gang_chosen[g]

    # -- reads ---------------------------------------------------------------------------
    def pod(self, key: str) -> Mapping[str, Any] | None:
        """The last observed (trimmed) pod."""
        return self._pods.get(key)

    def held(self, key: str) -> PodAssignment | None:
        return self._held.get(key)

    def held_on(self, node: str) -> dict[str, PodAssignment]:
        """Every assignment held on `node` (and those waiting for it), by pod key."""
        keys = self._held_on.get(node, set()) | self._waiting.get(node, set())
        out = {}
        for k in sorted(keys):
            a = self._held.get(k) or self._desired(k)
            if a is not None:
                out[k] = a
        return out

    def gang_held(self, namespace: str, gang: str) -> Mapping[str, int]:
        """The nodes that hold pods of `gang` of `namespace` (bound or being bound): how many."""
        return self._gangs.get((namespace, gang), {})

    def gang_nodes(self, namespace: str, gang: str) -> Collection[str]:
        """gang_held, and the node the filter chose last for a pod of the gang, for `timeout_s`
        (its bind may be on the way)."""
        held = self.gang_held(namespace, gang).keys()
        chosen = self._gang_chosen.get((namespace, gang))
        if chosen is None or chosen[0] in held or chosen[1] <= self.clock() - self.timeout_s:
            return held
        return {*held, chosen[0]}

    def gang_chosen(self, namespace: str, gang: str, node: str, size: int = 0) -> None:
        """The filter chose `node` for a pod of the gang, which has `size` pods (0: not said):
        see gang_nodes and kept_for_gangs."""
        self._gang_chosen[(namespace, gang)] = (node, self.clock(), size)

    def kept_for_gangs(self, but: tuple[str, str] | None = None) -> set[str]:
        """Nodes chosen, within `timeout_s`, for a gang that said its size and holds fewer pods
        than that (its other pods are on the way), gang `but` left out: other pods go elsewhere
        where they can (prioritize.best_node). Nothing is refused for it."""
        if not self._gang_chosen:
            return set()
        old = self.clock() - self.timeout_s
        return {node for g, (node, when, size) in self._gang_chosen.items()
                if g != but and size and when > old
                and sum(self.gang_held(*g).values()) < size}

    def flights(self, node: str) -> list[handoff.Flight]:
        """Pods in flight on `node` now (bound, or being bound, and not yet allocated). A pod
        the watch shows bound stays in flight however old its bind until the agent marks it,
        the kubelet admits it or it ends: a kubelet restarted or cut off may still admit it
        late, and the node agent would then refuse both it and a confusable pod bound beside
        it (handoff.py). Only a bind the watch has not shown yet expires (`timeout_s`)."""
        keys = self._node_flights.get(node)
        if not keys:
            return []
        old = self.clock() - self.timeout_s
        out = []
        for k in keys:
            a = self._assumed.get(k)
            f = a.flight if a is not None else self._facts[k].flight
            if f is not None and (a is None or f.bound_at > old):
                out.append(f)
        return out

    def unstarted_by_first(self, node: str) -> Mapping[tuple[str, int], list[handoff.Flight]]:
        """Pods in flight on `node` that the agent has not started on, by their first device
        request (resource, quantity), oldest first: the only ones a new pod may be confused
        with. Kept per node until a pod there changes or the oldest assumed bind times out."""
        return self.unstarted_on((node,))[0]

    def unstarted_on(self, nodes: Iterable[str]) -> list[Mapping[tuple[str, int],
                                                               list[handoff.Flight]]]:
        """`unstarted_by_first` of each node (one clock read)."""
        old = self.clock() - self.timeout_s
        out = []
        for n in nodes:
            got = self._unstarted.get(n)
            if got is None or got[0] <= old:
                got = self._unstarted[n] = self._index_unstarted(n)
            out.append(got[1])
        return out

    def _index_unstarted(self, node: str) -> tuple[float, dict[tuple[str, int],
                                                                list[handoff.Flight]]]:
        flights = self.flights(node)
        by: dict[tuple[str, int], list[handoff.Flight]] = {}
        for f in sorted(flights, key=attrgetter("order")):
            first = self._first.get(f.key)
            if first is not None:
                by.setdefault(first, []).append(f)
        expiring = (f.bound_at for f in flights if f.key in self._assumed)
        return min(expiring, default=math.inf), by

    def flight_node(self, key: str) -> str | None:
        """The node where pod `key` may be in flight (`flights` says whether it is, now)."""
        return self._flies_on.get(key)

    def nodes_with_flights(self) -> list[str]:
        """Nodes that may have pods in flight (`flights` says which are, now)."""
        return [n for n, keys in self._node_flights.items() if keys]

    def nodes_waiting(self) -> list[str]:
        return [n for n, keys in self._waiting.items() if keys]

    def node_count(self) -> int:
        return len(self._inv_text)

    def waiting(self, node: str) -> int:
        """How many assignments on `node` could not be committed (the filter refuses it)."""
        return len(self._waiting.get(node, ()))

    def has_inventory(self, node: str) -> bool:
        return node in self._inv_text

    def inventory(self, node: str) -> NodeInventory | None:
        if node not in self._inv_text:
            return None
        return self.cluster.inventory(node)

    def uid(self, key: str) -> str:
        """The UID of the pod last observed under `key` ("" if none)."""
        facts = self._facts.get(key)
        return facts.uid if facts is not None else ""

    # -- reading pods ----------------------------------------------------------------------
    def _read(self, key: str, pod: Mapping[str, Any]) -> _Facts | None:
        """What `pod` says (None: it has ended and holds nothing). Parses as little as it
        can: most updates change nothing placement reads, and a pod's containers never change."""
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        meta = pod.get("metadata") or {}
        ann = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        uid = str(meta.get("uid") or "")
        node = (pod.get("spec") or {}).get("nodeName") or ""
        source = (uid, bool(meta.get("deletionTimestamp")),
                  *(ann.get(k) for k in (codec.ASSIGNMENT_ANNOTATION, handoff.BOUND_AT,
                                         handoff.ALLOCATED)),
                  node, isinstance(labels, Mapping) and labels.get(handoff.MANAGED_LABEL) == "true",
                  handoff.admitted(pod))
        old = self._facts.get(key)
        if old is not None and old.source == source:  # a status update
            return old
        assignment = None
        if source[2] is not None:
            try:
                assignment = codec.decode_assignment(source[2])
            except CodecError as exc:
                log.warning("ignoring a malformed assignment: %s", exc, extra={"pod": key})
        if assignment is not None:
            why = _not_ours(pod, assignment, node, managed=source[6])
            if why:
                log.warning("ignoring an assignment gpuslice's bind did not write: %s", why,
                            extra={"pod": key, "node": assignment.node})
                assignment = None
        bound_at = handoff.parse_time(source[3])
        flight = self._flight(key, pod, source, assignment, bound_at) if assignment else None
        return _Facts(uid=uid, assignment=assignment, bound_at=bound_at, flight=flight,
                      source=source)

    def _flight(self, key: str, pod: Mapping[str, Any], source: tuple[Any, ...],
                assignment: PodAssignment, bound_at: float | None) -> handoff.Flight | None:
        """handoff.flight_of(pod), skipped where its answer is already known."""
        uid, deleting, _, _, allocated = source[:5]
        if source[7]:
            return None  # the kubelet has admitted it: no Allocate can be for it any more
        a = self._assumed.get(key)
        if a is not None and a.flight is not None and a.uid == uid and not deleting \
                and not allocated and a.assignment == assignment \
                and a.flight.bound_at == bound_at:
            return a.flight  # the watch shows what bind wrote: bind computed this flight
        requests = self._requests.get(uid)
        if requests is not None and isinstance(allocated, str) and \
                {r.container for r in requests} <= set(allocated.split(",")):
            return None  # the agent has answered every GPU container
        flight = handoff.flight_of(pod, 0.0, math.inf)
        if flight is not None:
            self._requests[uid] = flight.requests
        return flight

    # -- internals -----------------------------------------------------------------------
    def _desired(self, key: str) -> PodAssignment | None:
        a = self._assumed.get(key)
        if a is not None:
            return a.assignment
        f = self._facts.get(key)
        return None if f is None else f.assignment

    def _apply(self, key: str) -> None:
        self.generation += 1
        self._index_flight(key)
        want, have = self._desired(key), self._held.get(key)
        if want == have and have is not None:
            self._unwait(key)
            return
        self._unwait(key)
        if have is not None:
            self._unhold(key)
        if want is not None:
            try:
                self._hold(key, want)
            except AllocationError as exc:
                log.warning("assignment waits for its node: %s", exc, extra={"pod": key})
                self._wait(key, want.node)
        if have is not None:
            self._retry(have.node)

    def _lost(self, keys: Iterable[str]) -> None:
        """Pods the ClusterState dropped with their node or GPUs: they wait for the node."""
        for key in keys:
            held = self._held.pop(key, None)
            if held is not None:
                self._held_on[held.node].discard(key)
                self._ungang(key, held.node)
                self._wait(key, held.node)
        self.generation += 1

    def _retry(self, node: str) -> None:
        for key in sorted(self._waiting.get(node, ())):
            if key in self._waiting.get(node, ()):
                self._apply(key)

    def _hold(self, key: str, a: PodAssignment, gang: str | None = None) -> None:
        """Hold `a` for pod `key`, counted for its gang (`gang`; None: the pod's, as seen)."""
        self.cluster.assign(key, a)  # AllocationError: nothing changed
        self._held[key] = a
        self._held_on.setdefault(a.node, set()).add(key)
        if gang is None:
            assumed = self._assumed.get(key)
            gang = assumed.flight.gang if assumed is not None and assumed.flight is not None \
                else dialects.gang_of(self._pods.get(key))
        if gang:
            g = self._held_gang[key] = (key.split("/", 1)[0], gang)
            on = self._gangs.setdefault(g, {})
            on[a.node] = on.get(a.node, 0) + 1

    def _unhold(self, key: str) -> PodAssignment | None:
        a = self._held.pop(key, None)
        if a is not None:
            self.cluster.release(key)
            self._held_on[a.node].discard(key)
            self._ungang(key, a.node)
        return a

    def _ungang(self, key: str, node: str) -> None:
        g = self._held_gang.pop(key, None)
        if g is not None:
            on = self._gangs[g]
            on[node] -= 1
            if not on[node]:
                del on[node]
                if not on:
                    del self._gangs[g]

    def _wait(self, key: str, node: str) -> None:
        self._waiting.setdefault(node, set()).add(key)
        self._waits_on[key] = node

    def _unwait(self, key: str) -> None:
        node = self._waits_on.pop(key, None)
        if node is not None:
            self._waiting[node].discard(key)

    def _index_flight(self, key: str) -> None:
        node = self._flies_on.pop(key, None)
        if node is not None:
            self._node_flights[node].discard(key)
            self._unstarted.pop(node, None)
        self._first.pop(key, None)
        a = self._assumed.get(key)
        f = a.flight if a is not None else getattr(self._facts.get(key), "flight", None)
        if f is not None:
            self._node_flights.setdefault(f.node, set()).add(key)
            self._flies_on[key] = f.node
            self._unstarted.pop(f.node, None)
            if not f.started:
                self._first[key] = (f.pending[0].resource, f.pending[0].quantity)

"""PURE: which container a kubelet Allocate call is for, and what that container is given.

Owns: reading the in-flight pods of this node (handoff.flight_of plus the assignment and the
pod's request), the checks an answer must pass, and the answer itself: GPUs, the env and
mounts (container/edits.py, shared with the DRA path's CDI specs; the pod's gang directory
under a compute limit), and the region's limits (`Answer.region`, which the agent writes).
Does not: do I/O (the agent creates the region and the gang directory, `Answer.gang`, and
patches gpuslice.io/allocated), or speak gRPC (plugin.py turns an Answer into a
ContainerAllocateResponse).
Invariants: a container gets exactly its assigned GPUs and limits, nothing else; the kubelet's
device IDs must lie on those GPUs (except IDs it reuses from the pod's init containers); an
assignment is believed only for a managed pod bound to THIS node (spec.nodeName), on GPUs this
node has, that does not over-commit a GPU together with the node's other pods (a hand-written
annotation cannot take another pod's share); a call is answered only when every pod it could
be for is interchangeable with the one answered: a pod the kubelet has not admitted counts
however old its bind, and so does a pod that asks for the resource without a believable
assignment (a `Stranger`); otherwise AmbiguousAllocate (handoff.py, "Expiry").
Failure: AllocateError, whose message the kubelet shows in the pod's events: what is wrong and
what to check. Tests: tests/unit/node/test_allocate.py, test_allocate_ambiguity.py,
tests/unit/node/test_init_device_reuse.py,
tests/integration/real_node/test_real_node_pods.py (the real kubelet's reuse)
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuslice import codec, dialects, handoff, model
from gpuslice.allocator.usage import AllocationError, footprint
from gpuslice.container.edits import Layout, Mount, container_edits, gang_host_dir
from gpuslice.errors import CodecError, GpusliceError, RequestError
from gpuslice.quantity import QuantityError, parse_int_quantity
from gpuslice.shim import RegionSpec

__all__ = ["AllocateError", "AmbiguousAllocate", "Answer", "InFlight", "PodViews", "Stranger",
           "answer", "assigned_pods", "device_gpu", "in_flight", "live_gangs", "match",
           "preferred", "strangers"]


class AllocateError(GpusliceError):
    """The kubelet's Allocate cannot be answered; the message reaches the pod's events."""


class AmbiguousAllocate(AllocateError):
    """The call could be for pods that must not get each other's slice; `pods` holds each one's
    (namespace, name, uid), for an event on every pod concerned (the kubelet's own event reaches
    only the pod it was admitting)."""

    def __init__(self, message: str, pods: Sequence[tuple[str, str, str]]) -> None:
        super().__init__(message)
        self.pods = tuple(pods)


@dataclass(frozen=True)
class InFlight:
    """An in-flight pod with what the answer needs: its assignment and its request."""

    flight: handoff.Flight
    assignment: model.PodAssignment
    request: model.PodRequest


@dataclass(frozen=True)
class Answer:
    pod_key: str
    pod_uid: str
    container: str
    gpus: tuple[str, ...]  # UUIDs, in the container's device order
    envs: dict[str, str]
    mounts: tuple[Mount, ...]
    cdi_devices: tuple[str, ...]
    region_host_dir: str
    region: RegionSpec  # the limits the agent writes into the container's region
    in_progress: bool = False  # an earlier container of the pod was answered already
    gang: str = ""  # the pod's gang whose directory the container is handed ("" none)


@dataclass(frozen=True)
class Stranger:
    """A pod on this node that asks for a device resource without an assignment gpuslice's bind
    wrote (it skipped the webhook or the extender, or its assignment is not believed), that the
    kubelet has not admitted yet: an Allocate may be for it, and it must get no one's slice."""

    namespace: str
    name: str
    uid: str
    asks: tuple[tuple[str, int | None], ...]  # (resource, quantity; None: unreadable)

    def could_ask(self, resource: str, quantity: int) -> bool:
        return any(r == resource and q in (None, quantity) for r, q in self.asks)


def device_gpu(device_id: str) -> str:
    """The GPU UUID of a replica device ID `<GPU-UUID>::<n>`."""
    return device_id.split("::", 1)[0]


def _bound_here(pod: Mapping[str, Any], node: str) -> bool:
    """A managed pod (the webhook's label) bound to `node` (spec.nodeName: the Binding wrote
    it). An assignment on any other pod is not one gpuslice's bind wrote."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return isinstance(spec, Mapping) and spec.get("nodeName") == node and \
        isinstance(labels, Mapping) and labels.get(handoff.MANAGED_LABEL) == "true"


def _flight_here(pod: Mapping[str, Any], node: str) -> InFlight | None:
    """The pod's flight on `node` whenever it was bound (callers apply the window), or None.
    Also while it is being deleted: the kubelet may still admit a pod it meets with a
    deletionTimestamp (after a partition), and that pod has a slice of its own to be given
    (flight_of leaves such pods out for the extender, which stops waiting for them)."""
    if not _bound_here(pod, node):
        return None
    meta = pod.get("metadata")
    if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
        pod = {**pod, "metadata": {k: v for k, v in meta.items() if k != "deletionTimestamp"}}
    f = handoff.flight_of(pod, 0.0, math.inf)
    if f is None or f.node != node:
        return None
    try:
        ann = pod["metadata"]["annotations"]
        return InFlight(f, codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION]),
                        dialects.parse_pod(pod))
    except (CodecError, RequestError, KeyError, TypeError):
        return None  # flight_of accepted it, so this cannot happen; never crash on a pod


def _live(f: InFlight, admitted: bool, now: float, timeout_s: float) -> bool:
    """Still a claimant: bound within the window (the kubelet may have admitted it while its
    marks lag), or not admitted yet however old its bind (a late admission, handoff.py)."""
    return not admitted or now - timeout_s < f.flight.bound_at <= now + timeout_s


def in_flight(pods: Iterable[Mapping[str, Any]], node: str, now: float,
              timeout_s: float) -> list[InFlight]:
    """The pods an Allocate on `node` may be for and that gpuslice placed there: managed, bound
    to it by spec.nodeName AND by their assignment, with containers not yet answered, bound
    within `timeout_s` or not yet admitted by the kubelet."""
    out = []
    for pod in pods:
        f = _flight_here(pod, node)
        if f is not None and _live(f, handoff.admitted(pod), now, timeout_s):
            out.append(f)
    return out


def _asks(pod: Mapping[str, Any]) -> tuple[tuple[str, int | None], ...]:
    """(device resource, quantity) of every container that names one, as the kubelet reads it
    (limits, else requests); an unreadable quantity is None (it may be any)."""
    out: list[tuple[str, int | None]] = []
    spec = pod.get("spec")
    for key in ("initContainers", "containers"):
        got = spec.get(key) if isinstance(spec, Mapping) else None
        for c in got if isinstance(got, list) else ():
            for resource in handoff.REPLICAS_PER_GPU:
                raw = handoff.named_quantity(c, resource) if isinstance(c, Mapping) else None
                if raw is None:
                    continue
                try:
                    out.append((resource, parse_int_quantity(raw, field=resource)))
                except (QuantityError, TypeError):
                    out.append((resource, None))
    return tuple(out)


def _answered_all(pod: Mapping[str, Any]) -> bool:
    """Every GPU container of the pod has been answered (gpuslice.io/allocated)."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    done = set(str(ann.get(handoff.ALLOCATED, "")).split(","))
    try:
        return all(r.container in done for r in handoff.device_requests(pod))
    except RequestError:
        return False


def _stranger(pod: Mapping[str, Any], node: str, flight: InFlight | None) -> Stranger | None:
    """The pod as a Stranger on `node` (see the class), or None."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    if flight is not None or not isinstance(meta, Mapping) or not isinstance(spec, Mapping) \
            or spec.get("nodeName") != node or handoff.admitted(pod):
        return None
    asks = _asks(pod)
    if not asks or (_believed(pod, node) and _answered_all(pod)):
        return None  # no device resource, or gpuslice's pod whose every call was answered
    return Stranger(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                    uid=str(meta.get("uid", "")), asks=asks)


def _believed(pod: Mapping[str, Any], node: str) -> bool:
    """The pod's assignment is one gpuslice's bind wrote for `node` (_bound_here, naming it)."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        return _bound_here(pod, node) and \
            codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION]).node == node
    except (CodecError, KeyError, TypeError):
        return False


def strangers(pods: Iterable[Mapping[str, Any]], node: str) -> list[Stranger]:
    """The pods on `node` an Allocate may be for that gpuslice did not place (Stranger)."""
    out = []
    for pod in pods:
        s = _stranger(pod, node, _flight_here(pod, node))
        if s is not None:
            out.append(s)
    return out


def assigned_pods(pods: Iterable[Mapping[str, Any]], node: str) -> dict[str, model.PodAssignment]:
    """uid -> assignment of every live managed pod bound to `node` that has one (what holds GPU
    shares)."""
    out = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ann = meta.get("annotations") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed") or \
                codec.ASSIGNMENT_ANNOTATION not in ann or not _bound_here(pod, node):
            continue
        try:
            a = codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION])
        except CodecError:
            continue
        if a.node == node:
            out[str(meta.get("uid", ""))] = a
    return out


def live_gangs(pods: Iterable[Mapping[str, Any]], node: str) -> set[tuple[str, str]]:
    """(namespace, gang) of every live pod on `node` (not ended, not being deleted) that names
    a gang: the gang directories the agent keeps (container/regions.remove_gangs)."""
    out = set()
    for pod in pods:
        meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
        gang = dialects.gang_of(pod)
        if gang and spec.get("nodeName") == node and not meta.get("deletionTimestamp") and \
                status.get("phase") not in ("Succeeded", "Failed"):
            out.add((str(meta.get("namespace") or "default"), gang))
    return out


class PodViews:
    """in_flight, assigned_pods and strangers of the node's pods, each pod decoded once per
    version: decoding every pod at every kubelet call is what made admission slow on a busy node
    (benchmarks/node_agent_bench.py). A pod is decoded again when its resourceVersion or its
    allocated annotation changes (the agent's own marks change the latter first)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._memo: dict[str, tuple[tuple[Any, ...], InFlight | None, bool,
                                    model.PodAssignment | None, Stranger | None]] = {}

    def _decoded(self, uid: str, pod: Mapping[str, Any]
                 ) -> tuple[InFlight | None, bool, model.PodAssignment | None, Stranger | None]:
        meta = pod.get("metadata") or {}
        ann = meta.get("annotations") or {}
        key = (meta.get("resourceVersion"), ann.get(handoff.ALLOCATED))
        hit = self._memo.get(uid)
        if hit is not None and hit[0] == key and key[0] is not None:
            return hit[1:]
        f = _flight_here(pod, self.node)
        got = (f, handoff.admitted(pod), assigned_pods([pod], self.node).get(uid),
               _stranger(pod, self.node, f))
        self._memo[uid] = (key, *got)
        return got

    def views(self, pods: Iterable[Mapping[str, Any]], now: float, timeout_s: float
              ) -> tuple[list[InFlight], dict[str, model.PodAssignment], list[Stranger]]:
        """(pods in flight now, uid -> assignment of live pods, strangers), as in_flight,
        assigned_pods and strangers would return them."""
        flights, assigned, others, seen = [], {}, [], set()
        for pod in pods:
            uid = str((pod.get("metadata") or {}).get("uid", ""))
            seen.add(uid)
            f, admitted, a, stranger = self._decoded(uid, pod)
            if f is not None and _live(f, admitted, now, timeout_s):
                flights.append(f)
            if a is not None:
                assigned[uid] = a
            if stranger is not None:
                others.append(stranger)
        for uid in set(self._memo) - seen:
            del self._memo[uid]
        return flights, assigned, others


@functools.lru_cache(maxsize=4096)
def _footprint(a: model.PodAssignment) -> dict[str, Any]:
    """footprint() of another pod's assignment; assignments are frozen, so each is computed
    once (every kubelet call checks the new pod against all the node's pods)."""
    return footprint(a)


def _overcommit(pod: InFlight, others: Mapping[str, model.PodAssignment],
                gpus: Mapping[str, model.GPU]) -> str | None:
    """Why this pod's assignment cannot be honoured on this node's GPUs, or None."""
    try:
        mine = footprint(pod.assignment, gpus, pod_key=pod.flight.key)
    except AllocationError as exc:
        return str(exc)
    theirs = []
    for uid, a in others.items():
        if uid != pod.flight.uid:
            with contextlib.suppress(AllocationError):  # not ours to judge here
                theirs.append(_footprint(a))
    for u, use in mine.items():
        mem, cores, slots, excl = use
        for fp in (t[u] for t in theirs if u in t):
            mem, cores, slots, excl = (mem + fp.mem, cores + fp.cores, slots + fp.slots,
                                       excl + fp.excl)
        g = gpus[u]
        if excl and slots > use.slots:
            return f"GPU {u} is held exclusively together with other pods' slices"
        if mem > g.memory_mib or cores > model.EXCLUSIVE_CORES or slots > g.split_count:
            return (f"GPU {u} would hold {mem} MiB / {cores}% / {slots} slices with the node's "
                    f"other pods (has {g.memory_mib} MiB / 100% / {g.split_count})")
    return None


def _describe(pods: Sequence[InFlight]) -> str:
    parts = [f"{p.flight.key} (next: {r.container} {r.resource}={r.quantity})"
             for p in pods for r in p.flight.pending[:1]]
    return ", ".join(parts[:5]) + (", ..." if len(parts) > 5 else "") if parts else "none"


def _names(keys: Sequence[str]) -> str:
    return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def match(pods: Sequence[InFlight], strangers: Sequence[Stranger], resource: str,
          quantity: int) -> tuple[InFlight, handoff.DeviceRequest]:
    """The pod and container an Allocate(resource, quantity) is for, proven: every pod it could
    be for (handoff.claimants, and strangers that ask for as much) is interchangeable with the
    one returned. AllocateError when none matches, AmbiguousAllocate when that is not proven."""
    found = handoff.claimants([p.flight for p in pods], resource, quantity)
    rivals = [s for s in strangers if s.could_ask(resource, quantity)]
    if not found:
        unplaced = (f"; pods on this node ask for it without a gpuslice placement (created "
                    f"past gpuslice's webhook or scheduler): "
                    f"{_names([f'{s.namespace}/{s.name}' for s in rivals])}, refused"
                    if rivals else "")
        raise AllocateError(
            f"no pod in flight on this node asks for {resource}={quantity} now (in flight: "
            f"{_describe(pods)}){unplaced}; check that the pod was scheduled by the gpuslice "
            "scheduler extender (it carries gpuslice.io/assignment and gpuslice.io/bound-at), "
            "and that the node agent can read pods (its logs say if the API server is "
            "unreachable)")
    wrong = handoff.confused(found)
    if wrong or rivals:
        first = found[0]
        why = []
        if wrong:
            why.append(f"{_names([f.key for f in wrong])} bound beside {first.key} with another "
                       "slice (a pod the kubelet admits after inFlightTimeoutSeconds, e.g. "
                       "after a kubelet restart, meets pods bound since)")
        if rivals:
            why.append(f"{_names([f'{s.namespace}/{s.name}' for s in rivals])} asks for it "
                       "without a gpuslice placement (created past gpuslice's webhook or "
                       "scheduler)")
        involved = [(*f.key.split("/", 1), f.uid) for f in found if f in wrong or f is first]
        involved += [(s.namespace, s.name, s.uid) for s in rivals]
        raise AmbiguousAllocate(
            f"Allocate {resource}={quantity} may be for {first.key} or for a pod that must not "
            f"get its slice: {'; '.join(why)}; refused rather than guessed: the pod being "
            "admitted fails (UnexpectedAdmissionError) and its controller creates it again; "
            "a bare pod must be deleted and created again", involved)
    return next(p for p in pods if p.flight is found[0]), found[0].pending[0]


def answer(pods: Sequence[InFlight], others: Mapping[str, model.PodAssignment],
           gpus: Mapping[str, model.GPU], resource: str, device_ids: Sequence[str],
           layout: Layout, given: Mapping[str, Collection[str]] | None = None,
           strangers: Sequence[Stranger] = ()) -> Answer:
    """The answer to one container's Allocate(resource, device_ids) on this node (`match`
    says which container, or why none can be told apart).

    `given`: pod uid -> the `resource` device IDs already answered for that pod's earlier
    containers. The kubelet hands an app container (or a later init container) the devices of
    the pod's init containers first (its device manager's devicesToReuse, without asking
    GetPreferredAllocation for them), so such IDs may lie on the init container's GPUs: they
    name no GPU for this container and are not checked; the container gets its own assigned
    GPUs whatever replica IDs the kubelet counts it under."""
    pod, req = match(pods, strangers, resource, len(device_ids))
    flight = pod.flight
    where = f"pod {flight.key} container {req.container}"
    slices = next((c.slices for c in pod.assignment.containers if c.container == req.container),
                  ())
    if not slices:
        raise AllocateError(f"{where}: its gpuslice.io/assignment gives it no GPU; delete the pod "
                            "so that it is scheduled again")
    uuids = tuple(s.uuid for s in slices)
    unknown = [u for u in uuids if u not in gpus]
    if unknown:
        raise AllocateError(f"{where}: assigned GPUs {', '.join(unknown)} are not GPUs of this "
                            "node; the assignment is stale or forged: delete the pod")
    why = _overcommit(pod, others, gpus)
    if why is not None:
        raise AllocateError(f"{where}: its assignment is not honoured: {why}; delete the pod so "
                            "that the scheduler places it again")
    reused = set(device_ids) & set((given or {}).get(flight.uid, ()))
    fresh = [d for d in device_ids if d not in reused]
    chosen = {device_gpu(d) for d in fresh}
    whole = handoff.REPLICAS_PER_GPU.get(resource, None) is None
    if not chosen <= set(uuids) or (whole and (len(chosen) != len(fresh) or
                                               (not reused and len(chosen) != len(uuids)))):
        raise AllocateError(
            f"{where} is assigned {', '.join(uuids)} but the kubelet chose devices on "
            f"{', '.join(sorted(chosen))}; check that no other device plugin advertises "
            f"{resource} on this node and that the kubelet asks GetPreferredAllocation")
    return _build(flight, req, pod.request, slices, layout)


def _build(flight: handoff.Flight, req: handoff.DeviceRequest, pod: model.PodRequest,
           slices: Sequence[model.GPUSlice], layout: Layout) -> Answer:
    uuids = tuple(s.uuid for s in slices)
    prio = next((int(s.priority) for s in pod.slices if s.container == req.container), 0)
    region = RegionSpec(device_uuids=uuids, limits=tuple(s.memory_mib << 20 for s in slices),
                        sm_limit=max(s.cores for s in slices), compute_mode=layout.compute_mode,
                        priority=prio)
    region_dir = f"{layout.regions_host}/{flight.uid}/{req.container}"
    gang = flight.gang if 0 < region.sm_limit < 100 else ""  # no compute limit: no holds
    gang_dir = gang_host_dir(layout, flight.key.split("/", 1)[0], gang)
    envs, mounts = container_edits(region, region_dir, layout, gang_dir=gang_dir)
    return Answer(pod_key=flight.key, pod_uid=flight.uid, container=req.container, gpus=uuids,
                  envs=envs, mounts=mounts,
                  cdi_devices=tuple(f"nvidia.com/gpu={u}" for u in uuids) if layout.cdi else (),
                  region_host_dir=region_dir, region=region, in_progress=flight.started,
                  gang=gang if gang_dir else "")


def preferred(pods: Sequence[InFlight], resource: str, available: Sequence[str],
              must_include: Sequence[str], size: int) -> list[str]:
    """GetPreferredAllocation: `size` of `available` IDs, on the assigned GPUs of the container
    handoff.match_allocate names (spread evenly over them), else the kubelet's own order. Only
    a preference, so it steers towards that container even where the call is ambiguous now:
    the Allocate that follows proves the match or refuses, and a rival refused meanwhile (a
    stranger, a late pod) must not leave the kubelet's devices on other GPUs than the pod's."""
    got = handoff.match_allocate([p.flight for p in pods], resource, size)
    pick = list(dict.fromkeys(must_include))[:size]
    if got is not None:
        flight, req = got
        pod = next(p for p in pods if p.flight is flight)
        uuids = [s.uuid for c in pod.assignment.containers if c.container == req.container
                 for s in c.slices]
        per_gpu = {u: size // len(uuids) + (i < size % len(uuids)) for i, u in enumerate(uuids)}
        for u in uuids:
            per_gpu[u] -= sum(1 for d in pick if device_gpu(d) == u)
        for d in available:
            if len(pick) >= size:
                break
            u = device_gpu(d)
            if d not in pick and per_gpu.get(u, 0) > 0:
                pick.append(d)
                per_gpu[u] -= 1
    for d in available:  # no match, or not enough on the assigned GPUs: kubelet's order
        if len(pick) >= size:
            break
        if d not in pick:
            pick.append(d)
    return pick

"""PURE: which container a kubelet Allocate call is for, and what that container is given.

Owns: reading the in-flight pods of this node (handoff.flight_of plus the assignment and the
pod's request), the checks an answer must pass, and the answer itself: GPUs, the env and
mounts (container/edits.py, shared with the DRA path's CDI specs), and the region's limits
(`Answer.region`, which the agent writes into the region).
Does not: do I/O (the agent creates the region and patches gpuslice.io/allocated),
or speak gRPC (plugin.py turns an Answer into a ContainerAllocateResponse).
Invariants: a container gets exactly its assigned GPUs and limits, nothing else; the kubelet's
device IDs must lie on those GPUs (except IDs it reuses from the pod's init containers); an
assignment is believed only for a pod bound to THIS node, on GPUs this node has, that does not
over-commit a GPU together with the node's other pods (a hand-written annotation cannot take
another pod's share).
Failure: AllocateError, whose message the kubelet shows in the pod's events: what is wrong and
what to check. Tests: tests/unit/node/test_allocate.py, tests/unit/node/test_init_device_reuse.py,
tests/integration/real_node/test_real_node_pods.py (the real kubelet's reuse)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuslice import codec, dialects, handoff, model
from gpuslice.allocator.usage import AllocationError, footprint
from gpuslice.container.edits import Layout, Mount, container_edits
from gpuslice.errors import CodecError, GpusliceError, RequestError
from gpuslice.shim import RegionSpec

__all__ = ["AllocateError", "Answer", "InFlight", "PodViews", "answer", "assigned_pods",
           "device_gpu", "in_flight", "preferred"]

class AllocateError(GpusliceError):
    """The kubelet's Allocate cannot be answered; the message reaches the pod's events."""


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


def device_gpu(device_id: str) -> str:
    """The GPU UUID of a replica device ID `<GPU-UUID>::<n>`."""
    return device_id.split("::", 1)[0]


def in_flight(pods: Iterable[Mapping[str, Any]], node: str, now: float,
              timeout_s: float) -> list[InFlight]:
    """The pods in flight on `node` (bound to it by spec.nodeName AND by their assignment)."""
    out = []
    for pod in pods:
        f = handoff.flight_of(pod, now, timeout_s)
        spec = pod.get("spec")
        if f is None or f.node != node or not isinstance(spec, Mapping) or \
                spec.get("nodeName") not in (None, node):
            continue
        try:
            ann = pod["metadata"]["annotations"]
            out.append(InFlight(f, codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION]),
                                dialects.parse_pod(pod)))
        except (CodecError, RequestError, KeyError, TypeError):
            continue  # flight_of accepted it, so this cannot happen; never crash on a pod
    return out


def assigned_pods(pods: Iterable[Mapping[str, Any]], node: str) -> dict[str, model.PodAssignment]:
    """uid -> assignment of every live pod on `node` that has one (what holds GPU shares)."""
    out = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        ann = meta.get("annotations") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed") or \
                codec.ASSIGNMENT_ANNOTATION not in ann:
            continue
        try:
            a = codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION])
        except CodecError:
            continue
        if a.node == node:
            out[str(meta.get("uid", ""))] = a
    return out


class PodViews:
    """in_flight and assigned_pods of the node's pods, each pod decoded once per version:
    decoding every pod at every kubelet call is what made admission slow on a busy node
    (benchmarks/node_agent_bench.py). A pod is decoded again when its resourceVersion or its
    allocated annotation changes (the agent's own marks change the latter first)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._memo: dict[str, tuple[tuple[Any, ...], InFlight | None,
                                    model.PodAssignment | None]] = {}

    def _decoded(self, uid: str, pod: Mapping[str, Any]) -> tuple[InFlight | None,
                                                                   model.PodAssignment | None]:
        meta = pod.get("metadata") or {}
        ann = meta.get("annotations") or {}
        key = (meta.get("resourceVersion"), ann.get(handoff.ALLOCATED))
        hit = self._memo.get(uid)
        if hit is not None and hit[0] == key and key[0] is not None:
            return hit[1], hit[2]
        at = handoff.parse_time(ann.get(handoff.BOUND_AT))
        flights = in_flight([pod], self.node, at, 1.0) if at is not None else []
        got = (flights[0] if flights else None, assigned_pods([pod], self.node).get(uid))
        self._memo[uid] = (key, *got)
        return got

    def views(self, pods: Iterable[Mapping[str, Any]], now: float, timeout_s: float
              ) -> tuple[list[InFlight], dict[str, model.PodAssignment]]:
        """(pods in flight now, uid -> assignment of live pods), as in_flight and
        assigned_pods would return them."""
        flights, assigned, seen = [], {}, set()
        for pod in pods:
            uid = str((pod.get("metadata") or {}).get("uid", ""))
            seen.add(uid)
            f, a = self._decoded(uid, pod)
            if f is not None and now - timeout_s < f.flight.bound_at <= now + timeout_s:
                flights.append(f)
            if a is not None:
                assigned[uid] = a
        for uid in set(self._memo) - seen:
            del self._memo[uid]
        return flights, assigned


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


def answer(pods: Sequence[InFlight], others: Mapping[str, model.PodAssignment],
           gpus: Mapping[str, model.GPU], resource: str, device_ids: Sequence[str],
           layout: Layout, given: Mapping[str, Collection[str]] | None = None) -> Answer:
    """The answer to one container's Allocate(resource, device_ids) on this node.

    `given`: pod uid -> the `resource` device IDs already answered for that pod's earlier
    containers. The kubelet hands an app container (or a later init container) the devices of
    the pod's init containers first (its device manager's devicesToReuse, without asking
    GetPreferredAllocation for them), so such IDs may lie on the init container's GPUs: they
    name no GPU for this container and are not checked; the container gets its own assigned
    GPUs whatever replica IDs the kubelet counts it under."""
    quantity = len(device_ids)
    got = handoff.match_allocate([p.flight for p in pods], resource, quantity)
    if got is None:
        raise AllocateError(
            f"no pod in flight on this node asks for {resource}={quantity} now (in flight: "
            f"{_describe(pods)}); check that the pod was scheduled by the gpuslice scheduler "
            "extender (it carries gpuslice.io/assignment and gpuslice.io/bound-at) and bound "
            "recently, and that the node agent can read pods (its logs say if the API server "
            "is unreachable)")
    flight, req = got
    pod = next(p for p in pods if p.flight is flight)
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
    envs, mounts = container_edits(region, region_dir, layout)
    return Answer(pod_key=flight.key, pod_uid=flight.uid, container=req.container, gpus=uuids,
                  envs=envs, mounts=mounts,
                  cdi_devices=tuple(f"nvidia.com/gpu={u}" for u in uuids) if layout.cdi else (),
                  region_host_dir=region_dir, region=region)


def preferred(pods: Sequence[InFlight], resource: str, available: Sequence[str],
              must_include: Sequence[str], size: int) -> list[str]:
    """GetPreferredAllocation: `size` of `available` IDs, on the matched container's assigned
    GPUs when a pod matches (spread evenly over them), else the kubelet's own order."""
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

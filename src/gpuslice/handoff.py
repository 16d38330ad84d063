"""The bind -> Allocate hand-off: how the node agent knows which pod a kubelet Allocate is for.

The kubelet tells a device plugin only device IDs, never the pod (DESIGN §4). The protocol:
  1. The webhook makes every GPU container name its dialect's *device resource* (the one the
     node agent advertises) with the quantity the kubelet will allocate.
  2. At bind the extender writes the pod's assignment and `gpuslice.io/bound-at`; from then
     the pod is *in flight* on its node until the kubelet has admitted it (`admitted`: its
     first status write), the agent has marked each of its GPU containers answered
     (`gpuslice.io/allocated`, written only where that status is late), it ends or is
     deleted, or `timeout_s` passes.
  3. The agent answers an Allocate(resource, quantity) from the pod `match_allocate` picks.
  4. The extender binds a pod to a node only if it cannot be confused with a pod already in
     flight there (`blocking_flight`); the agent checks the outcome against PodResources.
Why the rule is sound: the kubelet admits one pod at a time and allocates its containers in
order, so a pod already in progress owns the next calls, and among pods not started the
first device request tells them apart; pods with equal first requests must be
interchangeable (same shape: requests, slices, priorities and gang), so a swap between them
gives each exactly what it asked for.
Expiry: the extender stops waiting for a flight after `timeout_s`, but a kubelet that was
restarted or cut off may admit that pod later, after a confusable pod was bound beside it. So
the agent keeps every pod the kubelet has not admitted (`admitted`) among the claimants of a
call, however old its bind, and answers only when all claimants are interchangeable
(`claimants`, `confused`); a pod on the node that asks for the resource without an
assignment gpuslice wrote is a claimant it cannot answer for. Otherwise it refuses: a
refused pod fails admission and is created again, it never runs with another pod's slice.
Owns: device-resource names and quantities, the in-flight rule and the Allocate matching.
Does not: read or write the API (scheduler/, node/), or choose GPUs (allocator/).
Tests: tests/unit/test_handoff.py
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from gpuslice import codec, dialects, model
from gpuslice.errors import CodecError, RequestError

__all__ = [
    "ALLOCATED",
    "BOUND_AT",
    "DEVICE_RESOURCES",
    "MANAGED_LABEL",
    "REPLICAS_PER_GPU",
    "DeviceRequest",
    "Flight",
    "admitted",
    "blocking_flight",
    "claimants",
    "confused",
    "device_requests",
    "flight_of",
    "format_time",
    "match_allocate",
    "missing_device_resources",
    "named_quantity",
    "parse_time",
    "request_shape",
]

BOUND_AT = "gpuslice.io/bound-at"
ALLOCATED = "gpuslice.io/allocated"
MANAGED_LABEL = "gpuslice.io/managed"

DEVICE_RESOURCES: dict[str, str] = {
    "HAMi": dialects.GPU,
    "Volcano": dialects.VGPU_NUMBER,
    "GPU Manager": dialects.VCUDA_CORE,
}
"""Dialect -> the resource the node agent advertises and the kubelet allocates devices of."""

REPLICAS_PER_GPU: dict[str, int | None] = {
    dialects.GPU: None,  # split_count replicas per GPU; a container asks for `count`
    dialects.VGPU_NUMBER: None,
    dialects.VCUDA_CORE: 100,  # GPU Manager: 100 per whole GPU, 50 = half of one
}
"""Device resource -> replica devices per healthy GPU (None: the GPU's split count)."""

_TERMINAL = ("Succeeded", "Failed")


class DeviceRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU container's device request as the kubelet sees it."""

    container: str
    kind: model.ContainerKind
    resource: str
    quantity: int


class Flight(msgspec.Struct, frozen=True, kw_only=True):
    """A pod bound to a node whose GPU containers are not all allocated yet."""

    key: str  # namespace/name
    uid: str
    node: str
    bound_at: float  # seconds since the epoch
    created: str  # metadata.creationTimestamp (RFC 3339 sorts as text)
    requests: tuple[DeviceRequest, ...]
    allocated: tuple[str, ...]
    shape: tuple[Any, ...]
    gang: str = ""  # dialects.gang_of: the pod's gpuslice.io/gang ("" none or invalid)

    @property
    def pending(self) -> tuple[DeviceRequest, ...]:
        """Requests not yet answered, in kubelet order."""
        if not self.allocated:  # the common case, read per flight on every filter
            return self.requests
        done = set(self.allocated)
        return tuple(r for r in self.requests if r.container not in done)

    @property
    def started(self) -> bool:
        return bool(self.allocated)

    @property
    def order(self) -> tuple[float, str, str]:
        return (self.bound_at, self.created, self.key)


def format_time(t: float) -> str:
    """Epoch seconds -> RFC 3339 UTC with microseconds (the bound-at annotation)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: object) -> float | None:
    """RFC 3339 UTC (as format_time writes, or the API's second precision) -> epoch seconds."""
    if not isinstance(text, str) or not text.endswith("Z") or len(text) > 40:
        return None
    try:
        t = datetime.fromisoformat(text[:-1] + "+00:00").timestamp()
    except ValueError:
        return None
    return t if math.isfinite(t) else None


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    spec = pod.get("spec")
    out: list[tuple[str, int, Mapping[str, Any]]] = []
    if not isinstance(spec, Mapping):
        return out
    for key in ("initContainers", "containers"):
        got = spec.get(key)
        for i, c in enumerate(got if isinstance(got, list) else ()):
            if isinstance(c, Mapping):
                out.append((key, i, c))
    return out


def named_quantity(c: Mapping[str, Any], resource: str) -> object:
    """The quantity container `c` names for `resource` (limits, else requests), or None."""
    resources = c.get("resources")
    if not isinstance(resources, Mapping):
        return None
    for section in ("limits", "requests"):
        got = resources.get(section)
        if isinstance(got, Mapping) and resource in got:
            return got[resource]
    return None


def _dialect(c: Mapping[str, Any]) -> str | None:
    resources = c.get("resources")
    names: set[str] = set()
    if isinstance(resources, Mapping):
        for section in ("limits", "requests"):
            got = resources.get(section)
            if isinstance(got, Mapping):
                names.update(n for n in got if n in dialects.RESOURCE_NAMES)
    found = {d for d, ns in dialects.DIALECTS.items() if names & set(ns)}
    return found.pop() if len(found) == 1 else None


def _quantity(req: model.SliceRequest, dialect: str) -> int:
    if dialect == "GPU Manager":  # vcuda-core: a share below 100, else 100 per whole GPU
        return req.count * 100 if req.cores >= model.EXCLUSIVE_CORES else req.cores
    return req.count


def _requests_with_place(pod: Mapping[str, Any], defaults: dialects.Defaults | None,
                         parsed: model.PodRequest | None = None
                         ) -> list[tuple[str, int, DeviceRequest, bool]]:
    # RequestError lists every problem of the pod
    if parsed is None:
        parsed = dialects.parse_pod(pod) if defaults is None else dialects.parse_pod(pod, defaults)
    by_name = {s.container: s for s in parsed.slices}
    out, problems = [], []
    for key, i, c in _containers(pod):
        req = by_name.get(c.get("name"))  # type: ignore[arg-type]
        dialect = _dialect(c) if req is not None else None
        if req is None or dialect is None:
            continue
        resource = DEVICE_RESOURCES[dialect]
        quantity = _quantity(req, dialect)
        if quantity <= 0:
            problems.append(
                f'container "{req.container}": {resource}={quantity}: GPU Manager hands out GPUs '
                f"through {resource}; give 1-99 for a share of one GPU or 100 per whole GPU")
            continue
        named = named_quantity(c, resource) is not None
        out.append((key, i, DeviceRequest(container=req.container, kind=req.kind,
                                          resource=resource, quantity=quantity), named))
    if problems:
        raise RequestError(problems)
    return out


def device_requests(pod: Mapping[str, Any], defaults: dialects.Defaults | None = None, *,
                    parsed: model.PodRequest | None = None) -> tuple[DeviceRequest, ...]:
    """Each GPU container's device request in kubelet order (init containers first).

    Raises RequestError (every problem) for a pod the dialects reject or a GPU Manager
    container without a positive vcuda-core. `defaults` matter only for a GPU Manager container
    that names no vcuda-core (its quantity is the default cores); once the webhook has added
    the device resource, every reader gets the same answer whatever its defaults. `parsed`:
    the pod's parse_pod, where the caller has it (with those defaults), is not parsed again."""
    return tuple(r for _, _, r, _ in _requests_with_place(pod, defaults, parsed))


def missing_device_resources(pod: Mapping[str, Any], defaults: dialects.Defaults | None = None,
                             *, parsed: model.PodRequest | None = None
                             ) -> tuple[tuple[str, int, str, int], ...]:
    """(spec list, index, resource, quantity) for GPU containers that do not name their device
    resource yet: what the webhook adds to their limits so the kubelet calls Allocate
    (`parsed` as for device_requests)."""
    return tuple((key, i, r.resource, r.quantity)
                 for key, i, r, named in _requests_with_place(pod, defaults, parsed)
                 if not named)


def _gang(gang: str) -> tuple[Any, ...]:
    # last, and only where a pod names one: the shape of a pod without a gang is as before
    return (("gang", gang),) if gang else ()


def _shape(requests: tuple[DeviceRequest, ...], assignment: model.PodAssignment,
           pod: model.PodRequest, gang: str = "") -> tuple[Any, ...]:
    """What must be equal for two pods to be interchangeable: per GPU container, in order,
    its device request, kind, priority and the memory/cores of each of its slices; then the
    pod's gang (its containers are handed that gang's directory: node/allocate.py)."""
    slices = {c.container: c.slices for c in assignment.containers}
    prio = {s.container: int(s.priority) for s in pod.slices}
    return tuple((r.resource, r.quantity, r.kind.value, prio.get(r.container, 0),
                  tuple((s.memory_mib, s.cores) for s in slices.get(r.container, ())))
                 for r in requests) + _gang(gang)


def request_shape(requests: tuple[DeviceRequest, ...], pod: model.PodRequest,
                  memory_mib: Mapping[str, int], *, gang: str = "") -> tuple[Any, ...]:
    """The shape a pod not yet bound would have, with `memory_mib` per container per GPU (the
    extender resolves percent requests against the node's GPUs first) and its `gang`
    (dialects.gang_of)."""
    by_name = {s.container: s for s in pod.slices}
    return tuple((r.resource, r.quantity, r.kind.value, int(by_name[r.container].priority),
                  ((memory_mib[r.container], by_name[r.container].cores),)
                  * by_name[r.container].count)
                 for r in requests) + _gang(gang)


def flight_of(pod: Mapping[str, Any], now: float, timeout_s: float, *,
              parsed: model.PodRequest | None = None,
              requests: tuple[DeviceRequest, ...] | None = None) -> Flight | None:
    """The pod's Flight if it is in flight on its node now, else None (never raises).
    `parsed`, `requests`: its parse_pod (any defaults: the flight reads only its name, uid and
    priorities) and device_requests, when the caller has them already."""
    meta = pod.get("metadata")
    status = pod.get("status")
    if not isinstance(meta, Mapping) or meta.get("deletionTimestamp"):
        return None
    if isinstance(status, Mapping) and status.get("phase") in _TERMINAL:
        return None
    ann = meta.get("annotations")
    if not isinstance(ann, Mapping) or codec.ASSIGNMENT_ANNOTATION not in ann:
        return None
    bound_at = parse_time(ann.get(BOUND_AT))
    if bound_at is None or not now - timeout_s < bound_at <= now + timeout_s:
        return None
    try:
        assignment = codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION])
        parsed = dialects.parse_pod(pod) if parsed is None else parsed
        requests = device_requests(pod) if requests is None else requests
    except (CodecError, RequestError):
        return None
    raw = ann.get(ALLOCATED)
    allocated = tuple(n for n in raw.split(",") if n) if isinstance(raw, str) else ()
    gang = dialects.gang_of(pod)
    flight = Flight(key=parsed.key, uid=parsed.uid, node=assignment.node, bound_at=bound_at,
                    created=str(meta.get("creationTimestamp") or ""), requests=requests,
                    allocated=allocated, shape=_shape(requests, assignment, parsed, gang),
                    gang=gang)
    return flight if flight.pending else None


def blocking_flight(requests: tuple[DeviceRequest, ...], shape: tuple[Any, ...],
                    flights: Iterable[Flight], *, key: str = "") -> Flight | None:
    """The oldest in-flight pod on the node that a new pod (its requests and shape) could be
    confused with, or None when it may be bound there now. A pod never blocks itself."""
    if not requests:
        return None
    for f in sorted(flights, key=lambda f: f.order):
        if f.key == key or f.started:
            continue  # a pod in progress owns the kubelet's next calls: no confusion
        if f.pending[0].resource == requests[0].resource and \
                f.pending[0].quantity == requests[0].quantity and f.shape != shape:
            return f
    return None


def admitted(pod: Mapping[str, Any]) -> bool:
    """The kubelet has admitted the pod, or never will: it wrote container statuses or a phase
    past Pending (it writes neither before admission; a refused pod becomes Failed). No
    Allocate call can be for such a pod any more."""
    status = pod.get("status")
    if not isinstance(status, Mapping):
        return False
    if status.get("phase") not in (None, "", "Pending"):
        return True
    return any(status.get(k) for k in ("containerStatuses", "initContainerStatuses"))


def claimants(flights: Iterable[Flight], resource: str, quantity: int) -> list[Flight]:
    """Every in-flight pod an Allocate(resource, quantity) on this node could be for, the one
    to answer first: pods in progress whose next container asks for exactly that (the kubelet
    is admitting one of them), or where none is, pods not started whose first container does,
    oldest first. Empty when no pod matches."""
    fits = [f for f in flights if f.pending and f.pending[0].resource == resource
            and f.pending[0].quantity == quantity]
    started = [f for f in fits if f.started]
    return sorted(started or fits, key=lambda f: f.order)


def confused(found: list[Flight]) -> list[Flight]:
    """Claimants (from `claimants`) that an answer from the first would give a slice other
    than their own: those not interchangeable with it (another shape)."""
    return [f for f in found[1:] if f.shape != found[0].shape]


def match_allocate(flights: Iterable[Flight], resource: str,
                   quantity: int) -> tuple[Flight, DeviceRequest] | None:
    """Which pod and container an Allocate(resource, quantity) on this node is for: a pod in
    progress whose next container asks for exactly that, else the oldest pod not started whose
    first container does; None when no in-flight pod matches. The caller refuses where
    `confused` finds claimants of another shape."""
    found = claimants(flights, resource, quantity)
    return (found[0], found[0].pending[0]) if found else None

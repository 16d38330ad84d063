"""After containers start: did the kubelet give each container the GPUs its assignment names?

Owns: reading the kubelet's PodResources v1 List, comparing each allocated container's device
IDs (GPU UUID before `::`) with its assignment (IDs the kubelet reused from the pod's init
containers excepted), and the remedy of DESIGN §4.3: two interchangeable pods (same shape)
that got each other's GPUs are paired (`swaps`); the agent has swap.py swap their assignment
annotations and region directories (journalled, so a half-done swap completes itself), with
an event AllocateSwapped and a metric; any other difference is an event AllocateMismatch and a
metric, once per pod.
Does not: change what a container runs with (its env was fixed at Allocate).
Failure: PodResources unreachable -> logged, retried next round (a journalled swap is
finished even then).
Tests: tests/unit/node/test_verify.py, tests/unit/node/test_init_device_reuse.py,
tests/integration/node/test_agent_with_kubelet.py, tests/integration/real_node/
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from gpuslice import codec, handoff, model
from gpuslice.errors import CodecError, GpusliceError
from gpuslice.node.allocate import device_gpu
from gpuslice.node.proto import podresources_pb2 as pr
from gpuslice.node.proto import podresources_pb2_grpc as pr_grpc

__all__ = ["Mismatch", "compare", "list_pod_resources", "shape_of"]

log = logging.getLogger(__name__)


async def list_pod_resources(socket: str, timeout_s: float = 5) -> dict[tuple[str, str], dict[
        str, dict[str, list[str]]]]:
    """(namespace, pod) -> container -> resource -> device IDs, from the kubelet."""
    async with grpc.aio.insecure_channel(f"unix://{socket}") as ch:
        resp = await pr_grpc.PodResourcesListerStub(ch).List(pr.ListPodResourcesRequest(),
                                                             timeout=timeout_s)
    out: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
    for p in resp.pod_resources:
        for c in p.containers:
            for d in c.devices:
                out.setdefault((p.namespace, p.name), {}).setdefault(c.name, {}).setdefault(
                    d.resource_name, []).extend(d.device_ids)
    return out


def shape_of(pod: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """handoff's shape of a bound pod (what makes two pods interchangeable), in flight or not."""
    meta = dict(pod.get("metadata") or {})
    ann = {k: v for k, v in (meta.get("annotations") or {}).items() if k != handoff.ALLOCATED}
    at = handoff.parse_time(ann.get(handoff.BOUND_AT))
    if at is None:
        return None
    f = handoff.flight_of({**pod, "metadata": {**meta, "annotations": ann}, "status": {}}, at, 1)
    return f.shape if f is not None else None


@dataclass(frozen=True)
class Mismatch:
    pod: Mapping[str, Any]
    container: str
    assigned: frozenset[str]
    actual: frozenset[str]


def compare(pods: Sequence[Mapping[str, Any]], actual: Mapping[tuple[str, str], Mapping[
        str, Mapping[str, list[str]]]], resources: Sequence[str]) -> list[Mismatch]:
    """Containers the kubelet gave devices on other GPUs than their assignment names."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        ann = meta.get("annotations") or {}
        got = actual.get((meta.get("namespace", ""), meta.get("name", "")))
        if got is None or codec.ASSIGNMENT_ANNOTATION not in ann:
            continue
        try:
            a = codec.decode_assignment(ann[codec.ASSIGNMENT_ANNOTATION])
        except CodecError:
            continue
        # The kubelet hands app containers their pod's init containers' device IDs first
        # (devicesToReuse) and lists no (non-sidecar) init container in PodResources: an ID
        # listed for an earlier container too, or, up to as many as the init containers had,
        # one on an init container's GPU, is such a reuse and names no GPU of this container;
        # the container's other devices must lie on its own GPUs.
        requests: tuple[handoff.DeviceRequest, ...] = ()
        if any(c.kind is model.ContainerKind.INIT for c in a.containers):  # else no reuse
            with contextlib.suppress(GpusliceError):
                requests = handoff.device_requests(pod)
        order = {r.container: n for n, r in enumerate(requests)}
        slices = {c.container: c for c in a.containers}
        budget: dict[str, int] = {}
        init_gpus: dict[str, set[str]] = {}
        for r in requests:
            if r.kind is model.ContainerKind.INIT and r.container in slices:
                budget[r.resource] = budget.get(r.resource, 0) + r.quantity
                init_gpus.setdefault(r.resource, set()).update(
                    s.uuid for s in slices[r.container].slices)
        earlier: set[tuple[str, str]] = set()
        for c in sorted(a.containers, key=lambda c: (order.get(c.container, len(order)),
                                                     c.kind is not model.ContainerKind.INIT)):
            held = [(r, i) for r in resources for i in got.get(c.container, {}).get(r, [])]
            if not held:
                continue  # not started yet, or not one of ours
            mine = frozenset(s.uuid for s in c.slices)
            fresh, reused = [], False
            for r, i in held:
                if (r, i) in earlier:
                    reused = True
                elif device_gpu(i) not in mine and device_gpu(i) in init_gpus.get(r, ()) \
                        and budget.get(r, 0) > 0 and c.kind is not model.ContainerKind.INIT:
                    budget[r] -= 1
                    reused = True
                else:
                    fresh.append(i)
            earlier.update(held)
            real = frozenset(device_gpu(i) for i in fresh)
            if real != mine and not (reused and real <= mine):
                out.append(Mismatch(pod, c.container, mine,
                                    frozenset(device_gpu(i) for _, i in held)))
    return out


def swaps(mismatches: Sequence[Mismatch]) -> tuple[list[tuple[Mapping[str, Any], Mapping[
        str, Any]]], list[Mismatch]]:
    """Pairs of interchangeable pods that got each other's GPUs, and the mismatches left."""
    by_pod: dict[str, list[Mismatch]] = {}
    for m in mismatches:
        by_pod.setdefault(str(m.pod["metadata"].get("uid")), []).append(m)

    def gave(ms: list[Mismatch]) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        return {m.container: (m.assigned, m.actual) for m in ms}

    pairs, used = [], set()
    uids = sorted(by_pod)
    for i, a in enumerate(uids):
        for b in uids[i + 1:]:
            if a in used or b in used:
                continue
            ga, gb = gave(by_pod[a]), gave(by_pod[b])
            pa, pb = by_pod[a][0].pod, by_pod[b][0].pod
            if set(ga) == set(gb) and all(ga[c][1] == gb[c][0] and gb[c][1] == ga[c][0]
                                          for c in ga) and \
                    shape_of(pa) is not None and shape_of(pa) == shape_of(pb):
                pairs.append((pa, pb))
                used.update((a, b))
    left = [m for m in mismatches if str(m.pod["metadata"].get("uid")) not in used]
    return pairs, left

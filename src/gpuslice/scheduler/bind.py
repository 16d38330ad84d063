"""The `bind` verb: choose the GPUs, write the assignment, then create the Binding.

Owns: `Binder.bind` — check the pod (same UID, not bound elsewhere), choose GPUs on the node the
scheduler picked (filter.Evaluator, the in-flight rule included), hold them (ExtenderState.assume)
so the next filter sees them at once, write gpuslice.io/assignment + gpuslice.io/bound-at in one
merge patch guarded by the pod's resourceVersion, then POST the pod's binding subresource.
Invariants: never a half-written assignment. On 409 or no answer the pod is read again and the
step retried (a patch or Binding that did land is recognised by its bound-at / nodeName); when
binding fails for good the annotations are removed again and the hold dropped. If the extender
dies between the two writes, the state releases the unbound assignment after the in-flight
timeout (state.py), and the scheduler's retry binds the pod afresh.
Failure: returns the error text for the reply's `Error` (kube-scheduler retries the pod) and
posts a Warning event `BindFailed` on the pod; never raises for API or pod problems.
RBAC: get, patch pods; create pods/binding; create, patch events.
Tests: tests/unit/scheduler/test_bind.py, tests/integration/scheduler/test_bind_conflict_retries.py
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.core import resource as lkr
from lightkube.generic_resource import Generic
from lightkube.resources.core_v1 import Pod, PodBinding

from gpuslice import codec, handoff
from gpuslice.allocator import AllocationError
from gpuslice.errors import RequestError
from gpuslice.kube import errors
from gpuslice.kube.client import dict_view
from gpuslice.kube.events import EventRecorder
from gpuslice.kube.patch import patch_metadata
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator

__all__ = ["BindFailed", "Binder"]

log = logging.getLogger(__name__)

_BINDING = type("PodBinding", (lkr.NamespacedSubResource, Generic),
                {"_api_info": lkr.api_info(PodBinding)})
"""pods/binding with a plain-dict reply: the API answers a Binding with a v1 Status, which
lightkube's typed PodBinding cannot decode (kube.client.dict_view covers objects, not
subresources)."""


class BindFailed(Exception):
    """This bind cannot succeed now; the message says why (it goes into the reply)."""


class Binder:
    def __init__(self, client: AsyncClient, evaluator: Evaluator,
                 recorder: EventRecorder | None = None, *, attempts: int = 3,
                 retry_delay_s: float = 0.05, clock: Callable[[], float] = time.time) -> None:
        self.client, self.ev, self.recorder = client, evaluator, recorder
        self.state = evaluator.state
        self.attempts, self.retry_delay_s, self.clock = attempts, retry_delay_s, clock

    async def bind(self, args: wire.BindingArgs) -> str:
        """Bind the pod; "" on success, else the reason (the reply's Error)."""
        key = f"{args.PodNamespace}/{args.PodName}"
        pod: Mapping[str, Any] | None = None
        try:
            pod = await self._pod(args, fresh=False)
            if _node_name(pod) == args.Node:
                return ""  # a retried bind whose Binding already landed
            if not self.ev.ours(pod):  # another profile's pod: bind it, place nothing
                await self._post_binding(args)
                return ""
            annotations = self._choose(key, pod, args)
            try:
                pod = await self._write(args, pod, annotations)
                await self._post_binding(args)
            except Exception:
                self.state.forget(key)
                await self._roll_back(args, annotations)
                raise
        except (BindFailed, errors.APIError, RequestError) as exc:
            message = f"bind {key} to {args.Node}: {exc}"
            log.warning("%s", message, extra={"pod": key, "node": args.Node})
            if self.recorder is not None and pod is not None:
                self.recorder.emit({"apiVersion": "v1", "kind": "Pod", **pod}, "Warning",
                                   "BindFailed", message)
            return message
        log.info("bound", extra={"pod": key, "node": args.Node})
        return ""

    # -- steps ---------------------------------------------------------------------------
    async def _pod(self, args: wire.BindingArgs, *, fresh: bool) -> Mapping[str, Any]:
        """The pod (unless `fresh`: the watch's copy, else the one the filter got; a stale
        copy only costs a 409 and a read), checked to be the one the scheduler means and not
        bound to another node."""
        key = f"{args.PodNamespace}/{args.PodName}"
        pod = None if fresh else self.state.pod(key)
        if not fresh and (pod is None or _uid(pod) != args.PodUID):
            pod = self.ev.seen(args.PodUID)  # the filter's copy: the watch may lag behind
        if pod is None or _uid(pod) != args.PodUID:
            with errors.translate(f"get pod {key}"):
                pod = dict(await self.client.get(dict_view(Pod), args.PodName,
                                                 namespace=args.PodNamespace))
        if _uid(pod) != args.PodUID:
            raise BindFailed(f"the pod was recreated (uid {_uid(pod)}, the scheduler asked for "
                             f"{args.PodUID}); it will be scheduled again")
        bound = _node_name(pod)
        if bound and bound != args.Node:
            raise BindFailed(f"already bound to node {bound}")
        return pod

    def _choose(self, key: str, pod: Mapping[str, Any], args: wire.BindingArgs) -> dict[str, str]:
        """GPUs on args.Node, held in the state; the annotations to write."""
        v = self.ev.cached(pod, [args.Node])
        placement = v.fits.get(args.Node)
        if placement is None:
            r = v.failed[args.Node]
            raise BindFailed(f"the pod no longer fits there: {r.reason} ({r.detail})")
        annotations = {codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(placement.assignment),
                       handoff.BOUND_AT: handoff.format_time(self.clock())}
        meta = pod.get("metadata") or {}
        flight = handoff.flight_of({**pod, "metadata": {**meta, "annotations": {
            **(meta.get("annotations") or {}), **annotations}}}, 0.0, math.inf)
        try:
            self.state.assume(key, args.PodUID, placement.assignment, flight)
        except AllocationError as exc:
            raise BindFailed(f"the pod no longer fits there: {exc}") from None
        return annotations

    async def _write(self, args: wire.BindingArgs, pod: Mapping[str, Any],
                     annotations: dict[str, str]) -> Mapping[str, Any]:
        """The guarded merge patch; on 409 / no answer read the pod again and retry."""
        for attempt in range(self.attempts):
            try:
                return await patch_metadata(
                    self.client, Pod, args.PodName, namespace=args.PodNamespace,
                    annotations=annotations,
                    resource_version=(pod.get("metadata") or {}).get("resourceVersion"))
            except (errors.Conflict, errors.Unavailable):
                if attempt == self.attempts - 1:
                    raise
            await asyncio.sleep(self.retry_delay_s * 2**attempt)
            pod = await self._pod(args, fresh=True)
            if _ours(pod, annotations):
                return pod  # the write that timed out did land
        raise AssertionError("unreachable")

    async def _post_binding(self, args: wire.BindingArgs) -> None:
        binding = _BINDING({"apiVersion": "v1", "kind": "Binding", "metadata": {
            "name": args.PodName, "namespace": args.PodNamespace, "uid": args.PodUID},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args.Node}})
        for attempt in range(self.attempts):
            try:
                with errors.translate(f"bind pod {args.PodNamespace}/{args.PodName}"):
                    await self.client.create(binding, args.PodName, namespace=args.PodNamespace)
                return
            except (errors.Conflict, errors.Unavailable):
                # a 409 may be our own earlier Binding that answered too late: look
                pod = await self._pod(args, fresh=True)
                if _node_name(pod) == args.Node:
                    return
                if attempt == self.attempts - 1:
                    raise
            await asyncio.sleep(self.retry_delay_s * 2**attempt)

    async def _roll_back(self, args: wire.BindingArgs, annotations: dict[str, str]) -> None:
        """Remove our annotations if they are still the ones we wrote (best effort: if this
        fails too, the state releases the unbound assignment after the in-flight timeout)."""
        key = f"{args.PodNamespace}/{args.PodName}"
        try:
            with errors.translate(f"get pod {key}"):
                pod = dict(await self.client.get(dict_view(Pod), args.PodName,
                                                 namespace=args.PodNamespace))
            if not _ours(pod, annotations) or _node_name(pod):
                return
            await patch_metadata(self.client, Pod, args.PodName, namespace=args.PodNamespace,
                                 annotations=dict.fromkeys(annotations),
                                 resource_version=pod["metadata"].get("resourceVersion"))
        except errors.APIError as exc:
            log.warning("could not remove the assignment of a failed bind (released after the "
                        "in-flight timeout): %s", exc, extra={"pod": key})


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _ours(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> bool:
    have = (pod.get("metadata") or {}).get("annotations") or {}
    return all(have.get(k) == v for k, v in annotations.items())

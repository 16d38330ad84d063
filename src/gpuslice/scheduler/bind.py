"""The `bind` verb: choose the GPUs, then bind the pod with its assignment in one write.

Owns: `Binder.bind` — check the pod (same UID, not bound elsewhere), choose GPUs on the node the
scheduler picked (filter.Evaluator, the in-flight rule included), hold them (ExtenderState.assume)
so the next filter sees them at once, then POST the pod's binding subresource carrying
gpuslice.io/assignment + gpuslice.io/bound-at as the Binding's annotations (through
kube/post.py: a write per pod, lighter than lightkube's): the API server sets spec.nodeName and
merges those annotations in one update, guarded by the pod's UID and the resourceVersion the GPUs
were chosen from (kube-apiserver's BindingREST preconditions).
Invariants: never a half-written assignment (there is one write). On 409 the pod is read again
and, if still unbound, the GPUs chosen afresh; a request without an answer is sent again as it
was, and a Binding that did land is recognised by its nodeName and bound-at. When binding fails
for good the hold is dropped; nothing on the API needs undoing.
Failure: returns the error text for the reply's `Error` (kube-scheduler retries the pod) and
posts a Warning event `BindFailed` on the pod; never raises for API or pod problems. A pod bound
away from the rest of its `gpuslice.io/gang` gets a Warning event `GangSplit`.
RBAC: get pods; create pods/binding; create, patch events.
Tests: tests/integration/scheduler/test_bind_conflict_retries.py (a lost answer, 409s, 5xx)
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from gpuslice import codec, dialects, handoff
from gpuslice.allocator import AllocationError
from gpuslice.errors import RequestError
from gpuslice.kube import errors
from gpuslice.kube.client import FIELD_MANAGER, dict_view
from gpuslice.kube.events import EventRecorder
from gpuslice.kube.post import Poster
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.state import gang_key

__all__ = ["BindFailed", "Binder"]

log = logging.getLogger(__name__)

class BindFailed(Exception):
    """This bind cannot succeed now; the message says why (it goes into the reply)."""


class Binder:
    def __init__(self, client: AsyncClient, evaluator: Evaluator,
                 recorder: EventRecorder | None = None, *, attempts: int = 3,
                 retry_delay_s: float = 0.05, clock: Callable[[], float] = time.time,
                 gang_split: Callable[[], object] = lambda: None) -> None:
        self.client, self.ev, self.recorder = client, evaluator, recorder
        self.gang_split = gang_split  # counts the GangSplit events (metrics.py)
        self.poster = Poster.from_client(client, field_manager=FIELD_MANAGER)
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
                await self._post_binding(args, pod, {})
                return ""
            try:
                await self._bind_placed(key, args, pod)
            except BaseException:
                self.state.forget(key)  # what is bound shows in the watch and is held then
                raise
            self._split_gang(pod, args.Node)
        except (BindFailed, errors.APIError, RequestError) as exc:
            message = f"bind {key} to {args.Node}: {exc}"
            log.warning("%s", message, extra={"pod": key, "node": args.Node})
            if self.recorder is not None and pod is not None:
                self.recorder.emit({"apiVersion": "v1", "kind": "Pod", **pod}, "Warning",
                                   "BindFailed", message)
            return message
        log.debug("bound", extra={"pod": key, "node": args.Node})
        return ""

    def _split_gang(self, pod: Mapping[str, Any], node: str) -> None:
        """A Warning event `GangSplit` when the pod is its gang's first on `node` and the gang
        has pods on other nodes (the filter keeps a gang together where it fits): compute
        budgets couple only on a node."""
        g = gang_key(pod)
        held = self.state.gang_held(*g) if g else {}
        others = sorted(set(held) - {node}) if held.get(node, 0) <= 1 else []
        if others:
            self.gang_split()
        if others and self.recorder is not None:
            self.recorder.emit({"apiVersion": "v1", "kind": "Pod", **pod}, "Warning", "GangSplit",
                               f"{dialects.GANG_ANNOTATION} {g[1]} has pods on node "
                               f"{', '.join(others)} too, and none of those could take this "
                               f"one: the compute limits of a gang's pods hold them together only "
                               f"on one node, so its ranks may wait on each other "
                               f"(docs/compute.md); make room on one node for the whole gang")

    # -- steps ---------------------------------------------------------------------------
    async def _bind_placed(self, key: str, args: wire.BindingArgs,
                           pod: Mapping[str, Any]) -> None:
        """Choose, hold and bind. After a 409 (or no answer however often it was sent) read
        the pod: bound there already (our own Binding whose answer was lost) is success;
        unbound after a 409 means it changed, so choose again from the fresh copy."""
        for attempt in range(self.attempts):
            annotations = self._choose(key, pod, args)
            try:
                await self._post_binding(args, pod, annotations)
                return
            except (errors.Conflict, errors.Unavailable) as exc:
                failure = exc
            pod = await self._pod(args, fresh=True)  # BindFailed if bound elsewhere
            if _node_name(pod) == args.Node:
                if not _ours(pod, annotations):  # bound there by someone else: their GPUs
                    self.state.forget(key)
                return
            self.state.forget(key)  # chosen again from the fresh pod, not counted twice
            if isinstance(failure, errors.Unavailable) or attempt == self.attempts - 1:
                raise failure
            await asyncio.sleep(self.retry_delay_s * 2**attempt)
        raise AssertionError("unreachable")

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
            r = v.refusal(args.Node)
            raise BindFailed(f"the pod no longer fits there: {r.reason} ({r.detail})")
        annotations = {codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(placement.assignment),
                       handoff.BOUND_AT: handoff.format_time(self.clock())}
        meta = pod.get("metadata") or {}
        flight = handoff.flight_of({**pod, "metadata": {**meta, "annotations": {
            **(meta.get("annotations") or {}), **annotations}}}, 0.0, math.inf,
            parsed=v.pod, requests=self.ev.device_requests(pod))
        try:
            self.state.assume(key, args.PodUID, placement.assignment, flight)
        except AllocationError as exc:
            raise BindFailed(f"the pod no longer fits there: {exc}") from None
        return annotations

    async def _post_binding(self, args: wire.BindingArgs, pod: Mapping[str, Any],
                            annotations: dict[str, str]) -> None:
        """POST the Binding (with `annotations`, guarded by the pod's UID and the version they
        were chosen from); one with no answer is sent again as it was. Conflict: the pod
        changed or is bound; a 409 after a request without an answer may be that request's
        own success, which the caller's fresh read recognises."""
        metadata: dict[str, Any] = {"name": args.PodName, "namespace": args.PodNamespace,
                                    "uid": args.PodUID}
        if annotations:
            metadata["annotations"] = annotations
            version = (pod.get("metadata") or {}).get("resourceVersion")
            if version:
                metadata["resourceVersion"] = version
        body = msgspec.json.encode({
            "apiVersion": "v1", "kind": "Binding", "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": args.Node}})
        path = f"/api/v1/namespaces/{args.PodNamespace}/pods/{args.PodName}/binding"
        for attempt in range(self.attempts):
            try:
                await self.poster.post(path, body, f"bind pod {args.PodNamespace}/{args.PodName}")
                return
            except errors.Unavailable:
                if attempt == self.attempts - 1:
                    raise
            await asyncio.sleep(self.retry_delay_s * 2**attempt)


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _ours(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> bool:
    have = (pod.get("metadata") or {}).get("annotations") or {}
    return all(have.get(k) == v for k, v in annotations.items())

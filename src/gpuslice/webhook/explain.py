"""A small controller in the webhook: why a pod whose GPU request became DRA claims does not
fit, posted as a Warning event `NoGPUFit` on the pod (as the extender does on its path).

Owns: a watch of the pods the webhook translated (label dra.TRANSLATED), noticing those
kube-scheduler marks Unschedulable, and, at most every `interval_s`, one list of the cluster's
ResourceClaims to explain them all from that snapshot (dra/fit.explain, with the slices of
dra_cluster.SliceInventory); each unschedulable episode (the condition's message) of a pod is
explained once.
Does not: place or change pods. The request it explains is read back from the pod's
dra.REQUESTED annotation and gpuslice's filter annotations; a tenant who edits them at
creation only misleads the explanation of their own pod (nothing else reads them).
RBAC: list, watch pods; list resourceclaims; create, patch events.
Tests: tests/integration/dra/test_dialects_through_dra.py (the event on the real control plane)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from lightkube import ALL_NS, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from gpuslice import dialects, model
from gpuslice.dra import fit
from gpuslice.errors import RequestError
from gpuslice.kube import errors
from gpuslice.kube.cache import Change, Informer
from gpuslice.kube.client import dict_view
from gpuslice.kube.events import EventRecorder
from gpuslice.webhook import dra
from gpuslice.webhook.dra_cluster import SliceInventory

__all__ = ["REASON", "Explainer", "request_of", "unschedulable"]

log = logging.getLogger(__name__)
REASON = "NoGPUFit"


def unschedulable(pod: Mapping[str, Any]) -> str | None:
    """kube-scheduler's message when it found the pod no room, else None."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and \
                c.get("reason") == "Unschedulable":
            return str(c.get("message") or "")
    return None


def request_of(pod: Mapping[str, Any], defaults: dialects.Defaults) -> model.PodRequest | None:
    """The request the webhook translated, from the pod's REQUESTED annotation (None: absent
    or unreadable)."""
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    try:
        shown = json.loads(ann.get(dra.REQUESTED, ""))
        containers = [{"name": c, "resources": {"limits": r}} for c, r in shown.items()]
        return dialects.parse_pod({"metadata": {**meta, "annotations": ann},
                                   "spec": {"containers": containers}}, defaults)
    except (ValueError, AttributeError, RequestError):
        return None


class Explainer:
    def __init__(self, client: AsyncClient, inventory: SliceInventory, *,
                 defaults: dialects.Defaults | None = None,
                 interval_s: float = 2.0) -> None:
        self.client, self.inventory = client, inventory
        self.defaults, self.interval_s = defaults or dialects.Defaults(), interval_s
        self.events = EventRecorder(client, "gpuslice-webhook")
        self._pending: dict[str, tuple[dict[str, Any], str]] = {}
        self._done: dict[str, str] = {}  # pod uid -> the message last explained
        self._wake = asyncio.Event()
        self.pods: Informer[dict[str, Any]] = Informer(
            client, dict_view(Pod), labels={dra.TRANSLATED: "true"}, handler=self._changed,
            name="translated pods")

    def _changed(self, change: Change[dict[str, Any]]) -> None:
        pod = change.new
        if pod is None:
            uid = str(((change.old or {}).get("metadata") or {}).get("uid", ""))
            self._done.pop(uid, None)
            self._pending.pop(uid, None)
            return
        uid = str(pod["metadata"].get("uid", ""))
        why = unschedulable(pod)
        if why is None or self._done.get(uid) == why:
            return
        self._pending[uid] = (pod, why)
        self._wake.set()

    async def run(self) -> None:
        watching = asyncio.create_task(self.pods.run())
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                try:
                    await self.explain_pending()
                except errors.APIError as exc:
                    log.warning("cannot explain unschedulable DRA pods now: %s", exc)
                await asyncio.sleep(self.interval_s)
        finally:
            self.pods.stop()
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching

    async def explain_pending(self) -> int:
        """Explain every pod noticed since the last round; how many events were posted."""
        pending, self._pending = self._pending, {}
        if not pending:
            return 0
        with errors.translate("list resourceclaims"):
            claims = [dict(c) async for c in self.client.list(dict_view(ResourceClaim),
                                                             namespace=ALL_NS)]
        devs = fit.devices(self.inventory.informer.store.values())
        use = fit.used(claims)
        posted = 0
        for uid, (pod, why) in pending.items():
            request = request_of(pod, self.defaults)
            if request is None or not request.slices:
                continue
            self._done[uid] = why
            await self.events.record(pod, "Warning", REASON, fit.explain(request, devs, use))
            posted += 1
        return posted

"""The node agent's view of the API server: the pods on this node, and writes that wait.

Owns: the pod store (every pod with `spec.nodeName=<node>`, managed or not: a pod that skipped
gpuslice may be what the kubelet admits (node/allocate.py, Stranger); kept by a
kube.cache.Informer, listed again before a pod's first Allocate and every `pod_resync_s`),
the record of containers answered (journalled to `<state-dir>/answered.json`, read back at
start, kept until the API shows them marked or the pod is gone), and a queue of writes (the
node's inventory annotation; `gpuslice.io/allocated` marks, each written only where the
kubelet has not shown the pod admitted `mark_after_s` after the answer: its status already
tells every reader that no Allocate can be for the pod any more, so the common case costs the
API server no write) flushed with back-off.
Does not: decide anything, or make the kubelet wait on the API (writes are queued).
Invariants: `pods()` shows answered containers in `gpuslice.io/allocated` at once, so two
Allocate calls never get the same container, whether or not a mark was or will be written,
even across an agent restart; the watch and the lists feed one store where a pod's version
only moves forward (kube.cache.newer); a pod deleted meanwhile drops its queued write.
On failure: `reachable` turns False, the store keeps its last content, writes stay queued and
are retried every `retry_s` (doubling to 30 s) until the API server answers again.
Tests: tests/integration/node/test_agent_with_kubelet.py, tests/unit/node/test_cluster_refresh.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from gpuslice import handoff
from gpuslice.aio import wait_set
from gpuslice.files import write_atomic
from gpuslice.kube import errors
from gpuslice.kube.cache import Change, Informer, newer
from gpuslice.kube.client import dict_view
from gpuslice.kube.events import EventRecorder
from gpuslice.kube.patch import patch_metadata, update_metadata

__all__ = ["Cluster"]

log = logging.getLogger(__name__)
MAX_RETRY_S = 30.0


def _merged(pod: Mapping[str, Any], answered: list[str]) -> dict[str, Any]:
    """The pod with `answered` containers added to its allocated annotation."""
    meta = dict(pod.get("metadata") or {})
    ann = dict(meta.get("annotations") or {})
    have = [c for c in str(ann.get(handoff.ALLOCATED, "")).split(",") if c]
    ann[handoff.ALLOCATED] = ",".join(have + [c for c in answered if c not in have])
    meta["annotations"] = ann
    return {**pod, "metadata": meta}


class _Answered(NamedTuple):
    namespace: str
    name: str
    containers: list[str]
    mark_at: float  # epoch seconds: write the mark then unless the kubelet has admitted the pod


class Cluster:
    def __init__(self, client: AsyncClient, node: str, *, pod_resync_s: float = 30.0,
                 retry_s: float = 1.0, mark_after_s: float = 2.0,
                 journal: Path | None = None, on_mark: Callable[[], None] = lambda: None
                 ) -> None:
        self.client = client
        self.node = node
        self.pod_resync_s = pod_resync_s
        self.retry_s = retry_s
        self.mark_after_s, self.on_mark = mark_after_s, on_mark
        self.events = EventRecorder(client, "gpuslice-node-agent")
        self.reachable = False
        self._pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self._answered: dict[str, _Answered] = {}  # uid -> containers answered
        self._journal = journal
        self._load()
        self._node_annotations: dict[str, str] = {}  # queued for the Node
        self._wake = asyncio.Event()
        self._refresh_lock = asyncio.Lock()
        self.last_list = 0.0
        self.informer: Informer[dict[str, Any]] = Informer(
            client, Pod, fields={"spec.nodeName": node}, handler=self._on_change,
            name="pods on this node")

    # ---- reading
    def pods(self) -> list[dict[str, Any]]:
        out = []
        for uid, pod in self._pods.items():
            ans = self._answered.get(uid)
            out.append(_merged(pod, ans.containers) if ans else pod)
        return out

    def _put(self, pod: dict[str, Any]) -> None:
        uid = str(pod["metadata"].get("uid", ""))
        held = self._pods.get(uid)
        if held is None or newer(str(pod["metadata"].get("resourceVersion") or ""),
                                 str(held["metadata"].get("resourceVersion") or "")):
            self._pods[uid] = pod
        have = str((self._pods[uid]["metadata"].get("annotations") or {})
                   .get(handoff.ALLOCATED, "")).split(",")
        answered = self._answered.get(uid)
        if answered is not None and all(n in have for n in answered.containers):
            del self._answered[uid]  # the API has it now
            self._save()

    def _gone(self, uid: str) -> None:
        self._pods.pop(uid, None)
        if self._answered.pop(uid, None) is not None:
            self._save()

    def _on_change(self, change: Change[dict[str, Any]]) -> None:
        if change.new is not None:
            self._put(change.new)
        elif change.old is not None:
            self._gone(str(change.old["metadata"].get("uid", "")))

    async def refresh(self) -> bool:
        """List this node's pods now; False (store kept) if the API does not answer."""
        async with self._refresh_lock:
            # only pods held before the list began can be gone for not being in it: one the
            # watch adds meanwhile is newer than the list (dropping it would hide from
            # Allocate a pod the kubelet may be admitting)
            before = set(self._pods)
            try:
                with errors.translate(f"list pods on node {self.node}"):
                    got = [dict(p) async for p in self.client.list(
                        dict_view(Pod), namespace="*", fields={"spec.nodeName": self.node})]
            except errors.APIError as exc:
                self._down(exc)
                return False
        listed = {str(p["metadata"].get("uid", "")) for p in got}
        for uid in (before & set(self._pods)) - listed:
            self._gone(uid)
        for uid in set(self._answered) - listed - set(self._pods):
            self._gone(uid)  # answered before a restart, deleted meanwhile
        for p in got:
            self._put(p)
        self._up()
        self.last_list = time.time()
        return True

    def _down(self, exc: Exception) -> None:
        if self.reachable:
            log.warning("API server unreachable: %s; serving the kubelet from the last view and "
                        "queueing writes", exc)
        self.reachable = False

    def _up(self) -> None:
        if not self.reachable:
            log.info("API server reachable")
        self.reachable = True

    # ---- writing (queued)
    def answered(self, namespace: str, name: str, uid: str, container: str) -> None:
        """An Allocate was answered for this container: record it now (in the journal too, so
        an agent restarted meanwhile never answers that container again); mark the pod in
        `mark_after_s` unless the kubelet shows it admitted first."""
        names = self._answered.setdefault(uid, _Answered(
            namespace, name, [], time.time() + self.mark_after_s)).containers
        if container not in names:
            names.append(container)
        self._save()
        self._wake.set()

    def _load(self) -> None:
        if self._journal is None or not self._journal.exists():
            return
        try:
            data = json.loads(self._journal.read_text())
            # [ns, name, containers, mark_at]; journals before mark_at had three (mark at once)
            self._answered = {str(uid): _Answered(str(v[0]), str(v[1]), [str(c) for c in v[2]],
                                                  float(v[3]) if len(v) > 3 else 0.0)
                              for uid, v in data.items()}
        except (OSError, ValueError, TypeError, LookupError) as exc:
            log.warning("journal %s unreadable (%s); starting without it", self._journal, exc)

    def _save(self) -> None:
        if self._journal is None:
            return
        # not durable: written at every answer, and a machine that lost power restarts its
        # pods (the kubelet allocates them again)
        write_atomic(self._journal, json.dumps({u: list(v) for u, v in self._answered.items()})
                     .encode(), 0o600, durable=False)

    def set_node_annotation(self, key: str, value: str) -> None:
        self._node_annotations[key] = value
        self._wake.set()

    def _marks(self, now: float) -> tuple[list[str], float | None]:
        """(uids whose mark is due now, when the next one falls due). A pod the kubelet has
        admitted needs none: its status ends the flight for every reader (handoff.admitted)."""
        due, later = [], None
        for uid, a in self._answered.items():
            pod = self._pods.get(uid)
            if pod is not None and handoff.admitted(pod):
                continue
            if a.mark_at <= now:
                due.append(uid)
            else:
                later = a.mark_at if later is None else min(later, a.mark_at)
        return due, later

    @property
    def queued(self) -> int:
        """Writes waiting: the Node's annotations and the marks due now."""
        return len(self._node_annotations) + len(self._marks(time.time())[0])

    async def _flush(self) -> None:
        """Write what is queued; raises APIError (Unavailable...) to make the caller back off."""
        if self._node_annotations:
            ann = dict(self._node_annotations)
            await patch_metadata(self.client, Node, self.node, annotations=ann)
            for k, v in ann.items():
                if self._node_annotations.get(k) == v:
                    del self._node_annotations[k]
        for uid in self._marks(time.time())[0]:
            if uid not in self._answered:
                continue  # the pod went while an earlier mark was written
            ns, name, names, _ = self._answered[uid]
            sent = list(names)

            def change(obj: Mapping[str, Any], sent: list[str] = sent, uid: str = uid) -> Any:
                if obj.get("metadata", {}).get("uid") != uid:
                    return None  # a new pod with the same name: not ours to mark
                merged = _merged(obj, sent)["metadata"]["annotations"][handoff.ALLOCATED]
                if merged == obj["metadata"].get("annotations", {}).get(handoff.ALLOCATED):
                    return None
                return {"annotations": {handoff.ALLOCATED: merged}}

            try:
                got = await update_metadata(self.client, Pod, name, change, namespace=ns)
            except errors.NotFound:
                got = None
            if got is not None:
                self.on_mark()
                self._put(got)  # drops the entry (and saves) once the annotation holds every name
            elif uid in self._answered and self._answered[uid].containers == sent:
                del self._answered[uid]  # pod gone or replaced, or the API had it already
                self._save()

    async def run(self) -> None:
        """Watch pods, keep the queue flushed and list again now and then, until cancelled."""
        watch = asyncio.create_task(self.informer.run())
        try:
            await self._writes()
        finally:
            self.informer.stop()
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch

    async def _writes(self) -> None:
        delay = self.retry_s
        next_list = 0.0
        while True:
            if time.monotonic() >= next_list:
                await self.refresh()
                next_list = time.monotonic() + self.pod_resync_s
            try:
                await self._flush()
                self._up()
                delay = self.retry_s
            except errors.APIError as exc:
                self._down(exc)
                delay = min(delay * 2, MAX_RETRY_S)
            self._wake.clear()
            now = time.time()
            due, later = self._marks(now)
            timeout = delay if self._node_annotations or due else next_list - time.monotonic()
            if later is not None:
                timeout = min(timeout, later - now)
            await wait_set(self._wake, max(0.0, timeout))

    # ---- events (best effort)
    def warn(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.events.emit(obj, "Warning", reason, message)

    def note(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        self.events.emit(obj, "Normal", reason, message)

    def node_ref(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node}}

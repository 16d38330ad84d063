"""Every-node filter results and scores kept per pod shape, brought up to date node by node.

Owns: `Reuse` (per pod shape and policy, the last every-node filter's fits, failed and scores,
plus the log of node changes that says which nodes to decide again) and `shape_of`.
Does not: decide fit or score (fit.py and score.py do, for the changed nodes only) or track
usage (state.py calls `changed` on every node it rebuilds or removes).
Invariants: a refreshed entry equals filtering and scoring every node afresh: the same nodes
fit, in node-name order, with the same placements, reasons and scores (property-tested). Pods
of one shape differ only in namespace, name and uid, which no decision reads. Past a tenth
of the nodes changed (or a log overflow), an entry is recomputed whole instead of patched
(deciding one node by name costs about ten times its share of the column pass).
Tests: tests/unit/allocator/test_reuse_properties.py
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import msgspec

from gpuslice.allocator import fit, score
from gpuslice.allocator.fit import FilterResult, Placement
from gpuslice.allocator.policies import NodePolicy
from gpuslice.allocator.reasons import Rejection
from gpuslice.allocator.usage import NodeSnapshot
from gpuslice.model import PodRequest

ENTRIES = 64
"""Shapes kept (the oldest is dropped first); kube-scheduler asks for a few shapes over and over.
About 0.5 MiB a shape at 5,000 nodes (measured: 28 shapes, +13 MiB RSS), so 32 MiB at most."""
_LOG = 1 << 16  # node changes remembered; entries older than the log are recomputed whole


def shape_of(pod: PodRequest) -> PodRequest:
    """The pod with its identity blanked: what placement decisions read."""
    if pod.namespace or pod.name or pod.uid:
        return msgspec.structs.replace(pod, namespace="", name="", uid="")
    return pod


class _Entry:
    __slots__ = ("ctx", "failed", "fits", "node", "pos", "scores")

    def __init__(self, ctx: fit._Ctx, node: NodePolicy, fr: FilterResult, pos: int) -> None:
        self.ctx, self.node, self.pos = ctx, node, pos
        self.fits: dict[str, Placement] = fr.fits
        self.failed: dict[str, Rejection] = fr.failed
        self.scores: dict[str, int] | None = None  # computed on first use (Reuse._scored)


class Reuse:
    """The entries and the change log of one ClusterState."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry] = {}
        self._log: list[str] = []  # names of changed nodes, oldest first
        self._base = 0  # log position of _log[0]

    def changed(self, name: str) -> None:
        """Node `name` was rebuilt, added or removed."""
        if not self._entries:
            return  # nobody to bring up to date: positions only matter relative to entries
        if len(self._log) >= _LOG:
            self._base += len(self._log)
            self._log = []
        self._log.append(name)

    def filter(self, key: Hashable, ctx: fit._Ctx, node: NodePolicy,
               snaps: Mapping[str, NodeSnapshot], bulk: Callable[[fit._Ctx], FilterResult]
               ) -> FilterResult:
        """Every node's result for the shape `key` (fresh dicts: the caller's to change);
        `bulk(ctx)` filters every node afresh, when there is no entry or it is too old."""
        e = self._entries.get(key)
        if e is None:
            if len(self._entries) >= ENTRIES:
                del self._entries[next(iter(self._entries))]
            e = self._entries[key] = _Entry(ctx, node, bulk(ctx), self._pos())
        else:
            self._refresh(e, snaps, bulk)
        pos = e.pos

        def scores() -> Mapping[str, int] | None:  # FilterResult.scores
            return self._scored(e) if e.pos == pos else None

        return FilterResult(dict(e.fits), dict(e.failed), scores)

    @staticmethod
    def _scored(e: _Entry) -> dict[str, int]:
        if e.scores is None:
            e.scores = score.prioritize(e.node, e.fits)
        return e.scores

    def _pos(self) -> int:
        return self._base + len(self._log)

    def _refresh(self, e: _Entry, snaps: Mapping[str, NodeSnapshot],
                 bulk: Callable[[fit._Ctx], FilterResult]) -> None:
        """Decide again the nodes changed since `e` was last brought up to date."""
        start = e.pos - self._base
        if start == len(self._log):
            return
        if start < 0 or (len(self._log) - start) * 10 > max(len(snaps), 64):
            fr = bulk(e.ctx)
            e.fits, e.failed, e.scores = fr.fits, fr.failed, None
            e.pos = self._pos()
            return
        changed = sorted(set(self._log[start:]))
        fr = fit.filter_nodes(snaps, [n for n in changed if n in snaps], e.ctx)
        fits, failed, scores = e.fits, e.failed, e.scores
        inserted = False
        for n in changed:
            pl = fr.fits.get(n)
            if pl is None:
                fits.pop(n, None)
                r = fr.failed.get(n)  # None: the node is gone
                if r is None:
                    failed.pop(n, None)
                else:
                    failed[n] = r
            else:
                failed.pop(n, None)
                inserted = inserted or n not in fits
                fits[n] = pl  # an existing key keeps its place
            if scores is not None:
                scores.pop(n, None)
        if inserted:  # keep node-name order, as filtering every node gives
            e.fits = {k: fits[k] for k in sorted(fits)}
        if scores is not None and fr.fits:
            scores.update(score.prioritize(e.node, fr.fits))
        e.pos = self._pos()

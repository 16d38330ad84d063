"""The cluster as the allocator sees it: node inventories plus committed pod assignments.

Owns: `ClusterState` (add/remove nodes, filter/prioritize/schedule, room for a gang's pods,
assign/release, usage).
Does not: talk to Kubernetes (the extender rebuilds a ClusterState from annotations alone,
so `assign` accepts any valid assignment, whichever policy chose it).
Invariants: per-GPU usage == sum of the footprints of the committed pods (usage.py's lifecycle
rule); no GPU is over-committed in memory, cores or slots (assign checks the usage itself);
a node's NodeSnapshot is rebuilt (O(GPUs)) and its NodeTable row updated once before the first
read after any change to it (_fresh: a relist of 40,000 pods rebuilds each node once, not once
per pod; the table is rebuilt lazily when the node set changes), so a filter over all nodes
reads summary columns first;
prepared pods (fit.prepare, pure) are reused per shape, at most _PREPARED kept; with `reuse`
(the default) every-node filter results and their scores (FilterResult.scores) are kept per
shape and only the nodes changed since are decided again (reuse.py).
Failure: `assign` raises AllocationError listing every problem and leaves the state as it was.
Health is not checked on assign (a GPU may turn unhealthy under running pods).
MIG nodes (any GPU with a `mig` block) live in `mig.MigNodes` instead: a MIG pod is placed
only there, a shared-slice pod never there; each side refuses the other's nodes by reason.
Tests: tests/unit/allocator/test_state.py, test_fit_properties.py, test_search_properties.py,
test_reuse_properties.py
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gpuslice.allocator import fit, score, search
from gpuslice.allocator.fit import FilterResult, Placement
from gpuslice.allocator.mig import MigNodes, cores_of, is_mig_node
from gpuslice.allocator.policies import Policy
from gpuslice.allocator.reasons import MIG_NODE, NO_MIG, RESOLVABLE, Rejection, no_inventory
from gpuslice.allocator.reuse import Reuse, shape_of
from gpuslice.allocator.usage import (
    AllocationError,
    GPUUsage,
    NodeSnapshot,
    NodeTable,
    Use,
    add_use,
    footprint,
    sum_use,
)
from gpuslice.model import EXCLUSIVE_CORES, NodeInventory, PodAssignment, PodRequest

_PREPARED = 256
"""Prepared pods (validated plan + GPU policy + Gate; pure values) kept for re-filtering."""


class ClusterState:
    """Mutable cluster view; every read goes through immutable per-node snapshots."""

    def __init__(self, *, reuse: bool = True) -> None:
        self._reuse = Reuse() if reuse else None
        self._inv: dict[str, NodeInventory] = {}
        self._use: dict[str, list[Use]] = {}
        self._snap: dict[str, NodeSnapshot] = {}
        self._stale: set[str] = set()  # nodes whose usage changed since their snapshot
        self._pods: dict[str, PodAssignment] = {}
        self._fp: dict[str, dict[str, Use]] = {}
        self._node_pods: dict[str, set[str]] = {}
        self._names: list[str] | None = []
        self._table: NodeTable | None = None
        self._prepared: dict[tuple[PodRequest, Policy, int], fit._Ctx] = {}
        self._mig = MigNodes()

    # -- nodes ---------------------------------------------------------------------------
    def add_node(self, inv: NodeInventory) -> list[str]:
        """Add or replace a node. Pods on it whose GPUs all still exist are kept (usage
        recomputed against the new GPUs, e.g. a health change); the others are dropped and
        their keys returned, sorted."""
        uuids = [g.uuid for g in inv.gpus]
        if len(set(uuids)) != len(uuids):
            dup = sorted({u for u in uuids if uuids.count(u) > 1})
            raise AllocationError(f"node {inv.node!r}: GPU UUIDs {dup} listed twice; each GPU "
                                  "must appear once in the inventory")
        if is_mig_node(inv):  # a node switched modes drops the other side's pods
            dropped = self._remove_shared(inv.node) if inv.node in self._inv else []
            return sorted(dropped + self._mig.add_node(inv))
        lost = self._mig.remove_node(inv.node) if inv.node in self._mig else []
        keep = set(uuids)
        dropped = sorted(k for k in self._node_pods.get(inv.node, ())
                         if not keep.issuperset(self._fp[k]))
        for k in dropped:
            self._forget(k)
        if inv.node not in self._inv:
            self._names = self._table = None
        self._inv[inv.node] = inv
        pods = self._node_pods.setdefault(inv.node, set())
        self._use[inv.node] = sum_use(inv.gpus, (self._fp[k] for k in sorted(pods)))
        self._rebuild(inv.node)
        return sorted(dropped + lost)

    def remove_node(self, name: str) -> list[str]:
        """Forget a node and the pods on it; returns their keys, sorted."""
        if name in self._mig:
            return self._mig.remove_node(name)
        return self._remove_shared(name)

    def _remove_shared(self, name: str) -> list[str]:
        dropped = sorted(self._node_pods.pop(name, ()))
        for k in dropped:
            del self._pods[k], self._fp[k]
        if self._inv.pop(name, None) is not None:
            self._names = self._table = None
            if self._reuse is not None:
                self._reuse.changed(name)
        self._use.pop(name, None)
        self._snap.pop(name, None)
        self._stale.discard(name)
        return dropped

    def nodes(self) -> list[str]:
        """Every node, shared-slice and MIG, sorted."""
        if self._names is None:
            self._names = sorted(self._inv)
        return sorted(self._names + self._mig.names()) if self._mig.names() else \
            list(self._names)

    def inventory(self, name: str) -> NodeInventory | None:
        if name in self._mig:
            return self._mig.inventory(name)
        return self._inv.get(name)

    def snapshot(self, name: str) -> NodeSnapshot:
        """The node's current immutable snapshot (KeyError if unknown)."""
        self._fresh()
        return self._snap[name]

    def _fresh(self) -> None:
        """Rebuild the snapshots of the nodes changed since they were last read."""
        while self._stale:
            self._rebuild(self._stale.pop())

    def _rebuild(self, name: str) -> None:
        self._stale.discard(name)
        snap = self._snap[name] = NodeSnapshot(self._inv[name], self._use[name])
        if self._table is not None and not self._table.update(snap):
            self._table = None
        if self._reuse is not None:
            self._reuse.changed(name)

    # -- placement -----------------------------------------------------------------------
    def filter(self, pod: PodRequest, policy: Policy,
               nodes: Iterable[str] | None = None) -> FilterResult:
        """Every node (None) or the named ones: fits with placements, the others with reasons."""
        if pod.mig:
            return self._filter_mig(pod, nodes)
        self._fresh()
        fr = self._filter_shared(pod, policy, nodes)
        migs = self._mig.names() if nodes is None else [n for n in nodes if n in self._mig]
        if not migs:
            return fr
        failed = dict(fr.failed)
        for n in migs:
            failed[n] = Rejection(MIG_NODE, RESOLVABLE[MIG_NODE],
                                  f"node {n} gives MIG instances only; this pod asks for a "
                                  "shared slice (annotate it volcano.sh/vgpu-mode: mig, or let "
                                  "it run on a shared-slice node)")
        return FilterResult(dict(fr.fits), failed, fr.scores)

    def _filter_mig(self, pod: PodRequest, nodes: Iterable[str] | None) -> FilterResult:
        names = self.nodes() if nodes is None else list(nodes)
        fits, failed = self._mig.filter(pod, names)
        for n in names:
            if n in self._inv:
                failed[n] = Rejection(NO_MIG, RESOLVABLE[NO_MIG],
                                      f"node {n} gives shared slices only; this pod asks for a "
                                      "MIG instance (vgpu-mode: mig)")
            elif n not in fits and n not in failed:
                failed[n] = no_inventory(n)
        return FilterResult(dict(fits), failed)  # type: ignore[arg-type]

    def _prepare(self, pod: PodRequest, policy: Policy) -> tuple[tuple[Any, ...], fit._Ctx]:
        key = (shape_of(pod), policy, search.MAX_SEARCH)  # the budget decides too (tests vary it)
        ctx = self._prepared.get(key)
        if ctx is None:  # a pod is often filtered again (retries, filter then prioritize)
            if len(self._prepared) >= _PREPARED:
                self._prepared.clear()
            ctx = self._prepared[key] = fit.prepare(pod, policy)
        return key, ctx

    def _filter_shared(self, pod: PodRequest, policy: Policy,
                       nodes: Iterable[str] | None) -> FilterResult:
        key, ctx = self._prepare(pod, policy)
        if nodes is not None:
            return fit.filter_nodes(self._snap, nodes, ctx)
        if self._reuse is None:
            return self._bulk(ctx)
        node = policy.with_overrides(pod.node_policy, pod.gpu_policy).node
        return self._reuse.filter(key, ctx, node, self._snap, self._bulk)

    def _bulk(self, ctx: fit._Ctx) -> FilterResult:
        """Every node through the column table, which decides most of them at once."""
        if self._table is None:
            self._table = NodeTable(self._snap)
        return fit.filter_nodes(self._snap, self._table.names, ctx, self._table)

    def room(self, pod: PodRequest, policy: Policy, name: str, most: int) -> int:
        """How many pods like `pod`, up to `most`, shared-slice node `name` takes together now,
        each placed where the filter would put it after the ones before (the pods of one gang,
        which the extender keeps on one node). 0 for a node it does not know or a MIG pod."""
        inv = self._inv.get(name)
        if inv is None or pod.mig:
            return 0
        ctx = self._prepare(pod, policy)[1]
        gpus = {g.uuid: g for g in inv.gpus}
        use, pos = list(self._use[name]), self._snap[name].pos
        for taken in range(most):
            placed = fit.filter_nodes({name: NodeSnapshot(inv, use)}, [name], ctx).fits.get(name)
            if placed is None:
                return taken
            for u, f in footprint(placed.assignment, gpus).items():
                use[pos[u]] = add_use(use[pos[u]], f, 1)
        return most

    def prioritize(self, pod: PodRequest, policy: Policy,
                   fits: dict[str, Placement]) -> dict[str, int]:
        node = policy.with_overrides(pod.node_policy, pod.gpu_policy).node
        return score.prioritize(node, fits)

    def schedule(self, pod: PodRequest, policy: Policy) -> Placement | None:
        fr = self.filter(pod, policy)
        node = policy.with_overrides(pod.node_policy, pod.gpu_policy).node
        return score.best(node, fr.fits)

    # -- commitments ---------------------------------------------------------------------
    def assign(self, pod_key: str, assignment: PodAssignment) -> None:
        """Commit an assignment (replacing any earlier one for `pod_key`), all or nothing."""
        name = assignment.node
        if name in self._mig:
            self._mig.assign(pod_key, assignment)
            if pod_key in self._pods:  # it moved from a shared-slice node
                self._forget(pod_key)
            return
        inv = self._inv.get(name)
        if inv is None:
            raise AllocationError(f"pod {pod_key}: node {name!r} is not in the GPU inventory; "
                                  "add the node before assigning pods to it")
        gpus = {g.uuid: g for g in inv.gpus}
        fp = footprint(assignment, gpus, pod_key=pod_key)
        old = self._fp.get(pod_key) if pod_key in self._node_pods.get(name, ()) else None
        use, pos = self._use[name], self._snap[name].pos  # (a GPU's place never goes stale)
        problems = []
        for u, f in fp.items():
            p = pos[u]
            g = inv.gpus[p]
            o = use[p]
            if old is not None and u in old:
                o = add_use(o, old[u], -1)
            at = f"pod {pod_key} GPU {u} on {name}"
            if o.excl:
                problems.append(f"{at}: held exclusively by another pod")
            elif f.excl and o.slots:
                problems.append(f"{at}: an exclusive slice needs an idle GPU but {o.slots} "
                                "slice(s) of other pods are there")
            if o.mem + f.mem > g.memory_mib:
                problems.append(f"{at}: memory {o.mem} + {f.mem} MiB > {g.memory_mib} MiB")
            if o.cores + f.cores > EXCLUSIVE_CORES:
                problems.append(f"{at}: cores {o.cores} + {f.cores}% > {EXCLUSIVE_CORES}%")
            if o.slots + f.slots > g.split_count:
                problems.append(f"{at}: slots {o.slots} + {f.slots} > split count "
                                f"{g.split_count}")
        if problems:
            raise AllocationError("; ".join(problems))
        if pod_key in self._pods:
            self._forget(pod_key)
        self._pods[pod_key] = assignment
        self._fp[pod_key] = fp
        self._node_pods[name].add(pod_key)
        self._apply(name, fp, 1)
        self._mig.release(pod_key)  # it may have moved from a MIG node

    def release(self, pod_key: str) -> bool:
        if self._mig.release(pod_key):
            return True
        if pod_key not in self._pods:
            return False
        self._forget(pod_key)
        return True

    def _forget(self, pod_key: str) -> None:
        name = self._pods.pop(pod_key).node
        fp = self._fp.pop(pod_key)
        self._node_pods[name].discard(pod_key)
        if name in self._inv:
            self._apply(name, fp, -1)

    def _apply(self, name: str, fp: dict[str, Use], sign: int) -> None:
        use = self._use[name]
        pos = self._snap[name].pos
        for u, f in fp.items():
            p = pos[u]
            use[p] = add_use(use[p], f, sign)
        self._stale.add(name)

    # -- reads ---------------------------------------------------------------------------
    def gpu_usage(self) -> Iterator[GPUUsage]:
        """Every GPU of every node (sorted by node, then inventory order) with its usage."""
        for name in self.nodes():
            if name in self._mig:
                yield from self._mig_usage(name)
                continue
            for g, u in zip(self._inv[name].gpus, self._use[name], strict=True):
                yield GPUUsage(node=name, gpu=g, memory_used_mib=u.mem, cores_used=u.cores,
                               slices=u.slots, exclusive=u.excl > 0)

    def _mig_usage(self, name: str) -> Iterator[GPUUsage]:
        held = self._mig.usage(name)
        for g in self._mig.inventory(name).gpus:
            ps = [p for p in (g.mig.profile(s.profile) if g.mig else None
                              for s in held.get(g.uuid, ())) if p is not None]
            yield GPUUsage(node=name, gpu=g, memory_used_mib=sum(p.memory_mib for p in ps),
                           cores_used=sum(cores_of(p) for p in ps), slices=len(ps),
                           exclusive=any(cores_of(p) >= EXCLUSIVE_CORES for p in ps))

    def pods(self) -> dict[str, PodAssignment]:
        both = {**self._pods, **self._mig.pods()}
        return {k: both[k] for k in sorted(both)}

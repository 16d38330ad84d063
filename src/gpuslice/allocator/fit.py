"""Filter: for one pod, every node either fits (with its best placement) or has a reason.

Owns: `prepare` (a pod's plan, GPU policy and Gate, reusable), `filter_nodes` (NodeTable
columns decide most nodes at once; the rest are checked exactly), `Placement` (lazy: GPUs
chosen on first use), `FilterResult`.
Does not: keep usage (state.py), score nodes (score.py), word reasons (reasons.py, plan.py).
Invariants: a node fits exactly when `place` finds a placement for it; the same pod and
policy give the same result whichever path (Gate, columns, exact check) decided a node.
Tests: tests/unit/allocator/test_fit.py, test_fit_properties.py, test_search_properties.py
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import compress
from operator import not_

import msgspec

from gpuslice.allocator.gate import Gate
from gpuslice.allocator.plan import PodPlan
from gpuslice.allocator.policies import GpuPolicy, Policy
from gpuslice.allocator.reasons import RESOLVABLE, Rejection, no_inventory
from gpuslice.allocator.search import Picks, build, place
from gpuslice.allocator.usage import NodeSnapshot, NodeTable
from gpuslice.model import PodAssignment, PodRequest


class _Ctx:
    """What every placement of one pod under one policy shares (see `prepare`)."""

    __slots__ = ("gate", "gpu", "plan")

    def __init__(self, plan: PodPlan, gpu: GpuPolicy) -> None:
        self.plan = plan
        self.gpu = gpu
        self.gate = Gate(plan, gpu)


def prepare(pod: PodRequest, policy: Policy) -> _Ctx:
    """The pod's validated plan, GPU policy and Gate: pure, so callers may reuse it for the
    same pod and policy (ClusterState keeps a few). Raises RequestError for a bad request."""
    return _Ctx(PodPlan(pod), policy.with_overrides(pod.node_policy, pod.gpu_policy).gpu)


class Placement(msgspec.Struct, gc=False):
    """The best placement of a pod on one node under one GPU policy (computed on first use
    from the immutable node snapshot the filter saw)."""

    node: str
    snapshot: NodeSnapshot
    _ctx: _Ctx
    _assignment: PodAssignment | None = None
    _add: tuple[int, int] | None = None  # memory, cores the pod adds to the node
    _picks: Picks | None = None

    @property
    def assignment(self) -> PodAssignment:
        if self._assignment is None:
            if self._picks is None:
                placed = place(self.snapshot, self._ctx.plan, self._ctx.gpu)
                assert placed is not None, "fit check and place disagree"
                self._picks, self._add = placed
            self._assignment = build(self.snapshot, self._ctx.plan, self._picks)
        return self._assignment

    def fullness(self) -> float:
        """How full the node's healthy GPUs will be with this pod (0..1)."""
        if self._add is None:
            self.assignment  # noqa: B018 - computes _add
        assert self._add is not None
        return self.snapshot.fullness(*self._add)

    def __repr__(self) -> str:
        return f"Placement({self.assignment!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Placement):
            return NotImplemented
        return self.assignment == other.assignment

    __hash__ = None  # type: ignore[assignment]


class FilterResult:
    """Filter outcome: `fits` node -> best placement, `failed` node -> rejection; `scores`,
    when set (results kept per shape, reuse.py), gives these placements' scores for at least
    the nodes of `fits`, or None once they are out of date (then ClusterState.prioritize)."""

    __slots__ = ("failed", "fits", "scores")

    def __init__(self, fits: dict[str, Placement], failed: dict[str, Rejection],
                 scores: Callable[[], Mapping[str, int] | None] | None = None) -> None:
        self.fits = fits
        self.failed = failed
        self.scores = scores

    def __repr__(self) -> str:
        return f"FilterResult(fits={sorted(self.fits)}, failed={sorted(self.failed)})"


def filter_nodes(snaps: Mapping[str, NodeSnapshot], names: Iterable[str], ctx: _Ctx,
                 table: NodeTable | None = None) -> FilterResult:
    """Every named node either fits (with its best placement) or failed (with a reason),
    for the pod and policy `ctx` was prepared for. With `table` (then `names` must be
    table.names), its columns decide most nodes at once."""
    plan, gpu, gate = ctx.plan, ctx.gpu, ctx.gate
    fits: dict[str, Placement] = {}
    failed: dict[str, Rejection] = {}
    resolvable = RESOLVABLE
    add_for, add_abs = gate.add_for, gate.add_abs
    simple = plan.simple
    check = plan.reqs[0].check if simple else None

    def decide(name: str, s: NodeSnapshot) -> bool:
        """The summaries' bulk test did not pass `s`: decide it exactly; True if it fits."""
        if simple:
            assert check is not None
            reason = check(s)
            if reason is None:
                fits[name] = Placement(name, s, ctx, None, add_for(s.uniform_mem))
                return True
        elif gate.passes(s):
            fits[name] = Placement(name, s, ctx, None, add_for(s.uniform_mem))
            return True
        else:
            reason = plan.check(s, gpu)
            if reason is None:
                last = plan.last
                fits[name] = (Placement(name, s, ctx) if last is None  # a pod asking no GPUs
                              else Placement(name, s, ctx, None, last[1], last[0]))
                return True
        failed[name] = Rejection(reason, resolvable[reason], None, s, plan)
        return False

    if table is None:
        quick = gate.quick
        for name in names:
            s = snaps.get(name)
            if s is None:
                failed[name] = no_inventory(name)
            elif quick(s):
                fits[name] = Placement(name, s, ctx, None,
                                       add_abs if add_abs is not None else add_for(s.uniform_mem))
            else:
                decide(name, s)
        return FilterResult(fits, failed)
    tnames, tsnaps = table.names, table.snaps
    passed = gate.columns(table)
    rest: Iterable[int] = range(len(tnames))
    if passed is not None:
        every = all(passed)
        rows: Iterable[tuple[str, NodeSnapshot, int]] = zip(tnames, tsnaps, table.uniform_mem,
                                                            strict=True)
        if not every:
            rows = compress(rows, passed)
        if add_abs is not None:
            fits = {n: Placement(n, s, ctx, None, add_abs) for n, s, _ in rows}
        else:
            adds = {u: add_for(u) for u in set(table.uniform_mem)}
            fits = {n: Placement(n, s, ctx, None, adds[u]) for n, s, u in rows}
        rest = () if every else compress(range(len(tnames)), map(not_, passed))
    late = False
    if check is not None:  # one container: `check` is exact; inlined, as most nodes may land here
        for i in rest:
            s = tsnaps[i]
            reason = check(s)
            if reason is None:
                fits[tnames[i]] = Placement(tnames[i], s, ctx, None, add_for(s.uniform_mem))
                late = True
            else:
                failed[tnames[i]] = Rejection(reason, resolvable[reason], None, s, plan)
    else:
        for i in rest:
            late = decide(tnames[i], tsnaps[i]) or late
    if late and passed is not None:  # keep node-name order
        fits = {k: fits[k] for k in sorted(fits)}
    return FilterResult(fits, failed)

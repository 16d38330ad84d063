"""Does a pod fit a node, where exactly, and if not, why not.

Owns: `PodPlan` (a pod's requests checked once per call), `Gate` (a sufficient condition for
fit read from node summaries, in bulk over NodeTable columns), the per-node fit check
(summaries first; per-GPU search only where they cannot decide), `place` (GPU choice, lifecycle
aware: sidecars+apps first, then each init against node usage + sidecars, preferring GPUs
where it adds nothing to the pod's footprint; the policy's greedy choice first, then a
bounded backtracking search), `Placement`, `Rejection`, `FilterResult`.
Does not: keep usage (state.py) or score nodes (score.py).
Invariants: a Gate pass implies `place` succeeds without backtracking; `check` says "fits"
exactly when `place` finds a placement; reasons equal the per-GPU `explain` and are identical
across nodes (property-tested); a placement never over-commits (usage.py states the rule).
Failure: invalid requests raise errors.RequestError naming the pod, container and field.
Tests: tests/unit/allocator/test_fit.py, test_fit_properties.py, test_search_properties.py
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations, compress
from operator import not_

import msgspec

from gpuslice.allocator.policies import GpuPolicy, Policy
from gpuslice.allocator.policies.base import POS, Candidate
from gpuslice.allocator.usage import NodeSnapshot, NodeTable
from gpuslice.errors import RequestError
from gpuslice.model import (
    EXCLUSIVE_CORES,
    GPU,
    ContainerAssignment,
    ContainerKind,
    GPUSlice,
    PodAssignment,
    PodRequest,
    SliceRequest,
)

NO_INVENTORY = "node has no GPU inventory"
TOO_FEW = "too few GPUs on node"
NO_HEALTHY = "no healthy GPU"
TYPE = "GPU type not allowed by pod"
UUID = "GPU UUID not allowed by pod"
HELD = "GPU held exclusively"
SLOT = "no free GPU slot"
MEMORY = "insufficient GPU memory"
CORES = "insufficient GPU cores"
NO_SET = "no GPU set fits all containers"
REASONS = (NO_INVENTORY, TOO_FEW, NO_HEALTHY, TYPE, UUID, HELD, SLOT, MEMORY, CORES, NO_SET)
UNRESOLVABLE = frozenset({NO_INVENTORY, TOO_FEW, NO_HEALTHY, TYPE, UUID})
"""Reasons preemption cannot cure (the extender's failedAndUnresolvableNodes)."""

MAX_SEARCH = 512
"""Most GPU sets `place` generates for one pod on one node after the policy's greedy choice
fails; past it the node is rejected ("no GPU set fits all containers"). Enough to search
every set exhaustively on nodes of up to 4 GPUs with up to 3 containers of 1-2 GPUs each."""


class Rejection(msgspec.Struct, gc=False):
    """Why a pod does not fit a node. `reason` is short and the same on every node for one
    cause; `detail` (== str()) has this node's numbers and is worked out on first use."""

    reason: str
    resolvable: bool  # False where preemption cannot help
    _detail: str | None = None
    _snap: NodeSnapshot | None = None
    _plan: PodPlan | None = None

    @property
    def detail(self) -> str:
        if self._detail is None:
            assert self._snap is not None and self._plan is not None
            self._detail = self._plan.explain(self._snap)[1]
            self._snap = self._plan = None
        return self._detail

    def __str__(self) -> str:
        return self.detail

    def __repr__(self) -> str:
        return f"Rejection({self.reason!r}, {self.detail!r}, resolvable={self.resolvable})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rejection):
            return NotImplemented
        return (self.reason, self.detail) == (other.reason, other.detail)

    __hash__ = None  # type: ignore[assignment]


def rejection(reason: str, detail: str) -> Rejection:
    return Rejection(reason, reason not in UNRESOLVABLE, detail)


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
    """Filter outcome: `fits` node -> best placement, `failed` node -> rejection."""

    __slots__ = ("failed", "fits")

    def __init__(self, fits: dict[str, Placement], failed: dict[str, Rejection]) -> None:
        self.fits = fits
        self.failed = failed

    def __repr__(self) -> str:
        return f"FilterResult(fits={sorted(self.fits)}, failed={sorted(self.failed)})"


def _check_request(pod: PodRequest, r: SliceRequest) -> list[str]:
    at = f"pod {pod.key} container {r.container!r}"
    out = []
    if r.count < 1:
        out.append(f"{at}: count={r.count}: must be at least 1 GPU")
    if (r.memory_mib is None) == (r.memory_percent is None):
        out.append(f"{at}: memory_mib={r.memory_mib} memory_percent={r.memory_percent}: "
                   "set exactly one (the admission boundary resolves defaults)")
    if r.memory_mib is not None and r.memory_mib < 0:
        out.append(f"{at}: memory_mib={r.memory_mib}: must be >= 0")
    if r.memory_percent is not None and not 1 <= r.memory_percent <= 100:
        out.append(f"{at}: memory_percent={r.memory_percent}: must be 1..100")
    if not 0 <= r.cores <= EXCLUSIVE_CORES:
        out.append(f"{at}: cores={r.cores}: must be 0..100 (100 = one whole GPU)")
    return out


class ReqPlan:
    """One container's request with the pod's filter, ready to test against snapshots."""

    __slots__ = ("cores", "count", "excl", "mem", "pct", "plan", "req")

    def __init__(self, plan: PodPlan, req: SliceRequest) -> None:
        self.plan = plan
        self.req = req
        self.count = req.count
        self.mem = req.memory_mib
        self.pct = req.memory_percent or 0
        self.cores = req.cores
        self.excl = req.exclusive

    def need(self, g: GPU) -> int:
        return self.mem if self.mem is not None else g.memory_mib * self.pct // 100

    def need_text(self) -> str:
        return f"{self.mem} MiB" if self.mem is not None else f"{self.pct}% of its memory"

    def check(self, s: NodeSnapshot) -> str | None:
        """The reason this container alone cannot go on `s`, or None if it can."""
        n = self.count
        if s.n_total < n or (s.n_healthy and s.n_healthy < n):
            return TOO_FEW
        if not s.n_healthy:
            return NO_HEALTHY
        plan = self.plan
        if plan.uuid_filter:
            return self._slow(s)
        if plan.typed:
            ok = plan.models_class(s.models)
            if ok == 0:
                return TYPE
            if ok == 2:
                return self._slow(s)
        if s.n_open < n:
            return HELD
        if s.n_slot < n:
            return SLOT
        m, c, excl = self.mem, self.cores, self.excl
        if m is not None and s.max_free_mem < m:
            return MEMORY
        n_mem = n_ok = 0
        for fm, fc, idle, total, _, _ in s.free:
            if m is None:
                if fm < total * self.pct // 100:
                    continue
            elif fm < m:
                break
            n_mem += 1
            if idle if excl else fc >= c:
                n_ok += 1
                if n_ok >= n:
                    return None
        return MEMORY if n_mem < n else CORES

    def _slow(self, s: NodeSnapshot) -> str | None:
        e = self.explain(s)
        return None if e is None else e[0]

    def explain(self, s: NodeSnapshot) -> tuple[str, str] | None:
        """Per-GPU version of `check` with this node's numbers: (reason, detail) or None."""
        n, name, gpus = self.count, self.req.container, s.gpus
        wants = f"container {name!r} needs {n}"
        if s.n_total < n:
            return TOO_FEW, f"node has {s.n_total} GPUs; {wants}"
        healthy = [p for p, g in enumerate(gpus) if g.healthy]
        if not healthy:
            return NO_HEALTHY, f"0/{s.n_total} GPUs healthy"
        if len(healthy) < n:
            return TOO_FEW, f"{len(healthy)}/{s.n_total} GPUs healthy; {wants}"
        plan = self.plan
        typed = [p for p in healthy if plan.type_ok(gpus[p].model)]
        if len(typed) < n:
            return TYPE, (f"{len(typed)}/{len(healthy)} healthy GPUs match the pod's GPU types "
                          f"({plan.type_text()}); models here: {', '.join(s.models)}; {wants}")
        elig = [p for p in typed if plan.uuid_ok(gpus[p].uuid)]
        if len(elig) < n:
            return UUID, (f"{len(elig)}/{len(typed)} eligible GPUs pass the pod's GPU UUID lists "
                          f"({plan.uuid_text()}); {wants}")
        opn = [p for p in elig if not s.excl[p]]
        if len(opn) < n:
            return HELD, (f"{len(elig) - len(opn)}/{len(elig)} eligible GPUs held by an exclusive "
                          f"slice; {wants}")
        slot = [p for p in opn if s.slots[p] < gpus[p].split_count]
        if len(slot) < n:
            return SLOT, (f"{len(opn) - len(slot)}/{len(opn)} open GPUs have every slot taken "
                          f"(split count reached); {wants}")
        memok = [p for p in slot if gpus[p].memory_mib - s.mem[p] >= self.need(gpus[p])]
        if len(memok) < n:
            if not memok:
                return MEMORY, (f"{len(slot)}/{s.n_total} GPUs free but each has < "
                                f"{self.need_text()} free")
            return MEMORY, (f"only {len(memok)}/{len(slot)} free GPUs have {self.need_text()} "
                            f"free; {wants}")
        if self.excl:
            idle = [p for p in memok if s.slots[p] == 0]
            if len(idle) < n:
                return CORES, (f"{len(idle)}/{len(memok)} GPUs with room are idle; an exclusive "
                               f"slice (cores=100) needs an idle GPU; {wants}")
        else:
            coreok = [p for p in memok if EXCLUSIVE_CORES - s.cores[p] >= self.cores]
            if len(coreok) < n:
                return CORES, (f"{len(coreok)}/{len(memok)} GPUs with room have {self.cores}% "
                               f"cores free; {wants}")
        return None


class PodPlan:
    """A pod's requests, validated once, with its filter compiled. Raises RequestError."""

    __slots__ = ("_models_cache", "_type_cache", "apps", "inits", "last", "nouse_types",
                 "nouse_uuids", "pod", "reqs", "simple", "typed", "use_types", "use_uuids",
                 "uuid_filter")

    def __init__(self, pod: PodRequest) -> None:
        problems: list[str] = []
        names = [r.container for r in pod.slices]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"pod {pod.key} container {dup!r}: listed twice; names must be unique")
        for r in pod.slices:
            problems += _check_request(pod, r)
        if problems:
            raise RequestError(problems)
        self.pod = pod
        f = pod.filter
        self.use_types = tuple(t.lower() for t in f.use_types)
        self.nouse_types = tuple(t.lower() for t in f.nouse_types)
        self.use_uuids = frozenset(f.use_uuids)
        self.nouse_uuids = frozenset(f.nouse_uuids)
        self.typed = bool(self.use_types or self.nouse_types)
        self.uuid_filter = bool(self.use_uuids or self.nouse_uuids)
        self._type_cache: dict[str, bool] = {}
        self._models_cache: dict[tuple[str, ...], int] = {}
        self.reqs = [ReqPlan(self, r) for r in pod.slices]
        self.apps = [rp for rp in self.reqs if rp.req.kind is not ContainerKind.INIT]
        self.inits = [rp for rp in self.reqs if rp.req.kind is ContainerKind.INIT]
        self.simple = len(self.reqs) == 1
        self.last: tuple[Picks, tuple[int, int]] | None = None

    def type_ok(self, model: str) -> bool:
        ok = self._type_cache.get(model)
        if ok is None:
            m = model.lower()
            ok = (not self.use_types or any(t in m for t in self.use_types)) and not any(
                t in m for t in self.nouse_types)
            self._type_cache[model] = ok
        return ok

    def models_class(self, models: tuple[str, ...]) -> int:
        """For a node's healthy GPU models: 0 none pass the pod's type lists, 1 all, 2 some."""
        ok = self._models_cache.get(models)
        if ok is None:
            flags = {self.type_ok(m) for m in models}
            ok = 2 if len(flags) == 2 else int(flags.pop()) if flags else 0
            self._models_cache[models] = ok
        return ok

    def uuid_ok(self, uuid: str) -> bool:
        return (not self.use_uuids or uuid in self.use_uuids) and uuid not in self.nouse_uuids

    def allowed(self, g: GPU) -> bool:
        return g.healthy and self.type_ok(g.model) and self.uuid_ok(g.uuid)

    def type_text(self) -> str:
        return f"use {list(self.pod.filter.use_types)}, nouse {list(self.pod.filter.nouse_types)}"

    def uuid_text(self) -> str:
        return f"use {list(self.pod.filter.use_uuids)}, nouse {list(self.pod.filter.nouse_uuids)}"

    def check(self, s: NodeSnapshot, gpu: GpuPolicy) -> str | None:
        """None if the pod fits `s` (complex pods leave their placement in `self.last`)."""
        self.last = None
        for rp in self.reqs:
            reason = rp.check(s)
            if reason is not None:
                return reason
        if self.simple or not self.reqs:
            return None
        self.last = place(s, self, gpu)
        return NO_SET if self.last is None else None

    def explain(self, s: NodeSnapshot, gpu: GpuPolicy | None = None) -> tuple[str, str]:
        for rp in self.reqs:
            e = rp.explain(s)
            if e is not None:
                return e
        asks = ", ".join(f"{rp.req.container} {rp.count}x{rp.need_text()} {rp.cores}% cores"
                         for rp in self.reqs)
        return NO_SET, f"each container fits alone but not all together ({asks})"


class Gate:
    """A sufficient condition, read from one node's summaries, that `place` succeeds with the
    GPU policy's first choice for every container (no backtracking), and the memory and cores
    the pod then adds to the node where that does not depend on which GPUs were chosen.

    Steps: each app-phase container j (request order) needs `cum_j` = its count + the counts
    placed before it of slot GPUs that could each take its slice alone; then, whatever the
    policy chose before, `count_j` untouched ones remain. An init container is "covered" when
    an APP container asks for at least its count, memory and cores (same unit) and it is not
    exclusive: the app's GPUs then take it without adding to the footprint, and the policy
    picks those first (PRE 0) if `pre_first`; with cores 0, or memory > 0 and cores at most
    every APP container's (a PRE-0 GPU then holds an APP slice), it adds no cores either.
    Other inits need sidecar GPUs + their count.
    `quick`/`columns`: the same test with every step's largest need, over the first k+1 slot
    GPUs (k = largest cum - 1); `passes`: the exact count per step. Unusable (never passes)
    with a UUID filter, which the summaries do not cover.
    """

    __slots__ = ("_adds", "abs_mem", "add_abs", "add_reqs", "cores", "covered", "excl", "k",
                 "pct", "plan", "steps", "usable")

    def __init__(self, plan: PodPlan, gpu: GpuPolicy) -> None:
        self.plan = plan
        self.usable = bool(plan.reqs) and not plan.uuid_filter
        steps: list[_Step] = []
        cum = side = 0
        e_abs, e_pcts, e_cores, e_excl = 0, (), 0, False  # what the earlier containers ask
        for n, rp in enumerate(plan.apps):
            steps.append((cum + rp.count - 1, rp.mem, rp.pct, rp.cores, rp.excl, rp.count, cum,
                          n, e_abs, e_pcts, e_cores, e_excl))
            cum += rp.count
            if rp.mem is None:
                e_pcts = (*e_pcts, rp.pct)
            else:
                e_abs += rp.mem
            e_cores += rp.cores
            e_excl = e_excl or rp.excl
            if rp.req.kind is ContainerKind.SIDECAR:
                side += rp.count
        apps_only = [rp for rp in plan.apps if rp.req.kind is ContainerKind.APP]
        app_cores = min((a.cores for a in apps_only), default=0)
        self.covered = True
        for ri in plan.inits:
            if (not ri.excl and gpu.pre_first(ri.count)
                    and (ri.cores == 0 or (ri.mem is not None and ri.mem > 0
                                           and ri.cores <= app_cores))
                    and any(a.count >= ri.count and a.cores >= ri.cores
                            and (a.mem >= ri.mem if a.mem is not None and ri.mem is not None
                                 else a.mem is None and ri.mem is None and a.pct >= ri.pct)
                            for a in apps_only)):
                continue
            self.covered = False
            steps.append((side + ri.count - 1, ri.mem, ri.pct, ri.cores, ri.excl, ri.count, side,
                          0, 0, (), 0, True))  # True: no "robust" GPUs; the sidecars may take any
        self.steps = steps
        self.k = max((st[0] for st in steps), default=0)
        self.abs_mem = max((st[1] for st in steps if st[1] is not None), default=0)
        self.pct = max((st[2] for st in steps if st[1] is None), default=0)
        self.cores = max((st[3] for st in steps), default=0)
        self.excl = any(st[4] for st in steps)
        # the footprint adds every app-phase slice once (inits covered); a lone init, itself
        self.add_reqs: list[ReqPlan] | None = (
            plan.apps if self.covered else plan.inits if not plan.apps and len(plan.inits) == 1
            else None)
        self._adds: dict[int, tuple[int, int] | None] = {}
        self.add_abs: tuple[int, int] | None = None
        if self.add_reqs is not None and all(rp.mem is not None for rp in self.add_reqs):
            self.add_abs = (sum(rp.count * rp.mem for rp in self.add_reqs if rp.mem is not None),
                            sum(rp.count * rp.cores for rp in self.add_reqs))

    def add_for(self, uniform_mem: int) -> tuple[int, int] | None:
        """MiB and cores the pod adds to a node whose healthy GPUs all have `uniform_mem` MiB
        (0: mixed sizes), when the Gate passed or the check found a fit; None if it depends
        on the GPUs chosen (then Placement works it out by placing)."""
        if self.add_abs is not None:
            return self.add_abs
        add = self._adds.get(uniform_mem, ())
        if add == ():
            add, reqs = None, self.add_reqs
            if reqs is not None and uniform_mem:
                add = (sum(rp.count * (rp.mem if rp.mem is not None
                                       else uniform_mem * rp.pct // 100) for rp in reqs),
                       sum(rp.count * rp.cores for rp in reqs))
            self._adds[uniform_mem] = add
        return add  # type: ignore[return-value]

    def quick(self, s: NodeSnapshot) -> bool:
        """Every step's largest need fits each of the node's first k+1 slot GPUs."""
        k = self.k
        if not self.usable or s.n_slot <= k:
            return False
        need = self.abs_mem
        if self.pct:
            if not s.uniform_mem:
                return False
            need = max(need, s.uniform_mem * self.pct // 100)
        if s.free[k][0] < need:
            return False
        if not (s.idle_prefix[k] if self.excl else s.min_cores_prefix[k] >= self.cores):
            return False
        return not self.plan.typed or self.plan.models_class(s.models) == 1

    def columns(self, table: NodeTable) -> list[bool] | None:
        """`quick` for every node of `table` at once (None: no node can pass)."""
        k = self.k
        if not self.usable or k >= table.width:
            return None
        fm, mc = table.free_mem[k], table.min_cores[k]
        plan, need, cores = self.plan, self.abs_mem, self.cores
        # one comprehension per case: this runs over every node on every filter call
        if self.pct or self.excl:
            if self.pct:
                big = 1 << 62
                by_size = {u: max(need, u * self.pct // 100) if u else big
                           for u in set(table.uniform_mem)}
                needs = [by_size[u] for u in table.uniform_mem]
            else:
                needs = [need] * len(fm)
            if self.excl:
                g = [f >= nd and i for f, nd, i in zip(fm, needs, table.all_idle[k], strict=True)]
            else:
                g = [f >= nd and c >= cores for f, nd, c in zip(fm, needs, mc, strict=True)]
            if plan.typed:
                ok_models = {m for m in table.model_sets if plan.models_class(m) == 1}
                g = [x and m in ok_models for x, m in zip(g, table.models, strict=True)]
            return g
        if plan.typed:
            ok_models = {m for m in table.model_sets if plan.models_class(m) == 1}
            return [f >= need and c >= cores and m in ok_models
                    for f, c, m in zip(fm, mc, table.models, strict=True)]
        if cores:
            return [f >= need and c >= cores for f, c in zip(fm, mc, strict=True)]
        return [f >= need for f in fm]

    def passes(self, s: NodeSnapshot) -> bool:
        """Per step, count over `s.free` (per-GPU need for percent requests) the GPUs that can
        take the slice alone (`good`) and those that can even after one slice of every earlier
        container (`robust`: never lost); at least `count` must remain:
        robust + max(0, good - robust - slices placed earlier)."""
        if not self.usable or (self.plan.typed and self.plan.models_class(s.models) != 1):
            return False
        free = s.free
        for (_, mem, pct, cores, excl, count, before, n_before, e_abs, e_pcts, e_cores,
             e_excl) in self.steps:
            if len(free) < count:
                return False
            can_robust = not e_excl and not (excl and n_before)
            good = robust = 0
            for fm, fc, idle, total, _, slots in free:
                need = mem if mem is not None else total * pct // 100
                if fm < need:
                    if mem is not None:
                        break  # `free` is sorted by free memory, most first
                    continue
                if not (idle if excl else fc >= cores):
                    continue
                good += 1
                if (can_robust and slots > n_before and fc - cores >= e_cores
                        and fm - need >= (e_abs + sum([total * q // 100 for q in e_pcts])
                                          if e_pcts else e_abs)):
                    robust += 1
            if robust + max(0, good - robust - before) < count:
                return False
        return True


_Step = tuple[int, int | None, int, int, bool, int, int, int, int, tuple[int, ...], int, bool]
"""One Gate step: (k = slices up to and including it - 1, MiB or None, percent, cores,
exclusive, count, slices placed before it, containers before it, their MiB, their percents,
their cores, whether any of them is exclusive)."""

Picks = dict[str, list[int]]
"""container name -> positions (in NodeInventory.gpus) of the GPUs chosen for it."""

_DONE = -2  # search result: placed (other results: the level to resume at; -1 = give up)


def place(s: NodeSnapshot, plan: PodPlan, gpu: GpuPolicy) -> tuple[Picks, tuple[int, int]] | None:
    """Choose GPUs for every container of the pod on `s`, or None. Also returns the memory and
    cores the pod's footprint adds to the node. Never over-commits (see usage.py's rule).

    First the greedy choice: the GPU policy's pick for each container in turn (sidecars and
    apps in request order, then each init). Only if that fails, `_search`: depth-first over
    the app-phase containers, each level trying the policy's choice first, then other GPU
    sets in the policy's order, skipping sets equivalent to one tried (same capacity and usage
    GPU by GPU); inits are placed greedily at each leaf (they depend only on the sidecars, so
    a failed init resumes at the last sidecar). At most MAX_SEARCH sets are generated.
    """
    gpus = s.gpus
    n = len(gpus)
    if plan.typed or plan.uuid_filter:
        elig: Sequence[int] = [p for p, g in enumerate(gpus) if plan.allowed(g)]
    else:
        elig = s.healthy_pos
    a_mem, a_cores, a_slots, a_excl = [0] * n, [0] * n, [0] * n, [0] * n
    d_mem, d_cores, d_slots, d_excl = [0] * n, [0] * n, [0] * n, [0] * n
    picks: Picks = {}
    sidecars = False
    for i, rp in enumerate(plan.apps):
        cands = _candidates(s, elig, rp, a_mem, a_cores, a_slots, a_excl, None)
        if len(cands) < rp.count:  # the first container fails alone: nothing to search
            return _search(s, plan, gpu, elig) if i and MAX_SEARCH > 0 else None
        picked = picks[rp.req.container] = [c[POS] for c in gpu.choose(cands, rp.count, gpus)]
        sidecar = rp.req.kind is ContainerKind.SIDECAR
        sidecars = sidecars or sidecar
        for p in picked:
            need = rp.need(gpus[p])
            a_mem[p] += need
            a_cores[p] += rp.cores
            a_slots[p] += 1
            a_excl[p] += rp.excl
            if sidecar:
                d_mem[p] += need
                d_cores[p] += rp.cores
                d_slots[p] += 1
                d_excl[p] += rp.excl
    f_mem, f_cores = list(a_mem), list(a_cores)
    for rp in plan.inits:
        cands = _candidates(s, elig, rp, d_mem, d_cores, d_slots, d_excl, f_mem)
        if len(cands) < rp.count:  # an init depends on the sidecars only
            return _search(s, plan, gpu, elig) if sidecars and MAX_SEARCH > 0 else None
        picked = picks[rp.req.container] = [c[POS] for c in gpu.choose(cands, rp.count, gpus)]
        for p in picked:
            f_mem[p] = max(f_mem[p], d_mem[p] + rp.need(gpus[p]))
            f_cores[p] = max(f_cores[p], d_cores[p] + rp.cores)
    return picks, (sum(f_mem), sum(f_cores))


def _candidates(s: NodeSnapshot, elig: Sequence[int], rp: ReqPlan, mem: list[int],
                cores: list[int], slots: list[int], excl: list[int],
                fp: list[int] | None) -> list[Candidate]:
    """GPUs that take `rp`'s slice on top of node usage + (mem, cores, slots, excl) of this
    pod; PRE = MiB it would add to the footprint `fp` (0 without one)."""
    gpus = s.gpus
    s_mem, s_cores, s_slots, s_excl = s.mem, s.cores, s.slots, s.excl
    cands: list[Candidate] = []
    rexcl, rcores, rmem, pct = rp.excl, rp.cores, rp.mem, rp.pct
    for p in elig:
        if s_excl[p] or excl[p] or (rexcl and (s_slots[p] or slots[p])):
            continue
        g = gpus[p]
        if s_slots[p] + slots[p] >= g.split_count:
            continue
        need = rmem if rmem is not None else g.memory_mib * pct // 100
        fm = g.memory_mib - s_mem[p] - mem[p] - need
        fc = EXCLUSIVE_CORES - s_cores[p] - cores[p] - rcores
        if fm < 0 or fc < 0:
            continue
        pre = 0 if fp is None else max(0, mem[p] + need - fp[p])
        cands.append((pre, fm, fc, g.index, p))
    return cands


def _search(s: NodeSnapshot, plan: PodPlan, gpu: GpuPolicy,
            elig: Sequence[int]) -> tuple[Picks, tuple[int, int]] | None:
    """The bounded backtracking search of `place` (see there)."""
    gpus = s.gpus
    n = len(gpus)
    a_mem, a_cores, a_slots, a_excl = [0] * n, [0] * n, [0] * n, [0] * n
    d_mem, d_cores, d_slots, d_excl = [0] * n, [0] * n, [0] * n, [0] * n
    s_mem, s_cores, s_slots = s.mem, s.cores, s.slots
    picks: Picks = {}
    apps, inits = plan.apps, plan.inits
    out: list[tuple[int, int]] = []
    budget = [MAX_SEARCH]
    last_side = max((i for i, rp in enumerate(apps) if rp.req.kind is ContainerKind.SIDECAR),
                    default=-1)

    def cands_for(rp: ReqPlan, mem: list[int], cores: list[int], slots: list[int],
                  excl: list[int], fp: list[int] | None) -> list[Candidate]:
        return _candidates(s, elig, rp, mem, cores, slots, excl, fp)

    def apply(rp: ReqPlan, picked: list[int], sign: int) -> None:
        sidecar = rp.req.kind is ContainerKind.SIDECAR
        rc, rx = sign * rp.cores, sign * rp.excl
        for p in picked:
            need = sign * rp.need(gpus[p])
            a_mem[p] += need
            a_cores[p] += rc
            a_slots[p] += sign
            a_excl[p] += rx
            if sidecar:
                d_mem[p] += need
                d_cores[p] += rc
                d_slots[p] += sign
                d_excl[p] += rx

    def place_inits() -> bool:
        f_mem, f_cores = list(a_mem), list(a_cores)
        for rp in inits:
            cands = cands_for(rp, d_mem, d_cores, d_slots, d_excl, f_mem)
            if len(cands) < rp.count:
                return False
            picked = picks[rp.req.container] = [c[POS] for c in gpu.choose(cands, rp.count, gpus)]
            for p in picked:
                f_mem[p] = max(f_mem[p], d_mem[p] + rp.need(gpus[p]))
                f_cores[p] = max(f_cores[p], d_cores[p] + rp.cores)
        out.append((sum(f_mem), sum(f_cores)))
        return True

    def sig(p: int) -> tuple[int, ...]:
        g = gpus[p]
        return (g.memory_mib, g.split_count, s_mem[p], s_cores[p], s_slots[p], a_mem[p],
                a_cores[p], a_slots[p], a_excl[p], d_mem[p], d_cores[p], d_slots[p], d_excl[p])

    def attempt(level: int, rp: ReqPlan, picked: list[int]) -> int:
        picks[rp.req.container] = picked
        apply(rp, picked, 1)
        r = search(level + 1)
        if r != _DONE:
            apply(rp, picked, -1)
        return r

    def search(level: int) -> int:
        if level == len(apps):
            return _DONE if place_inits() else last_side
        rp = apps[level]
        cands = cands_for(rp, a_mem, a_cores, a_slots, a_excl, None)
        if len(cands) < rp.count:
            return level - 1
        first = gpu.choose(cands, rp.count, gpus)
        r = attempt(level, rp, [c[POS] for c in first])
        if r == _DONE or r < level:
            return r
        seen = {tuple(sorted(sig(c[POS]) for c in first))}
        for combo in combinations(gpu.choose(cands, len(cands), gpus), rp.count):
            budget[0] -= 1
            if budget[0] < 0:
                return -1
            key = tuple(sorted(sig(c[POS]) for c in combo))
            if key in seen:
                continue
            seen.add(key)
            r = attempt(level, rp, [c[POS] for c in combo])
            if r == _DONE or r < level:
                return r
        return level - 1

    if search(0) != _DONE:
        return None
    return picks, out[-1]


def build(s: NodeSnapshot, plan: PodPlan, picks: Picks) -> PodAssignment:
    """The PodAssignment for `picks`: containers in request order, slices by NVML index."""
    gpus = s.gpus
    out = []
    for rp in plan.reqs:
        r = rp.req
        ps = sorted(picks[r.container], key=lambda p: (gpus[p].index, p))
        out.append(ContainerAssignment(container=r.container, kind=r.kind, slices=tuple(
            GPUSlice(uuid=gpus[p].uuid, memory_mib=rp.need(gpus[p]), cores=r.cores)
            for p in ps)))
    return PodAssignment(node=s.name, containers=tuple(out))


_RESOLVABLE = {r: r not in UNRESOLVABLE for r in REASONS}


def filter_nodes(snaps: Mapping[str, NodeSnapshot], names: Iterable[str], ctx: _Ctx,
                 table: NodeTable | None = None) -> FilterResult:
    """Every named node either fits (with its best placement) or failed (with a reason),
    for the pod and policy `ctx` was prepared for. With `table` (then `names` must be
    table.names), its columns decide most nodes at once."""
    plan, gpu, gate = ctx.plan, ctx.gpu, ctx.gate
    fits: dict[str, Placement] = {}
    failed: dict[str, Rejection] = {}
    resolvable = _RESOLVABLE
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
                failed[name] = _no_inventory(name)
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


def _no_inventory(name: str) -> Rejection:
    return rejection(NO_INVENTORY, f"node {name!r} reports no GPUs to gpuslice (is the "
                     "gpuslice node agent running there?)")

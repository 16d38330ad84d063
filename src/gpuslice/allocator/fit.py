"""Does a pod fit a node, where exactly, and if not, why not.

Owns: `PodPlan` (a pod's requests checked once per call), the per-node fit check (summary
fast path for one-container pods, per-GPU path otherwise), `place` (GPU choice, lifecycle
aware: sidecars+apps first, then each init against node usage + sidecars, preferring GPUs
where it adds nothing to the pod's footprint), `Placement`, `Rejection`, `FilterResult`.
Does not: keep usage (state.py) or score nodes (score.py).
Invariants: `check` says "fits" exactly when `place` finds a placement for one-container
pods, and gives the same reason as the per-GPU `explain` (property-tested); a placement never
over-commits (usage.py states the lifecycle rule); reasons are identical across nodes.
Failure: invalid requests raise errors.RequestError naming the pod, container and field.
Tests: tests/unit/allocator/test_fit.py, test_fit_properties.py
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from gpuslice.allocator.policies import GpuPolicy, Policy
from gpuslice.allocator.policies.base import POS, Candidate
from gpuslice.allocator.usage import NodeSnapshot
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

_SLOW = "slow"  # internal: the summary cannot decide, look at each GPU


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
    """What every placement of one filter call shares."""

    __slots__ = ("gpu", "plan")

    def __init__(self, plan: PodPlan, gpu: GpuPolicy) -> None:
        self.plan = plan
        self.gpu = gpu


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

    __slots__ = ("cores", "count", "excl", "mem", "models_ok", "pct", "plan", "req")

    def __init__(self, plan: PodPlan, req: SliceRequest) -> None:
        self.plan = plan
        self.req = req
        self.count = req.count
        self.mem = req.memory_mib
        self.pct = req.memory_percent or 0
        self.cores = req.cores
        self.excl = req.exclusive
        self.models_ok: dict[tuple[str, ...], int] = {}

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
            ok = self.models_ok.get(s.models)
            if ok is None:
                flags = {plan.type_ok(m) for m in s.models}
                ok = self.models_ok[s.models] = 2 if len(flags) == 2 else int(flags.pop())
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
        for fm, fc, idle, total, _ in s.free:
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

    __slots__ = ("_type_cache", "apps", "inits", "last", "nouse_types", "nouse_uuids", "pod",
                 "reqs", "simple", "typed", "use_types", "use_uuids", "uuid_filter")

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

    def uuid_ok(self, uuid: str) -> bool:
        return (not self.use_uuids or uuid in self.use_uuids) and uuid not in self.nouse_uuids

    def allowed(self, g: GPU) -> bool:
        return g.healthy and self.type_ok(g.model) and self.uuid_ok(g.uuid)

    def type_text(self) -> str:
        return f"use {list(self.pod.filter.use_types)}, nouse {list(self.pod.filter.nouse_types)}"

    def uuid_text(self) -> str:
        return f"use {list(self.pod.filter.use_uuids)}, nouse {list(self.pod.filter.nouse_uuids)}"

    def simple_add(self) -> tuple[int, int] | None:
        """Node-level memory/cores a one-container pod adds, when independent of the GPUs."""
        rp = self.reqs[0]
        return None if rp.mem is None else (rp.count * rp.mem, rp.count * rp.cores)

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


Picks = dict[str, list[int]]
"""container name -> positions (in NodeInventory.gpus) of the GPUs chosen for it."""


def place(s: NodeSnapshot, plan: PodPlan, gpu: GpuPolicy) -> tuple[Picks, tuple[int, int]] | None:
    """Choose GPUs for every container of the pod on `s`, or None. Also returns the memory and
    cores the pod's footprint adds to the node. Never over-commits (see usage.py's rule)."""
    gpus = s.gpus
    n = len(gpus)
    if plan.typed or plan.uuid_filter:
        elig: Sequence[int] = [p for p, g in enumerate(gpus) if plan.allowed(g)]
    else:
        elig = s.healthy_pos
    a_mem, a_cores, a_slots, a_excl = [0] * n, [0] * n, [0] * n, [False] * n
    d_mem, d_cores, d_slots, d_excl = [0] * n, [0] * n, [0] * n, [False] * n
    s_mem, s_cores, s_slots, s_excl = s.mem, s.cores, s.slots, s.excl
    picks: Picks = {}

    def pick(rp: ReqPlan, mem: list[int], cores: list[int], slots: list[int],
             excl: list[bool], fp: list[int] | None) -> list[int] | None:
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
        if len(cands) < rp.count:
            return None
        picked = [c[POS] for c in gpu.choose(cands, rp.count, gpus)]
        picks[rp.req.container] = picked
        return picked

    for rp in plan.apps:
        picked = pick(rp, a_mem, a_cores, a_slots, a_excl, None)
        if picked is None:
            return None
        sidecar = rp.req.kind is ContainerKind.SIDECAR
        for p in picked:
            need = rp.need(gpus[p])
            a_mem[p] += need
            a_cores[p] += rp.cores
            a_slots[p] += 1
            a_excl[p] = a_excl[p] or rp.excl
            if sidecar:
                d_mem[p] += need
                d_cores[p] += rp.cores
                d_slots[p] += 1
                d_excl[p] = d_excl[p] or rp.excl
    if not plan.inits:
        return picks, (sum(a_mem), sum(a_cores))
    f_mem, f_cores = list(a_mem), list(a_cores)
    for rp in plan.inits:
        picked = pick(rp, d_mem, d_cores, d_slots, d_excl, f_mem)
        if picked is None:
            return None
        for p in picked:
            f_mem[p] = max(f_mem[p], d_mem[p] + rp.need(gpus[p]))
            f_cores[p] = max(f_cores[p], d_cores[p] + rp.cores)
    return picks, (sum(f_mem), sum(f_cores))


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


def filter_nodes(snaps: dict[str, NodeSnapshot], names: Iterable[str], pod: PodRequest,
                 policy: Policy) -> FilterResult:
    """Every named node either fits (with its best placement) or failed (with a reason)."""
    plan = PodPlan(pod)
    ctx = _Ctx(plan, policy.with_overrides(pod.node_policy, pod.gpu_policy).gpu)
    fits: dict[str, Placement] = {}
    failed: dict[str, Rejection] = {}
    resolvable = {r: r not in UNRESOLVABLE for r in REASONS}
    if plan.simple:  # the hot path: one container, decided from the node summaries
        rp = plan.reqs[0]
        check = rp.check
        n, cores, mem, pct = rp.count, rp.cores, rp.mem, rp.pct
        add = (n * mem, n * cores) if mem is not None else None
        # Gate: if the `n` slot GPUs with the most free memory all take the slice, it fits.
        gate = mem is not None and not plan.uuid_filter
        typed, models_ok, excl, k = plan.typed, rp.models_ok, rp.excl, n - 1
        for name in names:
            s = snaps.get(name)
            if s is None:
                failed[name] = _no_inventory(name)
                continue
            if (gate and s.n_slot > k and s.free[k][0] >= mem
                    and (s.idle_prefix[k] if excl else s.min_cores_prefix[k] >= cores)
                    and (not typed or models_ok.get(s.models) == 1)):
                fits[name] = Placement(name, s, ctx, None, add)
                continue
            reason = check(s)
            if reason is None:
                if add is None and s.uniform_mem:
                    fits[name] = Placement(name, s, ctx, None,
                                           (n * (s.uniform_mem * pct // 100), n * cores))
                else:
                    fits[name] = Placement(name, s, ctx, None, add)
            else:
                failed[name] = Rejection(reason, resolvable[reason], None, s, plan)
        return FilterResult(fits, failed)
    gpu = ctx.gpu
    for name in names:
        s = snaps.get(name)
        if s is None:
            failed[name] = _no_inventory(name)
            continue
        reason = plan.check(s, gpu)
        if reason is None:
            last = plan.last
            if last is None:
                fits[name] = Placement(name, s, ctx)
            else:
                fits[name] = Placement(name, s, ctx, None, last[1], last[0])
        else:
            failed[name] = Rejection(reason, resolvable[reason], None, s, plan)
    return FilterResult(fits, failed)


def _no_inventory(name: str) -> Rejection:
    return rejection(NO_INVENTORY, f"node {name!r} reports no GPUs to gpuslice (is the "
                     "gpuslice node agent running there?)")

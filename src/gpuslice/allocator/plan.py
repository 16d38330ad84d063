"""A pod's requests, validated once, and the exact per-node fit check with its reasons.

Owns: `PodPlan` (validation, the pod's GPU type/UUID filter compiled, `check` and `explain`
per node), `ReqPlan` (one container: `check` from the node summaries, `explain` GPU by GPU).
Does not: choose GPUs (search.py), decide from summaries alone (gate.py), keep usage.
Invariants: `check` says "fits" exactly when `place` finds a placement; its reason equals
`explain`'s and is the same on every node for one cause (property-tested).
Failure: invalid requests raise errors.RequestError naming the pod, container and field.
Tests: tests/unit/allocator/test_fit.py, test_fit_properties.py
"""

from __future__ import annotations

from gpuslice.allocator.policies import GPU as GPU_POLICIES
from gpuslice.allocator.policies import GpuPolicy
from gpuslice.allocator.reasons import (
    CORES,
    HELD,
    MEMORY,
    NO_HEALTHY,
    NO_SET,
    SEARCH_CUT,
    SLOT,
    TOO_FEW,
    TYPE,
    UUID,
)
from gpuslice.allocator.search import MAX_SEARCH, Picks, place
from gpuslice.allocator.usage import NodeSnapshot
from gpuslice.errors import RequestError
from gpuslice.model import EXCLUSIVE_CORES, GPU, ContainerKind, PodRequest, SliceRequest


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

    __slots__ = ("_models_cache", "_type_cache", "apps", "cut_short", "inits", "last",
                 "nouse_types",
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
        self.cut_short = False  # the last `place` ran out of search budget (search.py)

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
        if self.last is None:
            return SEARCH_CUT if self.cut_short else NO_SET
        return None

    def explain(self, s: NodeSnapshot, gpu: GpuPolicy | None = None) -> tuple[str, str]:
        for rp in self.reqs:
            e = rp.explain(s)
            if e is not None:
                return e
        asks = ", ".join(f"{rp.req.container} {rp.count}x{rp.need_text()} {rp.cores}% cores"
                         for rp in self.reqs)
        if len(self.reqs) > 1 and place(s, self, gpu or GPU_POLICIES["binpack"]) is None \
                and self.cut_short:  # an infeasible pod searches alike under every policy
            return SEARCH_CUT, (f"each container fits alone; no set for all together among the "
                                f"{MAX_SEARCH} GPU sets searched, more may exist ({asks})")
        return NO_SET, f"each container fits alone but not all together ({asks})"

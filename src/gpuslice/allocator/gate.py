"""`Gate`: a sufficient condition for fit read from node summaries, one node or all at once.

Owns: the Gate's steps (built once per pod and GPU policy), `quick` (one node), `columns`
(every node of a NodeTable in one pass), `passes` (exact count per step), `add_for` (what the
pod adds to a node when that does not depend on the GPUs chosen).
Does not: read per-GPU usage or choose GPUs (search.py); never rejects (a miss only means
"ask the exact check", plan.py).
Invariants: a pass implies `place` succeeds with the policy's greedy choice, no backtracking.
Tests: tests/unit/allocator/test_search_properties.py, test_fit_properties.py
"""

from __future__ import annotations

from gpuslice.allocator.plan import PodPlan, ReqPlan
from gpuslice.allocator.policies import GpuPolicy
from gpuslice.allocator.usage import NodeSnapshot, NodeTable
from gpuslice.model import ContainerKind

_Step = tuple[int, int | None, int, int, bool, int, int, int, int, tuple[int, ...], int, bool]
"""One Gate step: (k = slices up to and including it - 1, MiB or None, percent, cores,
exclusive, count, slices placed before it, containers before it, their MiB, their percents,
their cores, whether any of them is exclusive)."""


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

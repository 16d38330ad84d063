"""Which GPUs each container of a pod gets on one node, and the assignment that results.

Owns: `place` (lifecycle aware: sidecars+apps first, then each init against node usage +
sidecars, preferring GPUs where it adds nothing to the pod's footprint; the policy's greedy
choice first, then a bounded backtracking search of at most MAX_SEARCH GPU sets), `build`.
Does not: validate requests or word reasons (plan.py), keep usage (state.py).
Invariants: a placement never over-commits (usage.py states the rule); the search finds a
placement whenever one exists within its budget, and `plan.cut_short` says whether a failed
search ran out of budget (then a placement may exist) or tried every distinct set (property-tested).
Tests: tests/unit/allocator/test_search_properties.py
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import TYPE_CHECKING

from gpuslice.allocator.policies import GpuPolicy
from gpuslice.allocator.policies.base import POS, Candidate
from gpuslice.allocator.usage import NodeSnapshot
from gpuslice.model import (
    EXCLUSIVE_CORES,
    ContainerAssignment,
    ContainerKind,
    GPUSlice,
    PodAssignment,
)

if TYPE_CHECKING:
    from gpuslice.allocator.plan import PodPlan, ReqPlan

MAX_SEARCH = 512
"""Most GPU sets `place` generates for one pod on one node after the policy's greedy choice
fails; past it the node is rejected with reasons.SEARCH_CUT ("GPU set search cut short", not
"no GPU set fits": one may exist beyond the budget). Enough to search every set exhaustively
on nodes of up to 4 GPUs with up to 3 containers of 1-2 GPUs each."""

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
    a failed init resumes at the last sidecar). At most MAX_SEARCH sets are generated; when
    that budget ends the search, `plan.cut_short` is True.
    """
    plan.cut_short = False
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
            return _search_or_cut(s, plan, gpu, elig) if i else None
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
            return _search_or_cut(s, plan, gpu, elig) if sidecars else None
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


def _search_or_cut(s: NodeSnapshot, plan: PodPlan, gpu: GpuPolicy,
                   elig: Sequence[int]) -> tuple[Picks, tuple[int, int]] | None:
    """`_search`, or with no budget at all (MAX_SEARCH <= 0) a search cut short at once."""
    if MAX_SEARCH > 0:
        return _search(s, plan, gpu, elig)
    plan.cut_short = True
    return None


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
                plan.cut_short = True
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

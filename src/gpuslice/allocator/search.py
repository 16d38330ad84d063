"""Which GPUs each container of a pod gets on one node, and the assignment that results.

Owns: `place` (lifecycle aware: sidecars+apps first, then each init against node usage +
sidecars, preferring GPUs where it adds nothing to the pod's footprint; the policy's greedy
choice first, then a bounded backtracking search, most constrained container first, of at
most MAX_SEARCH GPU sets), `build`.
Does not: validate requests or word reasons (plan.py), keep usage (state.py).
Invariants: a placement never over-commits (usage.py states the rule); the search finds a
placement whenever one exists within its budget, and `plan.cut_short` says whether a failed
search ran out of budget (then a placement may exist) or tried every distinct set; on nodes
of up to 5 GPUs with up to 4 containers a pod that fits is never cut short (property-tested
against an exhaustive search); containers keep their request order in `build`'s assignment.
Tests: tests/unit/allocator/test_search_properties.py, test_search_order.py
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterator, Sequence
from math import comb
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
"""Most GPU sets `place`'s search tries (places a container on, then searches on) for one pod
on one node after the policy's greedy choice fails; past it the node is rejected with
reasons.SEARCH_CUT ("GPU set search cut short", not "no GPU set fits": one may exist beyond
the budget). On nodes of up to 5 GPUs and pods of up to 4 containers of 1-3 GPUs each, a pod
that fits is never cut short (test_search_order.py checks it against an exhaustive search;
such pods needed at most 41 sets in a sweep of 60,000 random cases). A pod that fits nowhere
may still be cut short there: a pigeonhole (11 slices of 30 % cores for 5 GPUs that take 2
each) needs 480 sets to refute."""

Picks = dict[str, list[int]]
"""container name -> positions (in NodeInventory.gpus) of the GPUs chosen for it."""

def place(s: NodeSnapshot, plan: PodPlan, gpu: GpuPolicy) -> tuple[Picks, tuple[int, int]] | None:
    """Choose GPUs for every container of the pod on `s`, or None. Also returns the memory and
    cores the pod's footprint adds to the node. Never over-commits (see usage.py's rule).

    First the greedy choice: the GPU policy's pick for each container in turn (sidecars and
    apps in request order, then each init). Only if that fails, `_search`: depth-first over
    the app-phase containers, most constrained first (fewest candidate GPU sets given what is
    placed so far; ties to the one asking more cores, then more memory, of each GPU, then to
    request order), backtracking as soon as any container left, or an
    init beside the sidecars placed, has too few GPUs; each level tries the policy's choice
    first, then one set per class of equivalent sets (same capacity and usage GPU by GPU) in
    the policy's order; inits are placed greedily at the leaf (they depend only on the
    sidecars). At most MAX_SEARCH sets are tried; when that budget ends the search,
    `plan.cut_short` is True. The result is deterministic, and `picks` is keyed by container
    name, so `build` reports the containers in request order.
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
    """The bounded backtracking search of `place` (see there).

    Each level places the unplaced app-phase container with the fewest candidate GPU sets
    against what is placed so far (comb(candidate GPUs, count); ties as `place` says), and
    backtracks at once when any unplaced container, or any init against the sidecars placed,
    has fewer candidate GPUs than it needs (forward checking: usage only grows, so no
    completion could place it). Its sets: the policy's choice first, then one set per class
    of equivalent sets (GPUs alike in capacity and usage are interchangeable), best-ranked
    GPUs first. Every set tried counts against MAX_SEARCH.
    """
    gpus = s.gpus
    n = len(gpus)
    a_mem, a_cores, a_slots, a_excl = [0] * n, [0] * n, [0] * n, [0] * n
    d_mem, d_cores, d_slots, d_excl = [0] * n, [0] * n, [0] * n, [0] * n
    s_mem, s_cores, s_slots = s.mem, s.cores, s.slots
    picks: Picks = {}
    apps, inits = plan.apps, plan.inits
    todo = list(range(len(apps)))  # app-phase containers not placed yet, in request order
    out: list[tuple[int, int]] = []
    budget = [MAX_SEARCH]

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

    def inits_fit() -> bool:
        """Every init still has enough GPUs beside the sidecars placed so far."""
        return all(len(_candidates(s, elig, rp, d_mem, d_cores, d_slots, d_excl, None))
                   >= rp.count for rp in inits)

    def place_inits() -> bool:
        f_mem, f_cores = list(a_mem), list(a_cores)
        for rp in inits:
            cands = _candidates(s, elig, rp, d_mem, d_cores, d_slots, d_excl, f_mem)
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

    s_excl = s.excl
    ok_elig = [False] * n
    for p in elig:
        ok_elig[p] = True

    def fits(rp: ReqPlan, p: int) -> bool:
        """`_candidates`' test for one GPU against node usage + the app phase placed so far."""
        if not ok_elig[p] or s_excl[p] or a_excl[p] or (rp.excl and (s_slots[p] or a_slots[p])):
            return False
        g = gpus[p]
        if s_slots[p] + a_slots[p] >= g.split_count:
            return False
        need = rp.mem if rp.mem is not None else g.memory_mib * rp.pct // 100
        return (g.memory_mib - s_mem[p] - a_mem[p] >= need
                and EXCLUSIVE_CORES - s_cores[p] - a_cores[p] >= rp.cores)

    # ok[i][p]: GPU p takes apps[i] now; kept current for the containers in `todo` only (one
    # taken out comes back after every change since is undone, so its row is right again)
    ok = [[fits(rp, p) for p in range(n)] for rp in apps]
    # between containers with as many sets: the one asking more of each GPU first
    tie = [(-rp.cores, -(rp.mem if rp.mem is not None else 0), -rp.pct) for rp in apps]
    cnt = [sum(row) for row in ok]

    def refresh(picked: list[int]) -> list[tuple[int, int]]:
        """Re-test the GPUs `picked` for the containers left; the (i, p) that changed."""
        changed = []
        for i in todo:
            rp, row = apps[i], ok[i]
            for p in picked:
                if row[p] and not fits(rp, p):  # usage only grew: a GPU can only drop out
                    row[p] = False
                    cnt[i] -= 1
                    changed.append((i, p))
        return changed

    def attempt(rp: ReqPlan, picked: list[int]) -> bool:
        """Place `rp` on `picked` and search on; one GPU set of the budget."""
        budget[0] -= 1
        if budget[0] < 0:
            plan.cut_short = True
            return False
        picks[rp.req.container] = picked
        apply(rp, picked, 1)
        changed = refresh(picked)
        if (rp.req.kind is not ContainerKind.SIDECAR or inits_fit()) and search():
            return True
        apply(rp, picked, -1)
        for i, p in changed:
            ok[i][p] = True
            cnt[i] += 1
        return False

    def search() -> bool:
        if not todo:
            return place_inits()
        sets, at = -1, -1
        for i in todo:  # the most constrained container (todo is in request order)
            c, need = cnt[i], apps[i].count
            if c < need:  # every one must still fit
                return False
            k = c if need == 1 else comb(c, need)
            if sets < 0 or k < sets or (k == sets and tie[i] < tie[at]):
                sets, at = k, i
        rp = apps[at]
        cands = _candidates(s, elig, rp, a_mem, a_cores, a_slots, a_excl, None)
        assert len(cands) == cnt[at], "fits() and _candidates() disagree"
        todo.remove(at)
        try:
            first = [c[POS] for c in gpu.choose(cands, rp.count, gpus)]
            if attempt(rp, first):
                return True
            if sets == 1 or plan.cut_short:
                return False
            group: dict[tuple[int, ...], int] = {}
            members: list[list[int]] = []
            for c in gpu.choose(cands, len(cands), gpus):  # the policy's order
                p = c[POS]
                g = group.setdefault(sig(p), len(members))
                if g == len(members):
                    members.append([])
                members[g].append(p)
            skip = [0] * len(members)
            for p in first:
                skip[group[sig(p)]] += 1
            for takes in _classes([len(m) for m in members], rp.count):
                if list(takes) == skip:
                    continue
                if attempt(rp, [p for m, t in zip(members, takes, strict=True) for p in m[:t]]):
                    return True
                if plan.cut_short:
                    return False
            return False
        finally:
            insort(todo, at)

    if not inits_fit() or not search():
        return None
    return picks, out[-1]


def _classes(sizes: list[int], count: int) -> Iterator[tuple[int, ...]]:
    """Every way to take `count` GPUs from groups of interchangeable ones (sizes in the
    policy's order of their best GPU): how many from each group, most from the first first."""
    room = [0] * (len(sizes) + 1)
    for i in range(len(sizes) - 1, -1, -1):
        room[i] = room[i + 1] + sizes[i]
    takes = [0] * len(sizes)

    def rec(i: int, left: int) -> Iterator[tuple[int, ...]]:
        if left == 0:
            yield tuple(takes)
            return
        if room[i] < left:
            return
        for k in range(min(sizes[i], left), -1, -1):
            if room[i + 1] < left - k:
                break
            takes[i] = k
            yield from rec(i + 1, left - k)
        takes[i] = 0

    return rec(0, count)


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

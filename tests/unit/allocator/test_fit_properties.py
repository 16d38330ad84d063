"""Hypothesis: random clusters and random request sequences never break the invariants.

Checked against `alloc_helpers.reference_usage`, an independent recomputation from
`state.pods()`: no GPU over-committed in memory, cores or slots; exclusive GPUs hold one pod;
every placement satisfies its request; the summary fast path agrees with the per-GPU scan;
assign/release round-trips; same inputs give the same placements; assigns in a row, with no read
between, are each checked against the ones before, and the snapshots read after them are fresh.
"""

from __future__ import annotations

import os
from collections import Counter

from alloc_helpers import random_node, reference_usage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuslice.allocator import AllocationError, ClusterState, parse_policy
from gpuslice.allocator.plan import PodPlan
from gpuslice.allocator.reasons import NO_SET
from gpuslice.model import (
    GPU,
    ContainerAssignment,
    ContainerKind,
    GPUFilter,
    GPUSlice,
    NodeInventory,
    PodAssignment,
    PodRequest,
    SliceRequest,
)

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA L4", "Tesla T4")
POLICIES = ("binpack", "spread", "topology", "spread/binpack", "binpack/spread",
            "spread/topology")
EXAMPLES = int(os.environ.get("GPUSLICE_HYPOTHESIS_EXAMPLES", "120"))  # raise for a deep run
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeInventory]:
    invs = []
    for ni in range(draw(st.integers(1, 3))):
        invs.append(random_node(draw, f"n{ni}", draw(st.integers(1, 4)), MODELS,
                                (1000, 2000, 4096), max_split=4))
    return invs


@st.composite
def pods(draw: st.DrawFn, uuids: list[str]) -> PodRequest:
    slices = []
    for c in range(draw(st.integers(1, 3))):
        pct = draw(st.integers(0, 5)) == 0
        slices.append(SliceRequest(
            container=f"c{c}", kind=draw(st.sampled_from(list(ContainerKind))),
            count=draw(st.integers(1, 3)),
            memory_mib=None if pct else draw(st.sampled_from((0, 100, 500, 1000, 1500, 3000))),
            memory_percent=draw(st.integers(1, 100)) if pct else None,
            cores=draw(st.sampled_from((0, 0, 10, 30, 60, 100)))))
    types = st.lists(st.sampled_from(("a100", "L4", "t4", "nvidia")), max_size=2, unique=True)
    ids = st.lists(st.sampled_from(uuids), max_size=3, unique=True)
    flt = draw(st.one_of(st.just(GPUFilter()), st.builds(
        GPUFilter, use_types=types.map(tuple), nouse_types=types.map(tuple),
        use_uuids=ids.map(tuple), nouse_uuids=ids.map(tuple))))
    return PodRequest(namespace="ns", name=f"p{draw(st.integers(0, 10**6))}",
                      slices=tuple(slices), filter=flt)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[NodeInventory], list[tuple]]:
    invs = draw(clusters())
    uuids = [g.uuid for inv in invs for g in inv.gpus]
    ops: list[tuple] = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(("place", "place", "place", "release", "health")))
        if kind == "place":
            ops.append(("place", draw(pods(uuids)), draw(st.sampled_from(POLICIES))))
        elif kind == "release":
            ops.append(("release", draw(st.integers(0, 20))))
        else:
            ops.append(("health", draw(st.integers(0, len(invs) - 1)), draw(st.integers(0, 3))))
    return invs, ops


def usage_rows(state: ClusterState) -> list[tuple]:
    return [(u.gpu.uuid, u.memory_used_mib, u.cores_used, u.slices, u.exclusive)
            for u in state.gpu_usage()]


def assert_invariants(state: ClusterState) -> None:
    ref = reference_usage(state.pods())
    holders = Counter(s.uuid for a in state.pods().values() for s in
                      {x.uuid: x for x in a.slices()}.values())
    seen = set()
    for u in state.gpu_usage():
        seen.add(u.gpu.uuid)
        m, c, slots, ex = ref.get(u.gpu.uuid, (0, 0, 0, 0))
        assert (u.memory_used_mib, u.cores_used, u.slices, u.exclusive) == (m, c, slots, ex > 0), \
            "gpu_usage must equal the footprints recomputed from pods()"
        assert m <= u.gpu.memory_mib, f"{u.gpu.uuid}: memory over-committed"
        assert c <= 100, f"{u.gpu.uuid}: cores over-committed"
        assert slots <= u.gpu.split_count, f"{u.gpu.uuid}: slots over-committed"
        if ex:
            assert ex == 1 and holders[u.gpu.uuid] == 1, "an exclusive GPU holds one pod only"
    assert set(ref) <= seen, "every assigned GPU is a known GPU"


def assert_satisfies(state: ClusterState, pod: PodRequest, a: PodAssignment) -> None:
    """`a` (not yet committed) honours every part of `pod` on the current state."""
    gpus = {g.gpu.uuid: g for g in state.gpu_usage() if g.node == a.node}
    by = {c.container: c for c in a.containers}
    f = pod.filter
    assert [c.container for c in a.containers] == [r.container for r in pod.slices]
    for r in pod.slices:
        c = by[r.container]
        assert c.kind is r.kind
        assert len({s.uuid for s in c.slices}) == len(c.slices) == r.count, "distinct GPUs"
        for s in c.slices:
            u = gpus[s.uuid]
            g = u.gpu
            assert g.healthy, "never place on an unhealthy GPU"
            assert s.memory_mib == r.memory_on(g) and s.cores == r.cores
            m = g.model.lower()
            assert not f.use_types or any(t.lower() in m for t in f.use_types)
            assert not any(t.lower() in m for t in f.nouse_types)
            assert not f.use_uuids or s.uuid in f.use_uuids
            assert s.uuid not in f.nouse_uuids
            assert not u.exclusive, "never share a GPU held exclusively"
            if r.exclusive:
                assert u.slices == 0, "an exclusive slice needs an idle GPU"


def assert_fast_path_agrees(state: ClusterState, pod: PodRequest, fr) -> None:
    plan = PodPlan(pod)
    for name, rej in fr.failed.items():
        reason, _ = plan.explain(state.snapshot(name))
        assert rej.reason == reason, "summary reason == per-GPU reason"
    for name in fr.fits:
        assert plan.explain(state.snapshot(name))[0] == NO_SET, "fits: no container fails alone"
    if len(pod.slices) == 1:  # one container: fit is exact, by brute force over the GPUs
        r = pod.slices[0]
        rows = list(state.gpu_usage())
        for name in state.nodes():
            ok = 0
            for u in rows:
                g = u.gpu
                if u.node != name or not plan.allowed(g) or u.exclusive:
                    continue
                if u.slices >= g.split_count or g.memory_mib - u.memory_used_mib < r.memory_on(g):
                    continue
                if (u.slices == 0) if r.exclusive else (100 - u.cores_used >= r.cores):
                    ok += 1
            assert (name in fr.fits) == (ok >= r.count), f"{name}: {ok} GPUs can take the slice"


def run(invs: list[NodeInventory], ops: list[tuple], check: bool) -> ClusterState:
    state = ClusterState()
    for inv in invs:
        state.add_node(inv)
    for op in ops:
        if op[0] == "place":
            _, pod, pname = op
            policy = parse_policy(pname)
            fr = state.filter(pod, policy)
            pl = state.schedule(pod, policy)
            assert (pl is None) == (not fr.fits), "schedule places iff some node fits"
            if check:
                assert_fast_path_agrees(state, pod, fr)
            if pl is None:
                continue
            assert pl.node in fr.fits
            assert pl.assignment == fr.fits[pl.node].assignment, "schedule takes filter's best"
            before = usage_rows(state)
            fresh = pod.key not in state.pods()
            if check:
                assert_satisfies(state, pod, pl.assignment)
            state.assign(pod.key, pl.assignment)
            if check and fresh:
                state.release(pod.key)
                assert usage_rows(state) == before, "assign + release restores usage exactly"
                state.assign(pod.key, pl.assignment)
        elif op[0] == "release":
            keys = sorted(state.pods())
            if keys:
                state.release(keys[op[1] % len(keys)])
        else:
            _, ni, gi = op
            inv = invs[ni]
            gs = list(state.snapshot(inv.node).gpus)
            g = gs[gi % len(gs)]
            gs[gi % len(gs)] = GPU(**{**{k: getattr(g, k) for k in g.__struct_fields__},
                                      "healthy": not g.healthy})
            assert state.add_node(NodeInventory(node=inv.node, gpus=tuple(gs))) == []
        if check:
            assert_invariants(state)
    return state


@SETTINGS
@given(scenarios())
def test_random_request_sequences_never_over_commit_and_honour_every_request(scenario):
    run(*scenario, check=True)


@SETTINGS
@given(scenarios())
def test_same_inputs_give_the_same_placements(scenario):
    a = run(*scenario, check=False)
    b = run(*scenario, check=False)
    assert a.pods() == b.pods()
    assert usage_rows(a) == usage_rows(b)


@st.composite
def raw_assignments(draw: st.DrawFn) -> tuple[list[NodeInventory], list[tuple[str, PodAssignment]]]:
    invs = draw(clusters())
    out = []
    for k in range(draw(st.integers(1, 8))):
        inv = draw(st.sampled_from(invs))
        uu = [g.uuid for g in inv.gpus] + ["ghost"]
        containers = tuple(
            ContainerAssignment(container=f"c{i}", kind=draw(st.sampled_from(list(ContainerKind))),
                                slices=tuple(GPUSlice(uuid=draw(st.sampled_from(uu)),
                                                      memory_mib=draw(st.integers(0, 2500)),
                                                      cores=draw(st.sampled_from((0, 30, 100))))
                                             for _ in range(draw(st.integers(1, 2)))))
            for i in range(draw(st.integers(1, 3))))
        out.append((f"ns/r{draw(st.integers(0, k))}", PodAssignment(node=inv.node,
                                                                    containers=containers)))
    return invs, out


@SETTINGS
@given(raw_assignments())
def test_arbitrary_assignments_are_committed_whole_or_not_at_all(case):
    invs, assignments = case
    state = ClusterState()
    for inv in invs:
        state.add_node(inv)
    for key, a in assignments:
        before, pods = usage_rows(state), state.pods()
        try:
            state.assign(key, a)
        except AllocationError:
            assert usage_rows(state) == before and state.pods() == pods, "never half-applied"
        else:
            assert state.pods()[key] == a
        assert_invariants(state)
    for inv in invs:  # what a filter reads: rebuilt once, after assigns that read nothing
        rows = [(u.memory_used_mib, u.cores_used, u.slices, u.exclusive)
                for u in state.gpu_usage() if u.node == inv.node]
        snap = state.snapshot(inv.node)
        assert list(zip(snap.mem, snap.cores, snap.slots, snap.excl, strict=True)) == rows

"""Hypothesis: results kept per pod shape (reuse.py) equal filtering and scoring afresh.

Two ClusterStates get the same random history (placements, releases, GPU health changes,
nodes removed and added back); one keeps results per shape, the other (`reuse=False`)
decides every node on every call. After each step, a new pod of a random shape must get the
same fitting nodes in the same order, the same placements, the same reasons (and details) for
the others, and the same scores (FilterResult.scores), also when asked after later changes
(then they are those placements' scores, or None). Small log and entry limits force the paths
that recompute an entry whole.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import msgspec
from alloc_helpers import node, one, pod, random_node, req, state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuslice.allocator import ClusterState, FilterResult, parse_policy, reuse
from gpuslice.model import ContainerKind, GPUFilter, NodeInventory, PodRequest, SliceRequest

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA L4")
POLICIES = ("binpack", "spread", "topology", "spread/binpack")
EXAMPLES = int(os.environ.get("GPUSLICE_HYPOTHESIS_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
STEPS = ("filter", "place", "place", "release", "health", "remove", "stale scores")


@st.composite
def shapes(draw: st.DrawFn) -> PodRequest:
    slices = []
    for c in range(draw(st.integers(1, 2))):
        pct = draw(st.integers(0, 4)) == 0
        slices.append(SliceRequest(
            container=f"c{c}", kind=draw(st.sampled_from((ContainerKind.APP, ContainerKind.APP,
                                                          ContainerKind.INIT))),
            count=draw(st.integers(1, 2)),
            memory_mib=None if pct else draw(st.sampled_from((0, 300, 900, 1800))),
            memory_percent=draw(st.integers(1, 60)) if pct else None,
            cores=draw(st.sampled_from((0, 10, 40, 100)))))
    return PodRequest(namespace="ns", name="shape", slices=tuple(slices),
                      filter=draw(st.sampled_from((GPUFilter(), GPUFilter(use_types=("a100",))))),
                      node_policy=draw(st.sampled_from((None, None, "spread"))))


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[NodeInventory], list[PodRequest], str,
                                        list[tuple[str, int]], int, int]:
    invs = [random_node(draw, f"n{i}", draw(st.integers(1, 3)), MODELS, (1000, 2000),
                        max_split=3) for i in range(draw(st.integers(1, 6)))]
    pool = draw(st.lists(shapes(), min_size=1, max_size=3))
    steps = draw(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 99)), max_size=30))
    return (invs, pool, draw(st.sampled_from(POLICIES)), steps,
            draw(st.sampled_from((1, 4, 1 << 16))), draw(st.sampled_from((1, 2, 64))))


@contextlib.contextmanager
def limits(log: int, entries: int) -> Iterator[None]:
    saved = reuse._LOG, reuse.ENTRIES
    reuse._LOG, reuse.ENTRIES = log, entries
    try:
        yield
    finally:
        reuse._LOG, reuse.ENTRIES = saved


def same_filter(got: FilterResult, want: FilterResult) -> None:
    assert list(got.fits) == list(want.fits), "the same nodes fit, in node-name order"
    assert [p.assignment for p in got.fits.values()] == [p.assignment
                                                         for p in want.fits.values()]
    assert {n: (r.reason, r.resolvable, r.detail) for n, r in got.failed.items()} == {
        n: (r.reason, r.resolvable, r.detail) for n, r in want.failed.items()}


@SETTINGS
@given(histories())
def test_kept_results_equal_deciding_every_node_afresh(case):
    invs, pool, pname, steps, log, entries = case
    policy = parse_policy(pname)
    fast, exact = ClusterState(), ClusterState(reuse=False)
    for inv in invs:
        fast.add_node(inv)
        exact.add_node(inv)
    by_name = {inv.node: inv for inv in invs}
    placed: list[str] = []
    last: tuple[PodRequest, FilterResult] | None = None
    with limits(log, entries):
        for serial, (step, n) in enumerate(steps):
            pod = msgspec.structs.replace(pool[n % len(pool)], name=f"p{serial}")
            got, want = fast.filter(pod, policy), exact.filter(pod, policy)
            same_filter(got, want)
            assert want.scores is None and got.scores is not None
            kept = got.scores()
            assert kept is not None, "nothing changed since the filter"
            assert {k: kept[k] for k in got.fits} == exact.prioritize(pod, policy, want.fits)
            if step == "place" and got.fits:
                node = list(got.fits)[n % len(got.fits)]
                for s in (fast, exact):
                    s.assign(pod.key, got.fits[node].assignment)
                placed.append(pod.key)
            elif step == "release" and placed:
                key = placed.pop(n % len(placed))
                assert fast.release(key) == exact.release(key)
            elif step == "health":
                inv = by_name[sorted(by_name)[n % len(by_name)]]
                gpus = list(inv.gpus)
                i = n % len(gpus)
                gpus[i] = msgspec.structs.replace(gpus[i], healthy=not gpus[i].healthy)
                inv = by_name[inv.node] = msgspec.structs.replace(inv, gpus=tuple(gpus))
                if inv.node in fast.nodes():
                    assert fast.add_node(inv) == exact.add_node(inv)
            elif step == "remove":
                name = sorted(by_name)[n % len(by_name)]
                if name in fast.nodes():
                    assert fast.remove_node(name) == exact.remove_node(name)
                else:  # back again
                    fast.add_node(by_name[name])
                    exact.add_node(by_name[name])
            elif step == "stale scores" and last is not None:
                old_pod, old = last  # placements from before the changes since
                kept = old.scores() if old.scores is not None else None
                if kept is not None:  # None: out of date, the caller scores afresh
                    assert {k: kept[k] for k in old.fits} == exact.prioritize(
                        old_pod, policy, old.fits)
            placed = [k for k in placed if k in fast.pods()]  # removed nodes drop their pods
            assert fast.pods() == exact.pods()
            last = (pod, got)


def test_a_node_filled_then_freed_leaves_the_kept_fits_and_rejoins_them_in_order():
    binpack = parse_policy("binpack")
    st_ = state(node("a", 1, mem=1000), node("b", 1, mem=1000))
    assert list(st_.filter(pod(req(mem=600)), binpack).fits) == ["a", "b"]
    st_.assign("ns/x", one("a", (0, 600, 0)))
    fr = st_.filter(pod(req(mem=600), name="q"), binpack)
    assert list(fr.fits) == ["b"] and fr.failed["a"].reason == "insufficient GPU memory"
    assert st_.release("ns/x")
    assert list(st_.filter(pod(req(mem=600), name="r"), binpack).fits) == ["a", "b"], \
        "back in node-name order"

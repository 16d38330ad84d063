"""Pods of one gpuslice.io/gang go where the gang is: ExtenderState counts a gang's pods per node
(from the watch and from bind's assumptions), the filter chooses a gang node that fits over the
policy's choice, prioritize scores gang nodes the maximum, and nothing else is attracted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gpuslice import codec, dialects, handoff
from gpuslice.allocator import parse_policy
from gpuslice.scheduler.app import make_app
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.metrics import Metrics
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, assigned, node, pod
from .test_app import _NoBinder, post

GANG = {dialects.GANG_ANNOTATION: "train"}
NAMES = ["node-a", "node-b", "node-c"]


def state_with(*pods: dict) -> ExtenderState:
    s = ExtenderState(timeout_s=30, clock=Clock())
    for name in NAMES:
        s.on_node("ADDED", node(name))
    for p in pods:
        s.on_pod("ADDED", p)
    return s


def test_the_state_counts_a_gangs_pods_per_node_until_they_end():
    a = assigned(pod("a", annotations=GANG), "node-a", ["GPU-node-a-0"])
    b = assigned(pod("b", annotations=GANG), "node-c", ["GPU-node-c-1"])
    other_ns = assigned(pod("x", ns="other", annotations=GANG), "node-b", ["GPU-node-b-0"])
    s = state_with(a, b, other_ns, assigned(pod("plain"), "node-b", ["GPU-node-b-1"]))
    assert set(s.gang_nodes("default", "train")) == {"node-a", "node-c"}
    assert set(s.gang_nodes("other", "train")) == {"node-b"}, "a gang is a namespace's"
    s.on_pod("MODIFIED", {**b, "status": {"phase": "Succeeded"}})
    assert set(s.gang_nodes("default", "train")) == {"node-a"}
    s.on_pod("DELETED", a)
    assert not s.gang_nodes("default", "train")


def test_a_pod_being_bound_counts_for_its_gang_before_the_watch_shows_it():
    s = state_with()
    a = assigned(pod("a", annotations=GANG), "node-b", ["GPU-node-b-0"])
    assignment = codec.decode_assignment(a["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION])
    flight = handoff.flight_of(a, Clock()(), 30)  # as bind makes it, the gang from the pod
    assert flight is not None and flight.gang == "train"
    s.assume("default/a", "uid-a", assignment, flight)
    assert set(s.gang_nodes("default", "train")) == {"node-b"}
    s.forget("default/a")
    assert not s.gang_nodes("default", "train"), "a bind that failed holds no gang node"


def extender(s: ExtenderState, policy: str) -> web.Application:
    """The extender's app on `s`, the filter answering its best node alone."""
    return make_app(Evaluator(s, parse_policy(policy)), _NoBinder(),  # type: ignore[arg-type]
                    Metrics(s), ready=lambda: None, is_leader=lambda: False, choose_node=True)


@pytest.fixture
async def gang_on_a() -> AsyncIterator[TestClient]:
    """node-b the fullest (binpack's choice); a pod of gang `train` held on node-a."""
    s = state_with(assigned(pod("held", mem=8192), "node-b", ["GPU-node-b-0"],
                            allocated="main"),
                   assigned(pod("rank-0", mem=2048, annotations=GANG), "node-a",
                            ["GPU-node-a-0"], allocated="main"))
    async with TestClient(TestServer(extender(s, "binpack"))) as client:
        yield client


async def test_a_gang_pod_joins_its_gang_over_the_policys_choice(gang_on_a):
    reply = await post(gang_on_a, "filter", {"Pod": pod("rank-1", annotations=GANG),
                                             "NodeNames": NAMES})
    assert reply["NodeNames"] == ["node-a"]
    scores = await post(gang_on_a, "prioritize", {"Pod": pod("rank-1", annotations=GANG),
                                                  "NodeNames": NAMES})
    assert {h["Host"]: h["Score"] for h in scores} == {"node-a": 10, "node-b": 0, "node-c": 0}, \
        "binpack's fullest node (node-b) would score 10 too: kube-scheduler could choose it"


@pytest.mark.parametrize("annotations", [{}, {dialects.GANG_ANNOTATION: "eval"},
                                         {dialects.GANG_ANNOTATION: "Train/../x"}],
                         ids=["no-gang", "another-gang", "invalid-gang"])
async def test_other_pods_are_not_attracted(gang_on_a, annotations):
    reply = await post(gang_on_a, "filter", {"Pod": pod("p", annotations=annotations),
                                             "NodeNames": NAMES})
    assert reply["NodeNames"] == ["node-b"], "the policy's choice"


async def test_a_gang_node_not_offered_leaves_the_offered_ones_their_policy_scores(gang_on_a):
    """node-a holds the gang but kube-scheduler offers only node-b and node-c: prioritize scores
    them by the policy (binpack: the fuller node-b first), not all 0 for a node it did not ask
    about."""
    scores = await post(gang_on_a, "prioritize", {"Pod": pod("rank-1", annotations=GANG),
                                                  "NodeNames": ["node-b", "node-c"]})
    got = {h["Host"]: h["Score"] for h in scores}
    assert got["node-b"] > got["node-c"], got


async def test_where_the_gangs_node_has_no_room_the_policy_chooses(gang_on_a):
    big = pod("rank-1", mem=16384, gpus=2, annotations=GANG)  # node-a has a GPU in use
    reply = await post(gang_on_a, "filter", {"Pod": big, "NodeNames": NAMES})
    assert reply["NodeNames"] == ["node-c"] and list(reply["FailedNodes"]) == ["node-a", "node-b"]
    reply = await post(gang_on_a, "filter", {"Pod": pod("rank-2", annotations=GANG),
                                             "NodeNames": ["node-b", "node-c"]})
    assert reply["NodeNames"] == ["node-b"], "the gang's node not offered: the policy's choice"


async def test_the_filters_choice_holds_the_gang_until_its_bind_arrives():
    """kube-scheduler filters the next pod while the last one's bind is on the way: the gang's
    second pod follows the first's chosen node, not spread's choice of an emptier one."""
    clock = Clock()
    s = ExtenderState(timeout_s=30, clock=clock)
    for name in NAMES:
        s.on_node("ADDED", node(name))
    async with TestClient(TestServer(extender(s, "spread"))) as http:
        first = await post(http, "filter", {"Pod": pod("rank-0", annotations=GANG),
                                            "NodeNames": NAMES})
        s.on_pod("ADDED", assigned(pod("other", mem=8192), first["NodeNames"][0],
                                   [f"GPU-{first['NodeNames'][0]}-0"], allocated="main"))
        second = await post(http, "filter", {"Pod": pod("rank-1", annotations=GANG),
                                             "NodeNames": NAMES})
        assert second["NodeNames"] == first["NodeNames"], "spread alone would leave that node"
        clock.t += 31  # the first pod's bind never came: the choice lapses
        third = await post(http, "filter", {"Pod": pod("rank-2", annotations=GANG),
                                            "NodeNames": NAMES})
        assert third["NodeNames"] != first["NodeNames"]


def test_the_sweep_forgets_lapsed_gang_choices():
    clock = Clock()
    s = ExtenderState(timeout_s=30, clock=clock)
    s.gang_chosen("default", "train", "node-a")
    assert set(s.gang_nodes("default", "train")) == {"node-a"}
    assert not s.gang_held("default", "train"), "a choice is not a pod held there"
    clock.t += 31
    s.sweep()
    assert not s._gang_chosen, "nothing is kept for gangs that are gone"


def _sized(name: str, size: str, **kw) -> dict:
    return pod(name, mem=8192, annotations={**GANG, dialects.GANG_SIZE_ANNOTATION: size}, **kw)


@pytest.fixture
async def b_nearly_full() -> AsyncIterator[TestClient]:
    """binpack prefers node-b, which has room for one more 8 GiB pod; node-a and node-c for four."""
    s = state_with(*(assigned(pod(f"held-{i}", mem=8192), "node-b", [f"GPU-node-b-{i // 2}"],
                              allocated="main") for i in range(3)))
    async with TestClient(TestServer(extender(s, "binpack"))) as client:
        yield client


async def test_a_gangs_first_pod_goes_where_the_whole_gang_fits(b_nearly_full):
    scores = await post(b_nearly_full, "prioritize", {"Pod": _sized("rank-0", "3"),
                                                      "NodeNames": NAMES})
    got = {h["Host"]: h["Score"] for h in scores}
    assert got["node-a"] == 10, "the best node with room for the gang (the first of equals)"
    reply = await post(b_nearly_full, "filter", {"Pod": _sized("rank-0", "3"),
                                                 "NodeNames": NAMES})
    assert reply["NodeNames"] == ["node-a"], "node-b takes one of the three"


@pytest.mark.parametrize("size", ["1", "4", "5"], ids=["alone", "fits-elsewhere", "fits-nowhere"])
async def test_without_a_node_for_the_whole_gang_or_a_gang_of_one_the_policy_chooses(
        b_nearly_full, size):
    reply = await post(b_nearly_full, "filter", {"Pod": _sized("rank-0", size),
                                                 "NodeNames": NAMES})
    want = "node-a" if size == "4" else "node-b"
    assert reply["NodeNames"] == [want]


async def _filter_with(s: ExtenderState, policy: str, p: dict) -> list[str]:
    async with TestClient(TestServer(extender(s, policy))) as client:
        return (await post(client, "filter", {"Pod": p, "NodeNames": NAMES}))["NodeNames"]


async def test_a_gang_pod_goes_where_its_gang_is_before_looking_for_room():
    s = state_with(*(assigned(_sized(f"rank-{i}", "3"), "node-b", ["GPU-node-b-0"],
                              allocated="main") for i in range(2)))
    assert await _filter_with(s, "spread", _sized("rank-2", "3")) == ["node-b"]


def test_room_is_tried_in_score_order_and_for_a_bounded_number_of_placements(monkeypatch):
    """The extender's loop is single-threaded: a gang of 64 over 100 nodes where none has room
    would try 2,100 placements. Nodes are tried best score first, and the search stops at
    _ROOM_TRIES."""
    from gpuslice.scheduler import prioritize

    names = [f"n{i:03d}" for i in range(100)]
    s = ExtenderState(timeout_s=30, clock=Clock())
    for name in names:
        s.on_node("ADDED", node(name))
    ev = Evaluator(s, parse_policy("binpack"))
    tried: list[str] = []
    real = s.cluster.room
    monkeypatch.setattr(s.cluster, "room", lambda p, pol, n, most: tried.append(n) or
                        real(p, pol, n, most))
    big = pod("rank-0", mem=1024, annotations={**GANG, dialects.GANG_SIZE_ANNOTATION: "64"})
    assert not prioritize.gang_targets(ev, ev.cached(big, names), big, names), "no node has room"
    # each node takes 20 (2 GPUs x 10 slices): 21 placements tried on each
    assert tried == names[:-(-prioritize._ROOM_TRIES // 21)], "in score order, then it stops"


async def test_pods_held_elsewhere_count_against_the_gangs_size():
    """Two of a gang of four are on node-b, now full: the other two need a node with room for
    both, not binpack's node-c, which takes one."""
    def cluster() -> ExtenderState:
        return state_with(*(assigned(_sized(f"rank-{i}", "4"), "node-b", ["GPU-node-b-0"],
                                     allocated="main") for i in range(2)),
                          *(assigned(pod(f"b-{i}", mem=8192), "node-b", ["GPU-node-b-1"],
                                     allocated="main") for i in range(2)),
                          *(assigned(pod(f"c-{i}", mem=8192), "node-c", [f"GPU-node-c-{i // 2}"],
                                     allocated="main") for i in range(3)))
    assert await _filter_with(cluster(), "binpack", _sized("rank-2", "4")) == ["node-a"]
    assert await _filter_with(cluster(), "binpack", pod("rank-2", mem=8192, annotations=GANG)) \
        == ["node-c"], "without the size: the policy's choice"


async def test_a_gang_node_that_kube_scheduler_did_not_offer_does_not_stop_the_search_for_room():
    """rank-0 of three is on node-a, which kube-scheduler's own filters removed this time: the
    other two need a node with room for both among those offered, not binpack's node-b."""
    s = state_with(*(assigned(pod(f"held-{i}", mem=8192), "node-b", [f"GPU-node-b-{i // 2}"],
                              allocated="main") for i in range(3)),
                   assigned(_sized("rank-0", "3"), "node-a", ["GPU-node-a-0"], allocated="main"))
    async with TestClient(TestServer(extender(s, "binpack"))) as client:
        reply = await post(client, "filter", {"Pod": _sized("rank-1", "3"),
                                              "NodeNames": ["node-b", "node-c"]})
    assert reply["NodeNames"] == ["node-c"], "node-b takes one of the two"


async def test_other_pods_keep_off_the_node_chosen_for_a_sized_gang_while_its_pods_come():
    """rank-0 of three went to node-a (room for the gang; node-b has room for one). A 16 GiB pod
    that binpack would put beside it (node-a is fuller than node-c) goes to node-c while the
    gang's other two are on the way, and to node-a again once they are held or the choice
    lapses; without a size nothing is kept. The gang's own pods are never kept off."""
    def cluster(clock: Clock) -> ExtenderState:
        s = ExtenderState(timeout_s=30, clock=clock)
        for name in NAMES:
            s.on_node("ADDED", node(name))
        for i in range(3):
            s.on_pod("ADDED", assigned(pod(f"held-{i}", mem=8192), "node-b",
                                       [f"GPU-node-b-{i // 2}"], allocated="main"))
        return s

    async def whole_gpu(s: ExtenderState) -> list[str]:
        async with TestClient(TestServer(extender(s, "binpack"))) as client:
            return (await post(client, "filter", {"Pod": pod("solo", mem=16384),
                                                  "NodeNames": NAMES}))["NodeNames"]

    for size in ("3", None):
        clock = Clock()
        s = cluster(clock)
        rank0 = _sized("rank-0", size) if size else pod("rank-0", mem=8192, annotations=GANG)
        async with TestClient(TestServer(extender(s, "binpack"))) as client:
            got = await post(client, "filter", {"Pod": rank0, "NodeNames": NAMES})
        assert got["NodeNames"] == ["node-a"] if size else ["node-b"]
        if not size:
            s.on_pod("ADDED", assigned(rank0, "node-a", ["GPU-node-a-0"], allocated="main"))
            assert await whole_gpu(s) == ["node-a"], "no size: nothing kept"
            continue
        s.on_pod("ADDED", assigned(rank0, "node-a", ["GPU-node-a-0"], allocated="main"))
        assert await whole_gpu(s) == ["node-c"], "node-a is kept for the gang's other two"
        clock.t += 31
        assert await whole_gpu(s) == ["node-a"], "the choice lapsed"
        clock.t -= 31
        assert s.kept_for_gangs() == {"node-a"} and not s.kept_for_gangs(but=("default", "train"))
        for i in (1, 2):
            s.on_pod("ADDED", assigned(_sized(f"rank-{i}", "3"), "node-a", [f"GPU-node-a-{i - 1}"],
                                       allocated="main"))
        assert not s.kept_for_gangs(), "the whole gang is held: nothing kept"

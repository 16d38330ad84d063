"""filter and prioritize: fits, reasons, unresolvable causes, the in-flight wait, full Nodes."""

from __future__ import annotations

import json

import msgspec
import pytest

from gpuslice.allocator import parse_policy
from gpuslice.errors import RequestError
from gpuslice.scheduler import wire
from gpuslice.scheduler.filter import UNACCOUNTED, Evaluator, filter_reply, unfit_message
from gpuslice.scheduler.prioritize import prioritize_reply
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, assigned, node, pod


def evaluator(*nodes: dict, pods: tuple[dict, ...] = (), policy: str = "binpack") -> Evaluator:
    s = ExtenderState(timeout_s=30, clock=Clock())
    for n in nodes:
        s.on_node("ADDED", n)
    for p in pods:
        s.on_pod("ADDED", p)
    return Evaluator(s, parse_policy(policy))


def test_every_fitting_node_is_returned_and_every_other_has_the_allocators_reason():
    ev = evaluator(node("big", mem=32768), node("small", mem=2048), node("plain", inventory=False))
    names = ["big", "small", "plain", "unknown"]
    reply = filter_reply(ev.cached(pod("p", mem=4096), names), names)
    assert reply.NodeNames == ["big"]
    assert reply.FailedNodes == {"small": "insufficient GPU memory"}
    assert reply.FailedAndUnresolvableNodes == {"plain": "node has no GPU inventory",
                                                "unknown": "node has no GPU inventory"}


def test_one_cause_gives_identical_reason_text_on_every_node():
    ev = evaluator(*(node(f"n{i}", mem=1024 * (i + 1)) for i in range(4)))
    names = [f"n{i}" for i in range(4)]
    reply = filter_reply(ev.cached(pod("p", mem=8192), names), names)
    assert set(reply.FailedNodes.values()) == {"insufficient GPU memory"}
    assert len(reply.FailedNodes) == 4, "kube-scheduler counts identical reasons: 4 of one cause"


def test_a_wrong_gpu_type_is_unresolvable_because_preemption_cannot_change_the_model():
    ev = evaluator(node("a10", gpu_model="NVIDIA A10"))
    p = pod("p", annotations={"nvidia.com/use-gputype": "H100"})
    reply = filter_reply(ev.cached(p, ["a10"]), ["a10"])
    assert reply.FailedAndUnresolvableNodes == {"a10": "GPU type not allowed by pod"}


def test_a_confusable_pod_waits_for_the_in_flight_one_and_the_reason_names_it():
    first = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])
    ev = evaluator(node("n1"), node("n2"), pods=(first,))
    reply = filter_reply(ev.cached(pod("second", mem=2048), ["n1", "n2"]), ["n1", "n2"])
    assert reply.NodeNames == ["n2"]
    assert reply.FailedAndUnresolvableNodes == {
        "n1": "waiting for pod default/first to be allocated on this node"}


def test_an_interchangeable_pod_does_not_wait():
    first = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])
    ev = evaluator(node("n1"), pods=(first,))
    reply = filter_reply(ev.cached(pod("twin", mem=4096), ["n1"]), ["n1"])
    assert reply.NodeNames == ["n1"], "same shape: a swap gives each pod what it asked for"


def test_a_distinguishable_pod_does_not_wait():
    first = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])
    ev = evaluator(node("n1"), pods=(first,))
    reply = filter_reply(ev.cached(pod("two", mem=2048, gpus=2), ["n1"]), ["n1"])
    assert reply.NodeNames == ["n1"], "a different first device request tells them apart"


def test_a_node_with_uncountable_assignments_is_refused():
    a = assigned(pod("a", mem=12288), "n1", ["GPU-n1-0"])
    b = assigned(pod("b", mem=12288), "n1", ["GPU-n1-0"])
    ev = evaluator(node("n1"), pods=(a, b))
    reply = filter_reply(ev.cached(pod("p", mem=1024), ["n1"]), ["n1"])
    assert reply.FailedAndUnresolvableNodes == {"n1": UNACCOUNTED}


def test_an_invalid_pod_raises_the_dialect_parsers_message():
    ev = evaluator(node("n1"))
    with pytest.raises(RequestError, match="gpucores=150"):
        ev.cached(pod("p", cores=150), ["n1"])


def test_prioritize_scores_every_offered_node_by_policy():
    busy = assigned(pod("busy", mem=12288), "full", ["GPU-full-0"], allocated="main")
    for policy, best in (("binpack", "full"), ("spread", "empty")):
        ev = evaluator(node("full"), node("empty"), pods=(busy,), policy=policy)
        names = ["full", "empty", "nothing"]
        scores = prioritize_reply(ev, ev.cached(pod("p", mem=1024), names), names)
        got = {h.Host: h.Score for h in scores}
        assert list(got) == names and got["nothing"] == 0
        assert max(got, key=got.__getitem__) == best, f"{policy} prefers {best}"
        assert all(0 <= s <= 10 for s in got.values())


def test_prioritize_scores_what_the_filter_saw_even_after_another_pod_was_placed():
    ev = evaluator(node("n1"), node("n2"))
    p, names = pod("p", mem=1024), ["n1", "n2"]
    seen = ev.cached(p, names)
    ev.state.on_pod("ADDED", assigned(pod("other", mem=4096), "n1", ["GPU-n1-0"],
                                      allocated="main"))
    assert ev.cached(p, names, as_filtered=True) is seen, "prioritize reuses the filter's answer"
    fresh = ev.cached(p, names)
    assert fresh is not seen, "filter and bind decide on the state as it is now"
    assert fresh.fits["n1"].fullness() > seen.fits["n1"].fullness()


def test_full_nodes_are_answered_from_their_own_objects_and_echoed_back():
    ev = evaluator()  # the cache knows no node: the objects alone decide
    nodes = wire.NodeList(items=[msgspec.Raw(json.dumps(n).encode())
                                 for n in (node("n1"), node("n2", mem=1024))])
    v, names = ev.given(pod("p"), nodes)
    assert names == ["n1", "n2"] and list(v.fits) == ["n1"]
    assert ev.state.cluster.nodes() == [], "nothing is added or reserved"


def test_unfit_message_counts_reasons_and_shows_one_example_each():
    ev = evaluator(node("a", mem=1024), node("b", mem=1024), node("c", inventory=False))
    names = ["a", "b", "c"]
    msg = unfit_message(ev.cached(pod("p", mem=4096), names), names)
    assert msg.startswith("0/3 nodes can take the GPU request: 2 insufficient GPU memory (a: ")
    assert "1 node has no GPU inventory (c: " in msg

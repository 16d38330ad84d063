"""Node scores: 0..10 from fullness after placement, and the tie-break in schedule."""

from __future__ import annotations

from alloc_helpers import node, one, pod, req, state

from gpuslice.allocator import parse_policy


def test_binpack_scores_the_node_as_full_as_it_will_be_with_the_pod():
    st = state(node("a", 1, mem=1000), node("b", 1, mem=1000))
    st.assign("ns/x", one("b", (0, 600, 60)))
    p = pod(req(mem=400, cores=40))
    fr = st.filter(p, parse_policy("binpack"))
    assert st.prioritize(p, parse_policy("binpack"), fr.fits) == {"a": 4, "b": 10}, \
        "a: (0.4 + 0.4)/2; b: (1.0 + 1.0)/2"
    assert st.prioritize(p, parse_policy("spread"), fr.fits) == {"a": 6, "b": 0}


def test_per_pod_node_policy_override_changes_the_scores():
    st = state(node("a", 1, mem=1000), node("b", 1, mem=1000))
    st.assign("ns/x", one("b", (0, 600, 0)))
    p = pod(req(mem=100), node_policy="spread")
    pl = st.schedule(p, parse_policy("binpack"))
    assert pl is not None and pl.node == "a"


def test_equal_scores_fall_to_the_finer_fullness_before_the_node_name():
    st = state(node("a", 1, mem=1000), node("b", 1, mem=1000))
    st.assign("ns/x", one("b", (0, 20, 0)))  # both score 0 under binpack, b a bit fuller
    p = pod(req(mem=10))
    fr = st.filter(p, parse_policy("binpack"))
    assert st.prioritize(p, parse_policy("binpack"), fr.fits) == {"a": 0, "b": 0}
    pl = st.schedule(p, parse_policy("binpack"))
    assert pl is not None and pl.node == "b", "binpack still prefers the fuller node"


def test_percent_request_scores_from_the_gpu_it_would_take():
    st = state(node("a", 1, mem=1000), node("b", 1, mem=3000))
    p = pod(req(pct=50))
    fr = st.filter(p, parse_policy("binpack"))
    assert st.prioritize(p, parse_policy("binpack"), fr.fits) == {"a": 3, "b": 3}, \
        "(0.5 + 0) / 2 rounds up to 3 on both"
    assert fr.fits["b"].assignment.containers[0].slices[0].memory_mib == 1500

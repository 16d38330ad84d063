"""ClusterState.room: how many pods like one a node takes together (the pods of one gang, which
the extender keeps on one node). It must equal placing them one by one, as filter and assign
would, and leave the state as it was."""

from __future__ import annotations

from alloc_helpers import node, pod, req, state
from hypothesis import given
from hypothesis import strategies as st
from test_fit_properties import POLICIES, SETTINGS, clusters, pods

from gpuslice.allocator import AllocationError, parse_policy

BINPACK = parse_policy("binpack")


def test_room_counts_the_pods_a_node_takes_together_up_to_what_is_asked():
    st_ = state(node("a", 2, mem=81920))
    p = pod(req(mem=30000, cores=30))
    assert st_.room(p, BINPACK, "a", 10) == 4, "two a GPU by memory, on two GPUs"
    assert st_.room(p, BINPACK, "a", 3) == 3
    assert st_.room(p, BINPACK, "unknown", 3) == 0


@SETTINGS
@given(data=st.data(), policy=st.sampled_from(POLICIES), most=st.integers(1, 6))
def test_room_is_placing_them_one_by_one_and_changes_nothing(data, policy, most):
    invs = data.draw(clusters())
    p = data.draw(pods([g.uuid for inv in invs for g in inv.gpus]))
    pol = parse_policy(policy)
    cs, copy = state(*invs), state(*invs)
    uuids = [g.uuid for inv in invs for g in inv.gpus]
    for i, other in enumerate(data.draw(st.lists(pods(uuids), max_size=3))):  # a used cluster
        if (placed := cs.schedule(other, pol)) is not None:
            cs.assign(f"ns/used-{i}", placed.assignment)
            copy.assign(f"ns/used-{i}", placed.assignment)
    for inv in invs:
        before = list(cs.gpu_usage())
        got = cs.room(p, pol, inv.node, most)
        assert list(cs.gpu_usage()) == before, "room placed nothing for real"
        placed = 0
        while placed < most:
            fit = copy.filter(p, pol, [inv.node]).fits.get(inv.node)
            if fit is None:
                break
            try:
                copy.assign(f"ns/{inv.node}-{placed}", fit.assignment)
            except AllocationError as e:  # a placement the filter gave must commit
                raise AssertionError(f"filter's placement did not commit: {e}") from e
            placed += 1
        assert got == placed, f"{inv.node}: room {got}, one by one {placed}"

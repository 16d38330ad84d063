"""ClusterState bookkeeping: assign/release, all-or-nothing errors, node changes, usage."""

from __future__ import annotations

import re

import pytest
from alloc_helpers import gpu, node, one, pod, reference_usage, req, state

from gpuslice.allocator import AllocationError, GPUUsage, parse_policy
from gpuslice.errors import GpusliceError
from gpuslice.model import (
    ContainerAssignment,
    ContainerKind,
    GPUSlice,
    NodeInventory,
    PodAssignment,
)

BINPACK = parse_policy("binpack")


def _usage(st) -> list[tuple[str, int, int, int, bool]]:
    return [(u.gpu.uuid, u.memory_used_mib, u.cores_used, u.slices, u.exclusive)
            for u in st.gpu_usage()]


def test_allocation_error_is_a_gpuslice_error():
    assert issubclass(AllocationError, GpusliceError)


def test_nodes_are_listed_sorted_and_removed_with_their_pods():
    st = state(node("b", 1), node("a", 1))
    st.assign("ns/p", one("b", (0, 10, 0)))
    assert st.nodes() == ["a", "b"]
    assert st.remove_node("b") == ["ns/p"]
    assert st.nodes() == ["a"] and st.pods() == {}


def test_gpu_usage_reports_every_gpu_in_node_then_index_order():
    st = state(node("b", 2), node("a", 1))
    st.assign("ns/p", one("b", (1, 300, 20)))
    rows = list(st.gpu_usage())
    assert all(isinstance(r, GPUUsage) for r in rows)
    assert [(r.node, r.gpu.index) for r in rows] == [("a", 0), ("b", 0), ("b", 1)]
    assert (rows[2].memory_used_mib, rows[2].cores_used, rows[2].slices) == (300, 20, 1)


@pytest.mark.parametrize(("assignment", "message"), [
    pytest.param(one("n", (0, 81921, 0)), "memory 0 + 81921 MiB > 81920 MiB", id="memory"),
    pytest.param(one("n", (1, 10, 60)), "cores 50 + 60% > 100%", id="cores"),
    pytest.param(one("n", (1, 10, 100)), "needs an idle GPU", id="exclusive on a used GPU"),
    pytest.param(one("n", (2, 10, 0)), "held exclusively by another pod", id="held"),
    pytest.param(one("n", (9, 10, 0)), "not a GPU of node 'n'", id="unknown GPU"),
    pytest.param(one("x", (0, 10, 0)), "node 'x' is not in the GPU inventory", id="node"),
    pytest.param(one("n", (0, 10, 0), (0, 10, 0)), "listed twice", id="same GPU twice"),
    pytest.param(one("n", (0, -1, 0)), "out of range", id="negative memory"),
    pytest.param(one("n", (3, 10, 0)), "slots 1 + 1 > split count 1", id="slots"),
])
def test_assign_refuses_over_commit_and_leaves_state_unchanged(assignment, message):
    inv = NodeInventory(node="n", gpus=tuple(
        gpu("n", i, split_count=1 if i == 3 else 10) for i in range(4)))
    st = state(inv)
    st.assign("ns/a", one("n", (1, 100, 50)))
    st.assign("ns/b", one("n", (2, 100, 100)))
    st.assign("ns/c", one("n", (3, 100, 0)))
    before, pods = _usage(st), st.pods()
    with pytest.raises(AllocationError, match=re.escape(message)):
        st.assign("ns/new", assignment)
    assert _usage(st) == before and st.pods() == pods, "a refused assign changes nothing"


def test_assign_reports_every_problem_at_once():
    st = state(node("n", 2))
    bad = one("n", (0, 90000, 0), (1, 90000, 0))
    with pytest.raises(AllocationError) as e:
        st.assign("ns/p", bad)
    assert "n-gpu0" in str(e.value) and "n-gpu1" in str(e.value)


def test_reassigning_a_key_replaces_the_old_assignment_even_when_it_overlaps():
    st = state(node("n", 1, mem=1000), node("m", 1))
    st.assign("ns/p", one("n", (0, 800, 0)))
    st.assign("ns/p", one("n", (0, 900, 0)))  # would not fit next to the old one
    assert [u.memory_used_mib for u in st.gpu_usage() if u.node == "n"] == [900]
    st.assign("ns/p", one("m", (0, 5, 0)))
    assert [u.memory_used_mib for u in st.gpu_usage()] == [5, 0], "moved to the other node"


def test_a_relist_rebuilds_each_node_once_before_the_next_read(monkeypatch):
    """Assigns mark their node; its snapshot is rebuilt once, before the next read (a restarted
    extender lists every bound pod before its first filter), not once per pod."""
    from gpuslice.allocator import state as state_module

    built: list[str] = []
    real = state_module.NodeSnapshot
    monkeypatch.setattr(state_module, "NodeSnapshot",
                        lambda inv, use: built.append(inv.node) or real(inv, use))
    st = state(node("m", 8), node("n", 8))
    built.clear()
    for i in range(64):
        st.assign(f"ns/p{i}", one("mn"[i % 2], (i // 2 % 8, 10, 1)))
    assert built == [], "no snapshot rebuilt while nothing reads"
    # 4 pods of 10 MiB on every GPU: what is left is exactly 81,880 MiB
    assert st.filter(pod(req(mem=81920 - 39)), BINPACK).fits == {}
    assert sorted(built) == ["m", "n"], "each node rebuilt once, all 64 pods counted"
    assert set(st.filter(pod(req(mem=81920 - 40)), BINPACK).fits) == {"m", "n"}
    assert len(built) == 2, "nothing changed since: nothing rebuilt"


def test_release_round_trip_restores_usage_exactly():
    st = state(node("n", 2))
    st.assign("ns/a", one("n", (0, 123, 7)))
    before = _usage(st)
    st.assign("ns/b", one("n", (0, 1000, 30), (1, 1000, 30)))
    assert st.release("ns/b") is True
    assert st.release("ns/b") is False, "releasing twice is a no-op"
    assert _usage(st) == before


def test_exclusive_slice_with_a_same_phase_neighbour_is_refused():
    st = state(node("n", 1))
    bad = PodAssignment(node="n", containers=(
        ContainerAssignment(container="a", slices=(GPUSlice(uuid="n-gpu0", memory_mib=1,
                                                            cores=100),)),
        ContainerAssignment(container="b", slices=(GPUSlice(uuid="n-gpu0", memory_mib=1,
                                                            cores=0),))))
    with pytest.raises(AllocationError, match="exclusive slice shares it"):
        st.assign("ns/p", bad)


def test_assign_accepts_init_and_app_overlap_under_the_lifecycle_rule():
    st = state(node("n", 1, mem=1000))
    a = PodAssignment(node="n", containers=(
        ContainerAssignment(container="i", kind=ContainerKind.INIT,
                            slices=(GPUSlice(uuid="n-gpu0", memory_mib=900, cores=100),)),
        ContainerAssignment(container="app",
                            slices=(GPUSlice(uuid="n-gpu0", memory_mib=700, cores=40),))))
    st.assign("ns/p", a)
    (u,) = st.gpu_usage()
    assert (u.memory_used_mib, u.cores_used, u.slices, u.exclusive) == (900, 100, 1, True), \
        "footprint = max of the phases; an exclusive init holds the GPU for the pod"
    assert reference_usage(st.pods()) == {"n-gpu0": (900, 100, 1, 1)}


def test_health_change_keeps_pods_and_stops_new_placements_there():
    st = state(node("n", 2))
    st.assign("ns/p", one("n", (0, 100, 0)))
    dropped = st.add_node(NodeInventory(node="n", gpus=(gpu("n", 0, healthy=False),
                                                        gpu("n", 1))))
    assert dropped == [] and "ns/p" in st.pods()
    assert _usage(st)[0][1] == 100, "usage of a GPU that turned unhealthy is kept"
    pl = st.schedule(pod(req(mem=1)), BINPACK)
    assert pl is not None and pl.assignment.containers[0].slices[0].uuid == "n-gpu1"


def test_replacing_a_node_drops_pods_on_gpus_that_disappeared():
    st = state(node("n", 2))
    st.assign("ns/keep", one("n", (0, 100, 0)))
    st.assign("ns/gone", one("n", (1, 100, 0)))
    assert st.add_node(node("n", 1)) == ["ns/gone"]
    assert sorted(st.pods()) == ["ns/keep"]
    assert _usage(st) == [("n-gpu0", 100, 0, 1, False)]


def test_duplicate_gpu_uuids_in_an_inventory_are_refused():
    with pytest.raises(AllocationError, match="listed twice"):
        state(NodeInventory(node="n", gpus=(gpu("n", 0), gpu("n", 0))))


def test_state_accepts_assignments_another_policy_chose():
    st = state(node("n", 4))
    for i, policy in enumerate(("spread", "binpack", "topology")):
        pl = st.schedule(pod(req(mem=1000, count=2), name=f"p{i}"), parse_policy(policy))
        assert pl is not None
        st.assign(f"ns/p{i}", pl.assignment)
    rebuilt = state(node("n", 4))
    for k, a in st.pods().items():
        rebuilt.assign(k, a)
    assert _usage(rebuilt) == _usage(st), "annotations alone rebuild the same usage"

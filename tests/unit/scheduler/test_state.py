"""ExtenderState: rebuilt from annotations alone; releases, in-flight marks, waiting slices."""

from __future__ import annotations

from gpuslice.scheduler.state import ExtenderState, trim_node, trim_pod

from .objects import NOW, Clock, assigned, node, pod


def used(state: ExtenderState, uuid: str) -> int:
    return next(u.memory_used_mib for u in state.cluster.gpu_usage() if u.gpu.uuid == uuid)


def fresh(clock: Clock | None = None) -> ExtenderState:
    return ExtenderState(timeout_s=30, clock=clock or Clock())


def test_a_restart_rebuilds_the_same_usage_from_annotations_in_any_event_order():
    events = [("node", node("n1")), ("pod", assigned(pod("a", mem=4096), "n1", ["GPU-n1-0"])),
              ("pod", assigned(pod("b", mem=2048), "n1", ["GPU-n1-0"]))]
    for order in (events, events[::-1]):
        s = fresh()
        for what, obj in order:
            (s.on_node if what == "node" else s.on_pod)("ADDED", obj)
        assert used(s, "GPU-n1-0") == 6144, "pods seen before their node count once it arrives"
        assert s.waiting("n1") == 0


def test_deleted_and_failed_pods_free_their_slices_at_once():
    s = fresh()
    s.on_node("ADDED", node("n1"))
    a = assigned(pod("a"), "n1", ["GPU-n1-0"])
    s.on_pod("ADDED", a)
    s.on_pod("MODIFIED", {**a, "status": {"phase": "Failed"}})  # the kubelet rejected it
    assert used(s, "GPU-n1-0") == 0
    s.on_pod("ADDED", a)
    s.on_pod("DELETED", a)
    assert used(s, "GPU-n1-0") == 0


def test_an_unbound_assignment_holds_nothing_and_puts_no_pod_in_flight():
    """The Binding writes the assignment and spec.nodeName in one update, so an assignment on a
    pod bound to no node is not one gpuslice's bind wrote (a bind in progress is held by
    `assume` until the watch shows it: test_assume_holds_slices_...)."""
    clock = Clock()
    s = fresh(clock)
    s.on_node("ADDED", node("n1"))
    s.on_pod("ADDED", assigned(pod("a"), "n1", ["GPU-n1-0"], bound=False, at=NOW + 25))
    s.sweep()
    assert used(s, "GPU-n1-0") == 0 and s.flights("n1") == [] and s.waiting("n1") == 0
    assert s.held_on("n1") == {}


def admitted(p: dict) -> dict:
    """`p` after the kubelet's first status write (it follows admission)."""
    p["status"] = {"phase": "Pending", "containerStatuses": [{"name": "main"}]}
    return p


def test_a_bound_pod_stays_in_flight_past_the_timeout_until_the_kubelet_admits_it():
    """A kubelet restarted or cut off may admit it late: a confusable pod bound beside it by
    then would make the node agent refuse both (handoff.py)."""
    clock = Clock()
    s = fresh(clock)
    s.on_node("ADDED", node("n1"))
    s.on_pod("ADDED", assigned(pod("a"), "n1", ["GPU-n1-0"]))
    assert [f.key for f in s.flights("n1")] == ["default/a"]
    clock.t = NOW + 3600
    s.sweep()
    assert [f.key for f in s.flights("n1")] == ["default/a"], "never admitted: still in flight"
    s.on_pod("MODIFIED", admitted(assigned(pod("a"), "n1", ["GPU-n1-0"])))
    assert s.flights("n1") == []
    assert used(s, "GPU-n1-0") == 4096, "its slice stays held"


def test_a_pod_leaves_flight_when_the_node_agent_marks_it_allocated():
    s = fresh()
    s.on_node("ADDED", node("n1"))
    s.on_pod("ADDED", assigned(pod("a"), "n1", ["GPU-n1-0"]))
    s.on_pod("MODIFIED", assigned(pod("a"), "n1", ["GPU-n1-0"], allocated="main"))
    assert s.flights("n1") == []


def test_over_committed_assignments_wait_and_the_node_is_reported():
    s = fresh()
    s.on_node("ADDED", node("n1", mem=8192))
    s.on_pod("ADDED", assigned(pod("a", mem=6144), "n1", ["GPU-n1-0"]))
    s.on_pod("ADDED", assigned(pod("b", mem=6144), "n1", ["GPU-n1-0"]))
    assert s.waiting("n1") == 1, "the second pod cannot be counted: the node must be refused"
    s.on_pod("DELETED", assigned(pod("a", mem=6144), "n1", ["GPU-n1-0"]))
    assert s.waiting("n1") == 0 and used(s, "GPU-n1-0") == 6144, "b is counted once a left"


def test_an_inventory_that_loses_a_gpu_keeps_its_pods_waiting_until_it_returns():
    s = fresh()
    s.on_node("ADDED", node("n1", gpus=2))
    s.on_pod("ADDED", assigned(pod("a"), "n1", ["GPU-n1-1"]))
    s.on_node("MODIFIED", node("n1", gpus=1))
    assert s.waiting("n1") == 1
    s.on_node("MODIFIED", node("n1", gpus=2))
    assert s.waiting("n1") == 0 and used(s, "GPU-n1-1") == 4096


def test_a_malformed_inventory_reads_as_no_inventory():
    s = fresh()
    bad = node("n1")
    bad["metadata"]["annotations"]["gpuslice.io/inventory"] = '{"version": 1, "gpus": 7}'
    s.on_node("ADDED", bad)
    assert not s.has_inventory("n1") and s.cluster.nodes() == []


def test_assume_holds_slices_before_the_watch_and_forget_gives_them_back():
    s = fresh()
    s.on_node("ADDED", node("n1"))
    p = pod("a")
    s.on_pod("ADDED", p)
    a = assigned(p, "n1", ["GPU-n1-0"])
    from gpuslice import codec
    assignment = codec.decode_assignment(a["metadata"]["annotations"]["gpuslice.io/assignment"])
    s.assume("default/a", "uid-a", assignment, None)
    s.on_pod("MODIFIED", {**p, "status": {"phase": "Pending"}})  # an unrelated update
    assert used(s, "GPU-n1-0") == 4096, "an older pod version must not undo the reservation"
    s.forget("default/a")
    assert used(s, "GPU-n1-0") == 0


def test_a_bind_the_watch_never_shows_leaves_flight_after_the_timeout():
    from gpuslice import codec, handoff
    clock = Clock()
    s = fresh(clock)
    s.on_node("ADDED", node("n1"))
    p = pod("a")
    s.on_pod("ADDED", p)
    a = assigned(p, "n1", ["GPU-n1-0"])
    flight = handoff.flight_of(a, NOW, 30)
    assignment = codec.decode_assignment(a["metadata"]["annotations"]["gpuslice.io/assignment"])
    s.assume("default/a", "uid-a", assignment, flight)
    assert [f.key for f in s.flights("n1")] == ["default/a"]
    assert s.unstarted_by_first("n1"), "indexed while it may be in flight"
    clock.t = NOW + 31
    assert s.flights("n1") == [] and s.unstarted_by_first("n1") == {}
    s.sweep()
    assert used(s, "GPU-n1-0") == 0, "the assumption is dropped"


def test_trimmers_keep_only_what_placement_reads():
    p = assigned(pod("a", annotations={"other.io/x": "y", "nvidia.com/use-gputype": "A10"}),
                 "n1", ["GPU-n1-0"])
    t = trim_pod(p)
    assert set(t["metadata"]["annotations"]) == {"gpuslice.io/assignment", "gpuslice.io/bound-at",
                                                 "nvidia.com/use-gputype"}
    assert t["spec"]["containers"] == [{"name": "main",
                                        "resources": p["spec"]["containers"][0]["resources"]}]
    n = trim_node(node("n1"))
    assert set(n["metadata"]) == {"name", "resourceVersion", "annotations"}
    assert "status" not in n


def test_unstarted_flights_by_first_request_follow_pod_events_and_admission():
    clock = Clock()
    s = fresh(clock)
    s.on_node("ADDED", node("n1"))
    one, two = ("nvidia.com/gpu", 1), ("nvidia.com/gpu", 2)
    s.on_pod("ADDED", assigned(pod("old", mem=2048), "n1", ["GPU-n1-0"], at=NOW - 20))
    s.on_pod("ADDED", assigned(pod("new", mem=1024), "n1", ["GPU-n1-1"], at=NOW - 5))
    s.on_pod("ADDED", assigned(pod("pair", mem=1024, gpus=2), "n1", ["GPU-n1-0", "GPU-n1-1"]))
    by = s.unstarted_by_first("n1")
    assert [f.key for f in by[one]] == ["default/old", "default/new"], "oldest first"
    assert [f.key for f in by[two]] == ["default/pair"]
    s.on_pod("MODIFIED", assigned(pod("new", mem=1024), "n1", ["GPU-n1-1"], at=NOW - 5,
                                  allocated="main"))
    assert [f.key for f in s.unstarted_by_first("n1")[one]] == ["default/old"], \
        "a pod the agent answered leaves at once"
    clock.t = NOW + 10.5  # `old` was bound 30.5 s ago: past the in-flight timeout, and
    assert [f.key for f in s.unstarted_by_first("n1")[one]] == ["default/old"], "not admitted"
    s.on_pod("MODIFIED", admitted(assigned(pod("old", mem=2048), "n1", ["GPU-n1-0"],
                                           at=NOW - 20)))
    assert one not in s.unstarted_by_first("n1")
    assert [f.key for f in s.unstarted_by_first("n1")[two]] == ["default/pair"]
    assert s.unstarted_by_first("n2") == {}

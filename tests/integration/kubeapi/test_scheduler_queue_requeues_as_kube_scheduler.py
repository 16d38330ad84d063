"""The driver's queue (kubeapi/scheduler_queue.py) moves unschedulable pods back as
kube-scheduler v1.36 does with queueing hints on: a pod an extender refused on any cluster
event, a pod only the in-tree filters refused on an event that may make room, and a pod that
saw an event while it was being scheduled goes to back-off instead of waiting.
tests/integration/scheduler/test_waiting_pod_is_requeued.py shows the real one doing it."""

from __future__ import annotations

from kubeapi.scheduler_queue import SchedulingQueue

POD = {"metadata": {"creationTimestamp": "2026-11-27T00:00:00Z"}, "spec": {}}


def parked(by_extender: bool, event_while_scheduling: bool = False) -> SchedulingQueue:
    q = SchedulingQueue(initial_backoff=0.0, max_backoff=0.0, unschedulable_timeout=300.0)
    q.add("default/p", POD)
    pending = q.pop_ready()
    assert pending is not None
    if event_while_scheduling:
        q.cluster_changed(may_make_room=False)
    q.failed(pending, unschedulable=True, by_extender=by_extender)
    return q


def test_a_pod_an_extender_refused_moves_on_an_assigned_pods_update():
    q = parked(by_extender=True)
    assert q.pop_ready() is None, "parked until an event"
    q.cluster_changed(may_make_room=False)
    assert q.pop_ready() is not None


def test_a_pod_only_the_in_tree_filters_refused_waits_for_room():
    q = parked(by_extender=False)
    q.cluster_changed(may_make_room=False)
    assert q.pop_ready() is None
    q.cluster_changed(may_make_room=True)
    assert q.pop_ready() is not None


def test_an_event_while_scheduling_sends_an_extender_refused_pod_to_back_off():
    assert parked(by_extender=True, event_while_scheduling=True).pop_ready() is not None
    assert parked(by_extender=False, event_while_scheduling=True).pop_ready() is None

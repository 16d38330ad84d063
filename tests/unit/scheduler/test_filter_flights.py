"""The in-flight rule's answers kept per node: reused for pods asking the same, dropped when a
pod in flight there changes, never used for a node where the asking pod is in flight itself."""

from __future__ import annotations

from gpuslice.allocator import parse_policy
from gpuslice.scheduler.filter import Evaluator, filter_reply
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, assigned, node, pod

WAIT = "waiting for pod default/first to be allocated on this node"


def evaluator(*pods: dict) -> Evaluator:
    s = ExtenderState(timeout_s=30, clock=Clock())
    for n in ("n1", "n2"):
        s.on_node("ADDED", node(n))
    for p in pods:
        s.on_pod("ADDED", p)
    return Evaluator(s, parse_policy("binpack"))


def refused(ev: Evaluator, p: dict) -> dict[str, str]:
    return filter_reply(ev.cached(p, ["n1", "n2"]), ["n1", "n2"]).FailedAndUnresolvableNodes


def test_pods_asking_the_same_wait_alike_until_the_pod_in_flight_is_allocated():
    first = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])
    ev = evaluator(first)
    assert refused(ev, pod("second", mem=2048)) == {"n1": WAIT}
    assert refused(ev, pod("third", mem=2048)) == {"n1": WAIT}, "the kept answer"
    ev.state.on_pod("MODIFIED", assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"],
                                         allocated="main"))
    assert refused(ev, pod("fourth", mem=2048)) == {}, "the agent answered: nothing to confuse"


def test_a_pod_is_never_kept_waiting_for_its_own_flight():
    first = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])
    ev = evaluator(first)
    assert refused(ev, pod("second", mem=2048)) == {"n1": WAIT}
    again = pod("first", mem=2048)  # the pod in flight, asked about again with another size
    again["metadata"]["resourceVersion"] = "11"
    assert refused(ev, again) == {}, "another pod's kept answer must not apply to it"


def test_the_kubelets_first_status_ends_the_flight_before_the_agents_mark():
    """The kubelet writes container statuses only after admission, which allocated every GPU
    container: no Allocate can be for that pod any more, whatever the agent wrote so far."""
    first = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])
    ev = evaluator(first)
    assert refused(ev, pod("second", mem=2048)) == {"n1": WAIT}
    admitted = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])
    admitted["status"] = {"phase": "Pending", "containerStatuses": [
        {"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}]}
    ev.state.on_pod("MODIFIED", admitted)
    assert refused(ev, pod("third", mem=2048)) == {}, "admitted: nothing to confuse"
    assert ev.state.held("default/first") is not None, "its slices stay held"


def test_a_pod_of_another_gang_waits_and_one_of_the_same_gang_flies_beside_it():
    """The node agent hands a container its pod's gang directory (gpuslice.io/gang), so a call
    answered from the wrong pod of equal slices would put it in another gang: the extender
    holds pods of other gangs (or none) apart, percent requests too, and keeps those answers
    per gang."""
    gang = {"gpuslice.io/gang": "job"}
    ev = evaluator(assigned(pod("first", annotations=gang), "n1", ["GPU-n1-0"]))
    assert refused(ev, pod("twin", annotations=gang)) == {}, "same slices, same gang"
    assert refused(ev, pod("plain")) == {"n1": WAIT}, "same slices, no gang"
    assert refused(ev, pod("other", annotations={"gpuslice.io/gang": "x"})) == {"n1": WAIT}
    assert refused(ev, pod("twin2", annotations=gang)) == {}, "the kept answer is the gang's"
    plain = evaluator(assigned(pod("first"), "n1", ["GPU-n1-0"]))
    assert refused(plain, pod("twin")) == {}, "without gangs: as before"
    assert refused(plain, pod("ganged", annotations=gang)) == {"n1": WAIT}

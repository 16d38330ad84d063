"""Item 1 of "No tenant can forge, bypass or inherit a slice", tried on the extender's state: a
pod that asks for no GPU, labelled gpuslice.io/managed=true, with a hand-written
gpuslice.io/assignment naming a GPU node (over-large, so that every GPU pod would be refused
there with "node has GPU assignments gpuslice cannot account for"). Only assignments that
gpuslice's bind wrote are counted: on a managed pod, naming the node the pod is bound to, for
containers that ask for a GPU."""

from __future__ import annotations

import copy

import pytest

from gpuslice import codec, handoff, model
from gpuslice.allocator import parse_policy
from gpuslice.scheduler.filter import UNACCOUNTED, Evaluator, filter_reply
from gpuslice.scheduler.state import ExtenderState, trim_pod

from .objects import NOW, Clock, assigned, node, pod

BIG = 1 << 20  # 1 TiB on a 16 GiB GPU: more than the inventory can account for


def cpu_pod(name: str, *, bound_to: str | None, assignment_node: str = "gpu-1",
            managed: bool = True, mib: int = BIG, container: str = "web") -> dict:
    """The attack: no GPU resource anywhere, a forged assignment naming `assignment_node`."""
    forged = model.PodAssignment(node=assignment_node, containers=(model.ContainerAssignment(
        container=container, slices=(model.GPUSlice(uuid=f"GPU-{assignment_node}-0",
                                                    memory_mib=mib, cores=100),)),))
    p = {"metadata": {"name": name, "namespace": "tenant", "uid": f"uid-{name}",
                      "resourceVersion": "5", "creationTimestamp": "2026-11-24T00:00:00Z",
                      "labels": {handoff.MANAGED_LABEL: "true"} if managed else {},
                      "annotations": {codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(forged),
                                      handoff.BOUND_AT: handoff.format_time(NOW)}},
         "spec": {"schedulerName": "default-scheduler",
                  "containers": [{"name": "web", "image": "nginx",
                                  "resources": {"limits": {"cpu": "1"}}}]},
         "status": {"phase": "Running"}}
    if bound_to:
        p["spec"]["nodeName"] = bound_to
    return p


def cluster() -> ExtenderState:
    s = ExtenderState(timeout_s=30, clock=Clock())
    s.on_node("ADDED", node("gpu-1"))
    s.on_node("ADDED", node("cpu-1", gpus=0))
    return s


def gpu_pod_fits_on_gpu_1(s: ExtenderState) -> bool:
    reply = filter_reply(Evaluator(s, parse_policy("binpack")).cached(
        pod("victim", mem=4096), ["gpu-1"]), ["gpu-1"])
    return reply.NodeNames == ["gpu-1"]


def test_the_control_an_over_large_assignment_that_is_counted_refuses_the_node():
    """What the attack aims at: the same over-large slice, on a pod whose assignment is one
    bind could have written (bound to gpu-1, its container asks for a GPU), is counted, cannot
    be committed, and every GPU pod is refused there."""
    s = cluster()
    p = cpu_pod("big", bound_to="gpu-1")
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    s.on_pod("ADDED", p)
    assert s.waiting("gpu-1") == 1
    reply = filter_reply(Evaluator(s, parse_policy("binpack")).cached(
        pod("victim", mem=4096), ["gpu-1"]), ["gpu-1"])
    assert reply.FailedAndUnresolvableNodes["gpu-1"].startswith(UNACCOUNTED)


@pytest.mark.parametrize(("why", "forged"), [
    ("running on a CPU node", cpu_pod("miner", bound_to="cpu-1")),
    ("not bound at all", cpu_pod("miner", bound_to=None)),
    ("bound to the GPU node, but it asks for no GPU", cpu_pod("miner", bound_to="gpu-1")),
    ("without the managed label", cpu_pod("miner", bound_to="gpu-1", managed=False)),
])
def test_a_forged_assignment_on_a_pod_without_a_gpu_locks_no_gpu_node(why, forged):
    s = cluster()
    assert gpu_pod_fits_on_gpu_1(s)
    for p in (forged, trim_pod(forged)):  # as a test builds it and as the informer keeps it
        s2 = cluster()
        s2.on_pod("ADDED", p)
        assert s2.waiting("gpu-1") == 0, f"{why}: the forged slice must not be counted"
        assert s2.held_on("gpu-1") == {} and s2.flights("gpu-1") == [], why
        assert gpu_pod_fits_on_gpu_1(s2), f"{why}: a GPU pod must still fit on gpu-1"


def test_a_gpu_pod_bound_elsewhere_than_its_assignment_says_holds_nothing():
    s = cluster()
    s.on_node("ADDED", node("gpu-2"))
    p = assigned(pod("a", mem=4096), "gpu-1", ["GPU-gpu-1-0"])
    p["spec"]["nodeName"] = "gpu-2"
    s.on_pod("ADDED", p)
    assert s.held_on("gpu-1") == {} and s.held_on("gpu-2") == {}
    assert s.flights("gpu-1") == [] and s.flights("gpu-2") == []


def test_an_assignment_naming_a_container_that_asks_for_no_gpu_holds_nothing():
    p = assigned(pod("a", mem=4096), "gpu-1", ["GPU-gpu-1-0"])
    p["spec"]["containers"].append({"name": "sidecar", "image": "x"})
    text = p["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION]
    p["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION] = text.replace(
        '"name":"main"', '"name":"sidecar"')
    s = cluster()
    s.on_pod("ADDED", p)
    assert s.held_on("gpu-1") == {}


def test_what_bind_writes_is_still_counted_and_a_later_forgery_on_it_is_not():
    s = cluster()
    real = assigned(pod("a", mem=4096), "gpu-1", ["GPU-gpu-1-0"])
    s.on_pod("ADDED", real)
    assert set(s.held_on("gpu-1")) == {"default/a"}
    moved = copy.deepcopy(real)  # someone rewrites it to name another node
    ann = moved["metadata"]["annotations"]
    ann[codec.ASSIGNMENT_ANNOTATION] = ann[codec.ASSIGNMENT_ANNOTATION].replace(
        '"node":"gpu-1"', '"node":"gpu-2"')
    s.on_pod("MODIFIED", moved)
    assert s.held_on("gpu-1") == {} and s.held_on("gpu-2") == {}
    s.on_pod("MODIFIED", real)
    assert set(s.held_on("gpu-1")) == {"default/a"}


def test_a_pod_that_loses_the_managed_label_stops_holding():
    s = cluster()
    real = assigned(pod("a", mem=4096), "gpu-1", ["GPU-gpu-1-0"])
    s.on_pod("ADDED", trim_pod(real))
    assert set(s.held_on("gpu-1")) == {"default/a"}
    unlabelled = copy.deepcopy(real)
    unlabelled["metadata"]["labels"] = {}
    s.on_pod("MODIFIED", trim_pod(unlabelled))
    assert s.held_on("gpu-1") == {}


def test_the_trimmed_pod_keeps_the_managed_label_the_check_reads():
    t = trim_pod(assigned(pod("a"), "gpu-1", ["GPU-gpu-1-0"]))
    assert t["metadata"]["labels"] == {handoff.MANAGED_LABEL: "true"}

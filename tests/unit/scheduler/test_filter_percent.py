"""The in-flight rule for percent-of-memory pods: their size per GPU is resolved on each node
(from the node's GPU size when its healthy GPUs are one size, else by placing the pod)."""

from __future__ import annotations

from typing import Any

from gpuslice import codec, model
from gpuslice.allocator import parse_policy
from gpuslice.scheduler.filter import Evaluator, filter_reply
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, assigned, node, pod


def percent_pod(name: str, percent: int) -> dict[str, Any]:
    p = pod(name, cores=10)
    limits = p["spec"]["containers"][0]["resources"]["limits"]
    del limits["nvidia.com/gpumem"]
    limits["nvidia.com/gpumem-percentage"] = str(percent)
    return p


def mixed_node(name: str) -> dict[str, Any]:
    """Two GPUs of different sizes: no single size to resolve a percent against."""
    inv = model.NodeInventory(node=name, gpus=(
        model.GPU(uuid=f"GPU-{name}-0", model="NVIDIA A10", memory_mib=16384, index=0),
        model.GPU(uuid=f"GPU-{name}-1", model="NVIDIA A10", memory_mib=8192, index=1)))
    return {"metadata": {"name": name, "resourceVersion": "1",
                         "annotations": {codec.INVENTORY_ANNOTATION: codec.encode_inventory(inv)}}}


def verdict_for(new: dict[str, Any], in_flight: dict[str, Any], *nodes: dict[str, Any]) -> Any:
    s = ExtenderState(timeout_s=30, clock=Clock())
    for n in nodes:
        s.on_node("ADDED", n)
    s.on_pod("ADDED", in_flight)
    names = [n["metadata"]["name"] for n in nodes]
    return filter_reply(Evaluator(s, parse_policy("binpack")).cached(new, names), names)


def test_a_percent_pod_the_same_size_as_the_pod_in_flight_is_not_held_back():
    flying = assigned(pod("first", mem=4096, cores=10), "n1", ["GPU-n1-0"])
    reply = verdict_for(percent_pod("second", 25), flying, node("n1", mem=16384))
    assert reply.NodeNames == ["n1"], "25 % of 16384 MiB is 4096 MiB: the same shape"


def test_a_percent_pod_of_another_size_waits_for_the_pod_in_flight():
    flying = assigned(pod("first", mem=2048, cores=10), "n1", ["GPU-n1-0"])
    reply = verdict_for(percent_pod("second", 25), flying, node("n1", mem=16384))
    assert reply.FailedAndUnresolvableNodes == {
        "n1": "waiting for pod default/first to be allocated on this node"}


def test_on_gpus_of_mixed_sizes_the_size_comes_from_the_gpu_the_pod_would_get():
    # binpack puts 50 % on the 8192 MiB GPU (the fuller one after placing): 4096 MiB
    same = assigned(pod("first", mem=4096, cores=10), "mix", ["GPU-mix-0"])
    other = assigned(pod("first", mem=8192, cores=10), "mix", ["GPU-mix-0"])
    got = {verdict_for(percent_pod("second", 50), flying, mixed_node("mix")).NodeNames == ["mix"]
           for flying in (same, other)}
    assert got == {True, False}, "exactly one of the two sizes is the pod's own shape"


def test_a_percent_pod_of_the_same_size_but_another_gang_waits():
    """Its shape is resolved on the node (25 % of 16384 = 4096 MiB), the gang added to it."""
    flying = assigned(pod("first", mem=4096, cores=10, annotations={"gpuslice.io/gang": "job"}),
                      "n1", ["GPU-n1-0"])
    other = percent_pod("second", 25)
    other["metadata"]["annotations"]["gpuslice.io/gang"] = "another"
    assert verdict_for(other, flying, node("n1", mem=16384)).NodeNames == []
    same = percent_pod("third", 25)
    same["metadata"]["annotations"]["gpuslice.io/gang"] = "job"
    assert verdict_for(same, flying, node("n1", mem=16384)).NodeNames == ["n1"]

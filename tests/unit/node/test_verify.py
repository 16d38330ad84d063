"""PodResources check: which containers run on other GPUs than assigned, and which pairs of
pods are a safe swap."""

from __future__ import annotations

from gpuslice import model
from gpuslice.node.plugin import replica_devices
from gpuslice.node.verify import compare, shape_of, swaps
from kubelet.pods import container, gpu, pod

RES = ["nvidia.com/gpu"]


def _actual(**by_pod: list[str]) -> dict:
    return {("default", name): {"main": {"nvidia.com/gpu": [f"{u}::0" for u in uuids]}}
            for name, uuids in by_pod.items()}


def test_two_interchangeable_pods_that_got_each_others_gpus_are_a_swap():
    a = pod("a", [container("main")], {"main": [gpu(0)]}, at=1e9, allocated="main")
    b = pod("b", [container("main")], {"main": [gpu(1)]}, at=1e9 + 1, allocated="main")
    pairs, left = swaps(compare([a, b], _actual(a=[gpu(1)], b=[gpu(0)]), RES))
    assert [(x["metadata"]["name"], y["metadata"]["name"]) for x, y in pairs] == [("a", "b")]
    assert left == []


def test_pods_of_different_shapes_are_never_swapped():
    a = pod("a", [container("main", mem=1024)], {"main": [gpu(0)]}, at=1e9, allocated="main")
    b = pod("b", [container("main", mem=2048)], {"main": [gpu(1)]}, at=1e9, allocated="main")
    assert shape_of(a) != shape_of(b)
    pairs, left = swaps(compare([a, b], _actual(a=[gpu(1)], b=[gpu(0)]), RES))
    assert pairs == [] and {m.pod["metadata"]["name"] for m in left} == {"a", "b"}


def test_containers_on_their_own_gpus_or_not_started_are_no_mismatch():
    a = pod("a", [container("main")], {"main": [gpu(0)]}, at=1e9, allocated="main")
    b = pod("b", [container("main")], {"main": [gpu(1)]}, at=1e9, allocated="main")
    assert compare([a, b], _actual(a=[gpu(0)]), RES) == []


def test_replicas_carry_health_and_numa_only_when_known():
    gpus = [model.GPU(uuid="GPU-a", model="m", memory_mib=1, numa_node=1, split_count=2),
            model.GPU(uuid="GPU-b", model="m", memory_mib=1, healthy=False, split_count=2)]
    devs = replica_devices("nvidia.com/gpu", gpus)
    assert [(d.ID, d.health) for d in devs] == [
        ("GPU-a::0", "Healthy"), ("GPU-a::1", "Healthy"),
        ("GPU-b::0", "Unhealthy"), ("GPU-b::1", "Unhealthy")]
    assert [n.ID for n in devs[0].topology.nodes] == [1]
    assert not devs[2].HasField("topology"), "no NUMA node invented for a GPU without one"
    assert len(replica_devices("tencent.com/vcuda-core", gpus)) == 200

"""allocator/mig.py through ClusterState: MIG pods on MIG nodes, reasons, the dynamic part."""

from __future__ import annotations

import pytest

from gpuslice import mig
from gpuslice.allocator import AllocationError, ClusterState, parse_policy
from gpuslice.allocator import reasons as R
from gpuslice.model import (
    GPU,
    ContainerAssignment,
    GPUFilter,
    GPUSlice,
    NodeInventory,
    PodAssignment,
    PodRequest,
    SliceRequest,
)

H100 = mig.CATALOG["H100-80GB"]
POLICY = parse_policy("binpack")


def mig_gpu(node: str, i: int, *instances: tuple[str, int], healthy: bool = True) -> GPU:
    sizes = {p.name: p.size for p in H100}
    return GPU(uuid=f"{node}-gpu{i}", model="NVIDIA H100 80GB HBM3", memory_mib=81559, index=i,
               healthy=healthy, mig=mig.MigGPU(profiles=H100, instances=tuple(
                   mig.Instance(profile=n, start=s, size=sizes[n]) for n, s in instances)))


def mig_node(name: str, n: int = 2) -> NodeInventory:
    return NodeInventory(node=name, gpus=tuple(mig_gpu(name, i) for i in range(n)))


def mig_pod(mem: int | None = 10000, count: int = 1, *, cores: int = 0, pct: int | None = None,
            name: str = "p", flt: GPUFilter | None = None) -> PodRequest:
    return PodRequest(namespace="ns", name=name, mig=True, filter=flt or GPUFilter(), slices=(
        SliceRequest(container="c", count=count, memory_mib=None if pct else mem,
                     memory_percent=pct, cores=cores),))


def held(node: str, i: int, profile: str, start: int, key: str = "ns/other") -> tuple[str,
                                                                                       PodAssignment]:
    p = next(q for q in H100 if q.name == profile)
    return key, PodAssignment(node=node, containers=(ContainerAssignment(container="c", slices=(
        GPUSlice(uuid=f"{node}-gpu{i}", memory_mib=p.memory_mib, cores=p.compute * 100 // 7,
                 mig=mig.MigSlice(profile=profile, start=start)),)),))


def placed(cs: ClusterState, pod: PodRequest) -> list[tuple[str, str, int]]:
    pl = cs.schedule(pod, POLICY)
    assert pl is not None, cs.filter(pod, POLICY).failed
    return [(s.uuid, s.mig.profile, s.mig.start) for s in pl.assignment.slices()
            if s.mig is not None]


def test_the_smallest_profile_that_holds_the_memory_is_chosen():
    cs = ClusterState()
    cs.add_node(mig_node("m"))
    assert placed(cs, mig_pod(10000)) == [("m-gpu0", "1g.20gb", 6)]
    assert placed(cs, mig_pod(30000)) == [("m-gpu0", "3g.40gb", 4)]
    assert placed(cs, mig_pod(pct=100)) == [("m-gpu0", "7g.80gb", 0)]


def test_an_idle_instance_of_the_profile_is_reused_before_a_free_placement():
    cs = ClusterState()
    cs.add_node(NodeInventory(node="m", gpus=(mig_gpu("m", 0), mig_gpu("m", 1, ("3g.40gb", 0)))))
    assert placed(cs, mig_pod(30000)) == [("m-gpu1", "3g.40gb", 0)]


def test_a_gpu_with_idle_instances_in_the_way_is_repartitioned_only_when_no_pod_holds_it():
    cs = ClusterState()
    cs.add_node(NodeInventory(node="m", gpus=(mig_gpu("m", 0, ("1g.10gb", 0), ("1g.10gb", 4)),)))
    # 7g.80gb needs the whole GPU: both idle 1g instances go (the dynamic part)
    assert placed(cs, mig_pod(pct=100)) == [("m-gpu0", "7g.80gb", 0)]
    cs.assign(*held("m", 0, "1g.10gb", 0))  # now a pod holds the first 1g instance
    fr = cs.filter(mig_pod(pct=100), POLICY)
    assert fr.failed["m"].reason == R.NO_PLACEMENT
    assert fr.failed["m"].detail == ("node m: no free placement for 7g.80gb (container 'c'); "
                                     "in use: GPU 0: 1g.10gb@0")


def test_a_request_no_profile_holds_names_the_largest_profile_and_the_node():
    cs = ClusterState()
    cs.add_node(mig_node("m"))
    r = cs.filter(mig_pod(80000), POLICY).failed["m"]
    assert r.reason == R.NO_PROFILE and not r.resolvable
    assert "node m" in r.detail and "largest 7g.80gb (75817 MiB)" in r.detail


def test_modes_do_not_mix_and_say_why():
    cs = ClusterState()
    cs.add_node(mig_node("m"))
    cs.add_node(NodeInventory(node="s", gpus=(GPU(uuid="s-0", model="m", memory_mib=16384),)))
    fr = cs.filter(mig_pod(), POLICY)
    assert list(fr.fits) == ["m"] and fr.failed["s"].reason == R.NO_MIG
    shared = PodRequest(namespace="ns", name="q", slices=(SliceRequest(container="c",
                                                                       memory_mib=1000),))
    fr = cs.filter(shared, POLICY)
    assert list(fr.fits) == ["s"] and fr.failed["m"].reason == R.MIG_NODE
    assert cs.filter(shared, POLICY, ["m"]).failed["m"].reason == R.MIG_NODE
    assert set(cs.filter(mig_pod(), POLICY, ["m", "s", "x"]).failed) == {"s", "x"}


def test_a_container_gets_distinct_gpus_and_unhealthy_or_filtered_gpus_are_skipped():
    cs = ClusterState()
    cs.add_node(NodeInventory(node="m", gpus=(mig_gpu("m", 0), mig_gpu("m", 1, healthy=False),
                                              mig_gpu("m", 2), mig_gpu("m", 3))))
    got = placed(cs, mig_pod(10000, count=2, flt=GPUFilter(nouse_uuids=("m-gpu0",))))
    assert [u for u, _, _ in got] == ["m-gpu2", "m-gpu3"]
    assert cs.filter(mig_pod(10000, count=4), POLICY).failed["m"].reason == R.NO_PLACEMENT


def test_assign_refuses_overlaps_and_illegal_starts_all_or_nothing():
    cs = ClusterState()
    cs.add_node(mig_node("m"))
    cs.assign(*held("m", 0, "3g.40gb", 4, key="ns/a"))
    with pytest.raises(AllocationError, match="overlaps"):
        cs.assign(*held("m", 0, "2g.20gb", 4, key="ns/b"))
    with pytest.raises(AllocationError, match=r"4g\.40gb may start at slice 0, not 4"):
        cs.assign(*held("m", 1, "4g.40gb", 4, key="ns/b"))
    assert list(cs.pods()) == ["ns/a"]
    cs.assign(*held("m", 0, "2g.20gb", 0, key="ns/a"))  # replacing its own: no self-overlap
    assert cs.release("ns/a") and not cs.pods()


def test_a_shared_slice_assignment_on_a_mig_node_is_refused():
    cs = ClusterState()
    cs.add_node(mig_node("m"))
    a = PodAssignment(node="m", containers=(ContainerAssignment(container="c", slices=(
        GPUSlice(uuid="m-gpu0", memory_mib=100, cores=0),)),))
    with pytest.raises(AllocationError, match="a shared slice on a MIG GPU"):
        cs.assign("ns/x", a)


def test_a_node_switched_to_shim_drops_its_mig_pods():
    cs = ClusterState()
    cs.add_node(mig_node("m"))
    cs.assign(*held("m", 0, "3g.40gb", 4, key="ns/a"))
    shim = NodeInventory(node="m", gpus=(GPU(uuid="m-gpu0", model="m", memory_mib=81559),))
    assert cs.add_node(shim) == ["ns/a"]
    assert cs.remove_node("m") == []


def test_gpu_usage_reports_mig_instances_held():
    cs = ClusterState()
    cs.add_node(mig_node("m", 1))
    cs.assign(*held("m", 0, "7g.80gb", 0))
    (u,) = cs.gpu_usage()
    assert (u.slices, u.cores_used, u.exclusive) == (1, 100, True)


def test_a_pod_reassigned_across_modes_is_held_on_one_side_only():
    cs = ClusterState()
    cs.add_node(mig_node("m"))
    cs.add_node(NodeInventory(node="s", gpus=(GPU(uuid="s-0", model="m", memory_mib=16384),)))
    cs.assign(*held("m", 0, "7g.80gb", 0, key="ns/p"))
    shared = PodAssignment(node="s", containers=(ContainerAssignment(container="c", slices=(
        GPUSlice(uuid="s-0", memory_mib=1000, cores=0),)),))
    cs.assign("ns/p", shared)
    assert cs.pods() == {"ns/p": shared}
    assert placed(cs, mig_pod(pct=100)) == [("m-gpu0", "7g.80gb", 0)], "its 7g was freed"
    cs.assign(*held("m", 1, "1g.10gb", 0, key="ns/p"))
    assert [u.memory_used_mib for u in cs.gpu_usage() if u.node == "s"] == [0]

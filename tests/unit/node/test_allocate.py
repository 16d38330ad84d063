"""Allocate answers: the right container, its own GPUs and limits, and nothing it did not get."""

from __future__ import annotations

import pytest

from gpuslice import model
from gpuslice.node.allocate import (
    AllocateError,
    Layout,
    PodViews,
    answer,
    assigned_pods,
    in_flight,
    preferred,
    strangers,
)
from gpuslice.shim import RegionSpec
from kubelet.pods import NODE, container, gpu, pod

NOW = 1_800_000_000.0
LAYOUT = Layout(library_host="/var/lib/gpuslice/lib/libgpuslice.so",
                preload_host="/var/lib/gpuslice/lib/ld.so.preload",
                regions_host="/var/lib/gpuslice/regions", board_host="/var/lib/gpuslice/board")
GPUS = {gpu(i): model.GPU(uuid=gpu(i), model="H100", memory_mib=81920, index=i, split_count=4)
        for i in range(4)}


def _answer(pods, resource, ids, layout=LAYOUT):
    return answer(in_flight(pods, NODE, NOW, 120), assigned_pods(pods, NODE), GPUS, resource,
                  ids, layout)


def test_a_container_gets_its_gpus_limits_in_device_order_and_the_four_mounts():
    p = pod("p", [container("main", quantity=2, mem=4096, cores=30, priority=1)],
            {"main": [gpu(2), gpu(0)]}, at=NOW - 1)
    a = _answer([p], "nvidia.com/gpu", [f"{gpu(0)}::1", f"{gpu(2)}::3"])
    assert (a.pod_key, a.container, a.gpus) == ("default/p", "main", (gpu(2), gpu(0)))
    assert a.envs == {
        "NVIDIA_VISIBLE_DEVICES": f"{gpu(2)},{gpu(0)}",
        "GPUSLICE_DEVICE_UUIDS": f"{gpu(2)},{gpu(0)}",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m", "CUDA_DEVICE_MEMORY_LIMIT_1": "4096m",
        "CUDA_DEVICE_SM_LIMIT": "30", "GPUSLICE_COMPUTE_MODE": "hard", "CUDA_TASK_PRIORITY": "1",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/var/run/gpuslice/region",
        "GPUSLICE_COMPUTE_PHASE": "1"}  # two GPUs under a compute limit: gang holds
    assert a.region_host_dir == "/var/lib/gpuslice/regions/uid-p/main"
    assert a.region == RegionSpec(device_uuids=(gpu(2), gpu(0)), limits=(4096 << 20,) * 2,
                                  sm_limit=30, compute_mode="hard", priority=1), (
        "the region the agent writes holds the same limits as the env")
    assert {(m.container_path, m.host_path, m.read_only) for m in a.mounts} == {
        ("/usr/local/gpuslice/lib/libgpuslice.so", LAYOUT.library_host, True),
        ("/etc/ld.so.preload", LAYOUT.preload_host, True),
        ("/var/run/gpuslice", "/var/lib/gpuslice/regions/uid-p/main", False),
        ("/var/run/gpuslice-board", "/var/lib/gpuslice/board", False)}
    assert a.cdi_devices == ()


def test_cdi_mode_names_cdi_devices_and_keeps_the_images_nvidia_env_from_adding_gpus():
    p = pod("p", [container("main")], {"main": [gpu(1)]}, at=NOW - 1)
    a = _answer([p], "nvidia.com/gpu", [f"{gpu(1)}::0"], Layout(**{**LAYOUT.__dict__, "cdi": True}))
    assert a.cdi_devices == (f"nvidia.com/gpu={gpu(1)}",)
    assert a.envs["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_interleaved_pods_each_get_their_own_assignment():
    one = pod("one", [container("a", quantity=1, mem=1000)], {"a": [gpu(0)]}, at=NOW - 3)
    two = pod("two", [container("b", quantity=2, mem=2000)], {"b": [gpu(1), gpu(2)]},
              at=NOW - 2)
    # interchangeable with "one" (the extender binds no confusable pod beside it)
    three = pod("three", [container("c", quantity=1, mem=1000)], {"c": [gpu(3)]}, at=NOW - 1)
    pods = [one, two, three]
    # the kubelet admits "two" first (its binding arrived first): the 2-GPU call is its own
    a = _answer(pods, "nvidia.com/gpu", [f"{gpu(1)}::0", f"{gpu(2)}::0"])
    assert (a.pod_key, a.envs["CUDA_DEVICE_MEMORY_LIMIT_1"]) == ("default/two", "2000m")
    # a 1-GPU call goes to the oldest pod not started
    b = _answer(pods, "nvidia.com/gpu", [f"{gpu(0)}::0"])
    assert (b.pod_key, b.envs["CUDA_DEVICE_MEMORY_LIMIT_0"]) == ("default/one", "1000m")


def test_a_pod_in_progress_owns_the_next_call_of_its_next_container():
    p = pod("p", [container("a"), container("b", mem=512)], {"a": [gpu(0)], "b": [gpu(0)]},
            at=NOW - 1, allocated="a")
    older = pod("older", [container("x")], {"x": [gpu(1)]}, at=NOW - 5)
    got = _answer([older, p], "nvidia.com/gpu", [f"{gpu(0)}::1"])
    assert (got.pod_key, got.container) == ("default/p", "b")


def test_no_matching_pod_is_an_error_that_lists_what_is_in_flight_and_what_to_check():
    p = pod("p", [container("main", quantity=2)], {"main": [gpu(0), gpu(1)]}, at=NOW - 1)
    with pytest.raises(AllocateError) as exc:
        _answer([p], "nvidia.com/gpu", [f"{gpu(0)}::0"])
    msg = str(exc.value)
    assert "nvidia.com/gpu=1" in msg and "default/p (next: main nvidia.com/gpu=2)" in msg
    assert "gpuslice.io/assignment" in msg


def test_devices_on_a_gpu_the_container_was_not_assigned_are_refused():
    p = pod("p", [container("main")], {"main": [gpu(0)]}, at=NOW - 1)
    with pytest.raises(AllocateError, match="kubelet chose devices on"):
        _answer([p], "nvidia.com/gpu", [f"{gpu(3)}::0"])


def test_a_pod_bound_to_another_node_or_admitted_long_ago_is_not_in_flight_here():
    elsewhere = pod("far", [container("main")], {"main": [gpu(0)]}, at=NOW - 1, node="node-b")
    stale = pod("stale", [container("main")], {"main": [gpu(0)]}, at=NOW - 500)
    stale["status"] = {"phase": "Pending", "containerStatuses": [{"name": "main"}]}
    assert in_flight([elsewhere, stale], NODE, NOW, 120) == []


def test_a_pod_the_kubelet_has_not_admitted_stays_in_flight_past_the_timeout():
    late = pod("late", [container("main")], {"main": [gpu(0)]}, at=NOW - 500)
    assert [f.flight.key for f in in_flight([late], NODE, NOW, 120)] == ["default/late"]
    late["status"] = {"phase": "Failed"}  # refused at admission: no call can be for it
    assert in_flight([late], NODE, NOW, 120) == []


def test_an_assignment_on_a_pod_not_bound_or_not_managed_is_not_believed():
    unbound = pod("unbound", [container("main")], {"main": [gpu(0)]}, at=NOW - 1)
    del unbound["spec"]["nodeName"]  # the extender wrote it, the Binding has not landed
    unlabelled = pod("unlabelled", [container("main")], {"main": [gpu(0)]}, at=NOW - 1)
    unlabelled["metadata"]["labels"] = {}
    assert in_flight([unbound, unlabelled], NODE, NOW, 120) == []
    assert assigned_pods([unbound, unlabelled], NODE) == {}


def test_a_forged_annotation_claiming_another_pods_exclusive_gpu_is_not_believed():
    owner = pod("owner", [container("main", cores=100)], {"main": [gpu(0)]}, at=NOW - 60,
                allocated="main")
    thief = pod("thief", [container("main", mem=1024, cores=10)], {"main": [gpu(0)]}, at=NOW - 1)
    with pytest.raises(AllocateError, match="exclusively"):
        _answer([owner, thief], "nvidia.com/gpu", [f"{gpu(0)}::2"])


def test_an_assignment_past_the_gpus_memory_is_refused():
    big = pod("big", [container("main", mem=80000)], {"main": [gpu(0)]}, at=NOW - 60,
              allocated="main")
    more = pod("more", [container("main", mem=4096)], {"main": [gpu(0)]}, at=NOW - 1)
    with pytest.raises(AllocateError, match="84096 MiB"):
        _answer([big, more], "nvidia.com/gpu", [f"{gpu(0)}::2"])


def test_an_assignment_naming_a_gpu_this_node_lacks_is_refused():
    p = pod("p", [container("main")], {"main": ["GPU-not-here"]}, at=NOW - 1)
    with pytest.raises(AllocateError, match="not GPUs of this node"):
        _answer([p], "nvidia.com/gpu", ["GPU-not-here::0"])


def test_gpu_manager_half_a_gpu_is_50_replicas_of_one_gpu():
    p = pod("p", [container("main", "tencent.com/vcuda-core", 50, mem=1024, cores=50)],
            {"main": [gpu(1)]}, at=NOW - 1, cores={"main": 50})
    a = _answer([p], "tencent.com/vcuda-core", [f"{gpu(1)}::{i}" for i in range(50)])
    assert a.gpus == (gpu(1),) and a.envs["CUDA_DEVICE_SM_LIMIT"] == "50"


def test_preferred_allocation_picks_replicas_on_the_assigned_gpus():
    p = pod("p", [container("main", quantity=2)], {"main": [gpu(1), gpu(3)]}, at=NOW - 1)
    available = [f"{gpu(i)}::{n}" for i in range(4) for n in range(4)]
    got = preferred(in_flight([p], NODE, NOW, 120), "nvidia.com/gpu", available, [], 2)
    assert got == [f"{gpu(1)}::0", f"{gpu(3)}::0"]


def test_preferred_allocation_spreads_two_whole_gpus_of_vcuda_core():
    p = pod("p", [container("main", "tencent.com/vcuda-core", 200, mem=1024, cores=100)],
            {"main": [gpu(0), gpu(2)]}, at=NOW - 1, cores={"main": 100})
    available = [f"{gpu(i)}::{n}" for i in range(4) for n in range(100)]
    got = preferred(in_flight([p], NODE, NOW, 120), "tencent.com/vcuda-core", available, [], 200)
    assert sorted({g.split("::")[0] for g in got}) == [gpu(0), gpu(2)] and len(set(got)) == 200


def test_preferred_allocation_without_a_matching_pod_keeps_the_kubelets_order():
    available = [f"{gpu(0)}::0", f"{gpu(1)}::0"]
    assert preferred([], "nvidia.com/gpu", available, [f"{gpu(1)}::0"], 1) == [f"{gpu(1)}::0"]


def test_pod_views_match_the_uncached_functions_and_follow_new_marks():
    pods = [pod(f"p{i}", [container("a"), container("b")], {"a": [gpu(0)], "b": [gpu(1)]},
                at=NOW - 10 + i) for i in range(3)]
    for i, p in enumerate(pods):
        p["metadata"]["resourceVersion"] = str(i + 1)
    views = PodViews(NODE)
    flights, assigned, others = views.views(pods, NOW, 120)
    assert [f.flight for f in flights] == [f.flight for f in in_flight(pods, NODE, NOW, 120)]
    assert assigned == assigned_pods(pods, NODE) and others == strangers(pods, NODE) == []
    marked = {**pods[0], "metadata": {**pods[0]["metadata"], "annotations": {
        **pods[0]["metadata"]["annotations"], "gpuslice.io/allocated": "a"}}}
    flights, _, _ = views.views([marked, *pods[1:]], NOW, 120)
    assert flights[0].flight.pending[0].container == "b", "a new mark is decoded at once"
    assert len(views.views(pods, NOW + 500, 120)[0]) == 3, "not admitted: late, still in flight"
    started = {**pods[1], "metadata": {**pods[1]["metadata"], "resourceVersion": "9"},
               "status": {"phase": "Running"}}
    flights = views.views([pods[0], started, pods[2]], NOW + 500, 120)[0]
    assert [f.flight.key for f in flights] == ["default/p0", "default/p2"], \
        "the window applies to pods the kubelet admitted"


def test_an_assignment_naming_this_node_for_a_pod_bound_elsewhere_is_not_believed():
    forged = pod("forged", [container("main")], {"main": [gpu(0)]}, at=NOW - 1)
    forged["spec"]["nodeName"] = "node-b"  # the kubelet of node-b runs it; the annotation lies
    assert in_flight([forged], NODE, NOW, 120) == []

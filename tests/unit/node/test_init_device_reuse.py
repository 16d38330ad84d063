"""The kubelet hands a pod's app containers (and later init containers) the device IDs of its
init containers first (device manager: devicesToReuse), without GetPreferredAllocation for
them: found with the real kubelet v1.36 (tests/integration/real_node/), where a pod whose init
container the extender placed on another GPU than its app container was rejected at admission
("container app is assigned GPU-0 but the kubelet chose devices on GPU-1"). Such IDs are the
kubelet's replica tokens, not the container's GPU: Allocate answers with the assigned GPUs, and
the PodResources check does not call them a mismatch. Any other ID is still checked."""

from __future__ import annotations

import pytest

from gpuslice import model
from gpuslice.container.edits import Layout
from gpuslice.node.allocate import AllocateError, answer, assigned_pods, in_flight
from gpuslice.node.verify import compare
from kubelet.pods import NODE, container, gpu, pod

NOW = 1_800_000_000.0
LAYOUT = Layout(library_host="/l/libgpuslice.so", preload_host="/l/ld.so.preload",
                regions_host="/r", board_host="/b")
GPUS = {gpu(i): model.GPU(uuid=gpu(i), model="H100", memory_mib=16384, index=i, split_count=10)
        for i in range(4)}
RES = "nvidia.com/gpu"


def _pod(app_gpus: list[str], init_gpu: str, allocated: str | None = "init"):
    return pod("p", [container("app", quantity=len(app_gpus), mem=4000)],
               {"app": app_gpus, "init": [init_gpu]}, at=NOW - 1,
               init=[container("init", mem=12000)], allocated=allocated)


def _answer(pods, ids, given=None):
    return answer(in_flight(pods, NODE, NOW, 120), assigned_pods(pods, NODE), GPUS, RES, ids,
                  LAYOUT, given=given)


def test_an_app_container_given_its_init_containers_device_gets_its_own_gpu():
    p = _pod([gpu(0)], gpu(1))
    reused = f"{gpu(1)}::8"  # what the init container got, handed to the app container again
    a = _answer([p], [reused], given={"uid-p": {reused}})
    assert (a.container, a.gpus) == ("app", (gpu(0),))
    assert a.envs["NVIDIA_VISIBLE_DEVICES"] == gpu(0)
    assert a.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
    # without knowing the ID was the init container's, the answer is the refusal the real
    # kubelet showed
    with pytest.raises(AllocateError, match=r"is assigned .* but the kubelet chose devices on"):
        _answer([p], [reused])


def test_partly_reused_ids_the_fresh_ones_must_lie_on_the_assigned_gpus():
    p = _pod([gpu(0), gpu(2)], gpu(1))
    reused = f"{gpu(1)}::8"
    a = _answer([p], [reused, f"{gpu(2)}::0"], given={"uid-p": {reused}})
    assert a.gpus == (gpu(0), gpu(2))
    with pytest.raises(AllocateError, match="chose devices on"):
        _answer([p], [reused, f"{gpu(3)}::0"], given={"uid-p": {reused}})


def test_ids_given_to_another_pod_are_no_reuse():
    p = _pod([gpu(0)], gpu(1))
    with pytest.raises(AllocateError, match="chose devices on"):
        _answer([p], [f"{gpu(1)}::8"], given={"uid-other": {f"{gpu(1)}::8"}})


def test_the_podresources_check_calls_a_reused_init_device_no_mismatch():
    p = _pod([gpu(0)], gpu(1), allocated="init,app")
    reused = {("default", "p"): {"init": {RES: [f"{gpu(1)}::8"]},
                                 "app": {RES: [f"{gpu(1)}::8"]}}}
    assert compare([p], reused, [RES]) == []
    moved = {("default", "p"): {"init": {RES: [f"{gpu(1)}::8"]}, "app": {RES: [f"{gpu(2)}::1"]}}}
    [m] = compare([p], moved, [RES])
    assert (m.container, m.actual) == ("app", frozenset({gpu(2)}))
    wrong_init = {("default", "p"): {"init": {RES: [f"{gpu(3)}::8"]},
                                     "app": {RES: [f"{gpu(3)}::8"]}}}
    assert [m.container for m in compare([p], wrong_init, [RES])] == ["init"], \
        "the init container's own devices are still checked"


def test_podresources_lists_no_init_container_a_device_on_its_gpu_is_still_a_reuse():
    """What the kubelet really lists: app containers and sidecars only."""
    p = _pod([gpu(0)], gpu(1), allocated="init,app")
    assert compare([p], {("default", "p"): {"app": {RES: [f"{gpu(1)}::8"]}}}, [RES]) == []
    [m] = compare([p], {("default", "p"): {"app": {RES: [f"{gpu(3)}::8"]}}}, [RES])
    assert m.actual == frozenset({gpu(3)}), "a GPU neither its own nor its init's"
    two = _pod([gpu(0), gpu(2)], gpu(1), allocated="init,app")
    ok = {("default", "p"): {"app": {RES: [f"{gpu(1)}::8", f"{gpu(2)}::0"]}}}
    assert compare([two], ok, [RES]) == []
    too_many = {("default", "p"): {"app": {RES: [f"{gpu(1)}::8", f"{gpu(1)}::9"]}}}
    assert [m.container for m in compare([two], too_many, [RES])] == ["app"], \
        "the init container had one device: only one can be its"

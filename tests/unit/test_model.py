"""The shared vocabulary's derived facts (model.py): memory on a GPU, exclusivity, keys."""

from __future__ import annotations

import msgspec
import pytest

from gpuslice import model

GPU80 = model.GPU(uuid="GPU-1", model="NVIDIA H100 80GB HBM3", memory_mib=81920)


@pytest.mark.parametrize("request_, mib", [
    (model.SliceRequest(container="c", memory_mib=4096), 4096),
    (model.SliceRequest(container="c", memory_percent=50), 40960),
    (model.SliceRequest(container="c", memory_percent=100), 81920),
    (model.SliceRequest(container="c", memory_percent=33), 81920 * 33 // 100),
], ids=["absolute MiB is the same on every GPU", "half of an 80 GiB GPU is 40 GiB",
        "100 percent is the whole GPU", "percents round down to whole MiB"])
def test_memory_on_a_gpu_scales_percent_requests_with_the_gpu(request_, mib):
    assert request_.memory_on(GPU80) == mib


def test_memory_on_refuses_a_request_whose_defaults_were_never_resolved():
    with pytest.raises(AssertionError, match="boundary must resolve"):
        model.SliceRequest(container="c").memory_on(GPU80)


@pytest.mark.parametrize("cores, exclusive", [(0, False), (99, False), (100, True)])
def test_a_slice_is_exclusive_exactly_at_100_percent_of_the_cores(cores, exclusive):
    assert model.SliceRequest(container="c", cores=cores).exclusive is exclusive


def test_a_pod_request_key_is_namespace_slash_name():
    assert model.PodRequest(namespace="ml", name="train-0").key == "ml/train-0"


def test_a_pod_assignment_lists_every_slice_of_every_container_in_order():
    a, b, c = (model.GPUSlice(uuid=f"GPU-{i}", memory_mib=1, cores=0) for i in range(3))
    got = model.PodAssignment(node="n", containers=(
        model.ContainerAssignment(container="x", slices=(a, b)),
        model.ContainerAssignment(container="y", slices=(c,), kind=model.ContainerKind.INIT)))
    assert got.slices() == (a, b, c)


def test_model_values_are_frozen_so_snapshots_can_be_shared():
    with pytest.raises(AttributeError):
        GPU80.memory_mib = 1  # type: ignore[misc]


def test_model_values_are_hashable_and_compare_by_value():
    same = msgspec.structs.replace(GPU80)
    assert same == GPU80 and hash(same) == hash(GPU80)


def test_policy_names_are_the_documented_ones():
    assert model.NODE_POLICIES == ("binpack", "spread")
    assert model.GPU_POLICIES == ("binpack", "spread", "topology")

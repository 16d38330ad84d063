"""The public footprint: what one pod holds on each GPU under the lifecycle rule."""

from __future__ import annotations

import pytest

from gpuslice.allocator import AllocationError, Use, footprint
from gpuslice.model import (
    GPU,
    ContainerAssignment,
    ContainerKind,
    GPUSlice,
    PodAssignment,
)

A, B = "GPU-a", "GPU-b"


def _c(name: str, kind: ContainerKind, *slices: tuple[str, int, int]) -> ContainerAssignment:
    return ContainerAssignment(container=name, kind=kind,
                               slices=tuple(GPUSlice(uuid=u, memory_mib=m, cores=c)
                                            for u, m, c in slices))


def test_an_init_container_overlaps_only_with_sidecars_not_with_the_app() -> None:
    a = PodAssignment(node="n", containers=(
        _c("warm", ContainerKind.INIT, (A, 3000, 50)),
        _c("metrics", ContainerKind.SIDECAR, (A, 100, 0)),
        _c("serve", ContainerKind.APP, (A, 1000, 30), (B, 1000, 30)),
    ))
    assert footprint(a) == {A: Use(mem=3100, cores=50, slots=2, excl=0),
                            B: Use(mem=1000, cores=30, slots=1, excl=0)}, (
        "on A the init phase (3000 + sidecar 100) is larger than the app phase (1000 + 100)")


def test_two_init_containers_take_the_larger_not_the_sum() -> None:
    a = PodAssignment(node="n", containers=(
        _c("i1", ContainerKind.INIT, (A, 500, 10)),
        _c("i2", ContainerKind.INIT, (A, 200, 90)),
        _c("app", ContainerKind.APP, (A, 300, 20)),
    ))
    assert footprint(a) == {A: Use(mem=500, cores=90, slots=1, excl=0)}, (
        "init containers run one at a time: each dimension is the max over phases")


def test_an_exclusive_slice_marks_the_gpu_exclusive() -> None:
    a = PodAssignment(node="n", containers=(_c("x", ContainerKind.APP, (A, 80000, 100)),))
    assert footprint(a)[A].excl == 1


def test_with_the_nodes_gpus_a_slice_on_another_gpu_is_refused_naming_pod_and_container():
    a = PodAssignment(node="n", containers=(_c("x", ContainerKind.APP, (A, 1, 0), (B, 1, 0)),))
    assert set(footprint(a)) == {A, B}, "without the GPU list every UUID is taken as given"
    with pytest.raises(AllocationError, match=r"pod ns/p container 'x' GPU 'GPU-b': not a GPU"):
        footprint(a, {A: GPU(uuid=A, model="m", memory_mib=100)}, pod_key="ns/p")


def test_a_malformed_assignment_names_the_node_when_no_pod_key_is_given():
    a = PodAssignment(node="n", containers=(_c("x", ContainerKind.APP, (A, 1, 100)),
                                            _c("y", ContainerKind.APP, (A, 1, 0))))
    with pytest.raises(AllocationError, match="pod on node 'n' GPU GPU-a: an exclusive slice"):
        footprint(a)

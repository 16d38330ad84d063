"""Footprints, the median request, percentiles and the time-weighted usage tracker."""

from __future__ import annotations

from gpuslice.model import (
    GPU,
    ContainerAssignment,
    ContainerKind,
    GPUSlice,
    PodAssignment,
    PodRequest,
    SliceRequest,
)
from gpuslice.simulate.metrics import (
    Footprint,
    UsageTracker,
    footprint,
    memory_threshold,
    nearest_rank,
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
    assert footprint(a) == {
        A: Footprint(memory_mib=3100, cores=50, slots=2, exclusive=False),
        B: Footprint(memory_mib=1000, cores=30, slots=1, exclusive=False),
    }, "on A the init phase (3000 + sidecar 100) is larger than the app phase (1000 + 100)"


def test_two_init_containers_take_the_larger_not_the_sum() -> None:
    a = PodAssignment(node="n", containers=(
        _c("i1", ContainerKind.INIT, (A, 500, 10)),
        _c("i2", ContainerKind.INIT, (A, 200, 90)),
        _c("app", ContainerKind.APP, (A, 300, 20)),
    ))
    assert footprint(a) == {A: Footprint(memory_mib=500, cores=90, slots=1, exclusive=False)}, (
        "init containers run one at a time: each dimension is the max over phases")


def test_an_exclusive_slice_marks_the_gpu_exclusive() -> None:
    a = PodAssignment(node="n", containers=(_c("x", ContainerKind.APP, (A, 80000, 100)),))
    assert footprint(a)[A].exclusive


def test_the_median_request_converts_percent_at_the_median_gpu_size() -> None:
    gpus = [GPU(uuid=f"g{i}", model="m", memory_mib=m) for i, m in enumerate((1000, 2000, 4000))]

    def pod(**kw: int) -> PodRequest:
        return PodRequest(namespace="d", name="p", slices=(SliceRequest(container="c", **kw),))

    pods = [pod(memory_mib=100), pod(memory_percent=50), pod(memory_mib=1500)]
    assert memory_threshold(pods, gpus) == 1000, "50 % of the median GPU (2000) is 1000 MiB"
    assert memory_threshold([], gpus) == 0


def test_nearest_rank_percentiles() -> None:
    v = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert [nearest_rank(v, p) for p in (50, 95, 100)] == [3.0, 10.0, 10.0]
    assert nearest_rank([], 50) is None, "no placed job: undefined, not zero"


def test_the_tracker_integrates_usage_over_time_and_keeps_the_peak() -> None:
    gpus = [GPU(uuid=A, model="m", memory_mib=1000), GPU(uuid=B, model="m", memory_mib=1000)]
    t = UsageTracker(gpus, threshold_mib=500)
    t.advance(0.0)
    t.hold("p", PodAssignment(node="n", containers=(_c("c", ContainerKind.APP, (A, 600, 50)),)))
    t.advance(10.0)
    t.drop("p")
    t.advance(20.0)
    assert t.area_mem == 600 / 2000 * 10, "30 % for 10 s, then nothing for 10 s"
    assert t.area_cores == 50 / 200 * 10
    assert t.area_frag == 400 / 1400 * 10, "A's 400 free MiB cannot take a 500 MiB request"
    assert (t.peak_mem, t.peak_cores) == (0.3, 0.25)
    assert t.stranded_mib == 0 and t.used_mib == 0, "dropping the pod restores everything"

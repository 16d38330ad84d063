"""The median request, percentiles and the time-weighted usage tracker (footprints: the
allocator's, tested in tests/unit/allocator/test_usage.py)."""

from __future__ import annotations

from gpuslice.allocator import footprint
from gpuslice.model import (
    GPU,
    ContainerAssignment,
    ContainerKind,
    GPUSlice,
    PodAssignment,
    PodRequest,
    SliceRequest,
)
from gpuslice.simulate.metrics import UsageTracker, memory_threshold, nearest_rank

A, B = "GPU-a", "GPU-b"


def _c(name: str, kind: ContainerKind, *slices: tuple[str, int, int]) -> ContainerAssignment:
    return ContainerAssignment(container=name, kind=kind,
                               slices=tuple(GPUSlice(uuid=u, memory_mib=m, cores=c)
                                            for u, m, c in slices))


def test_the_tracker_charges_the_allocators_footprint_so_an_init_does_not_add_to_the_app() -> None:
    gpus = [GPU(uuid=A, model="m", memory_mib=8000), GPU(uuid=B, model="m", memory_mib=8000)]
    a = PodAssignment(node="n", containers=(
        _c("warm", ContainerKind.INIT, (A, 3000, 50)),
        _c("metrics", ContainerKind.SIDECAR, (A, 100, 0)),
        _c("serve", ContainerKind.APP, (A, 1000, 30), (B, 1000, 30)),
    ))
    t = UsageTracker(gpus, threshold_mib=0)
    t.hold("p", a)
    fp = footprint(a)
    assert (t.mem, t.cores, t.slots) == ([fp[A].mem, fp[B].mem], [fp[A].cores, fp[B].cores],
                                         [fp[A].slots, fp[B].slots]), \
        "the simulator charges exactly what the allocator charges (one rule, one implementation)"
    assert (t.mem, t.cores) == ([3100, 1000], [50, 30]), \
        "on A the init phase (3000 + sidecar 100) is larger than the app phase (1000 + 100)"
    t.drop("p")
    assert t.mem == [0, 0] and t.used_mib == 0


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

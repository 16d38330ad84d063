"""libgpuslice's launch handlers end to end against the fake driver (native/fake/): a kernel of
N blocks occupies the fake GPU for N microseconds of real time, events take their stream's
position, so CUDA_DEVICE_SM_LIMIT must stretch a launch loop to ~100/limit of its unlimited
wall time — through the exported symbol (linked program) and through cuGetProcAddress."""

from __future__ import annotations

import pytest
from compute_loops import launch_loop_ms

KERNEL_BLOCKS, COUNT = 1000, 300  # 300 kernels of 1 ms


def loop_ms(gs, via: str | None, sm_limit: str | None, binary: str = "probe") -> float:
    # one region per limit: a region keeps the limits of the process that created it
    region = gs.tmp / f"sm-{sm_limit or 0}.region"
    return launch_loop_ms(gs, blocks=KERNEL_BLOCKS, count=COUNT, sm=sm_limit, region=region,
                          via=via, binary=binary)  # fmt: skip


@pytest.mark.parametrize(("via", "binary"), [(None, "probe"), ("procaddr", "probe_dl")])
def test_a_30_percent_limit_stretches_a_saturating_launch_loop_to_about_three_times(
    gs, via, binary
):
    free = loop_ms(gs, via, None, binary)
    limited = loop_ms(gs, via, "30", binary)
    share = free / limited
    # the 50 ms bucket lets the first ~15 ms of GPU work through at full speed: allow +0.06
    assert 0.26 <= share <= 0.36, f"{free:.0f} ms free vs {limited:.0f} ms limited: {share:.3f}"


def test_limit_100_means_no_limit(gs):
    free = loop_ms(gs, None, None)
    hundred = loop_ms(gs, None, "100")
    assert hundred <= free * 1.2 + 20, f"SM limit 100 must not throttle: {hundred} vs {free} ms"

"""The compute limit never silently turns off (issue 7 item 7).

Before: meters lived in a table of 16 contexts, so the kernels of a process's 17th context ran
unlimited; and a region's "no compute limit" was honoured by cuGetProcAddress (the launch
functions were not substituted) but not by the exported symbols (this process's env limit
applied), so one process was limited or not depending on how it found cuLaunchKernel.
A saturating loop of 1 ms kernels on the fake GPU takes ~0.2 s unlimited, ~0.6 s at 30 %."""

from __future__ import annotations

from pathlib import Path

import pytest
from compute_loops import launch_loop_ms
from harness import Harness

COUNT = 200
VIAS = [(None, "probe"), ("procaddr", "probe_dl")]  # export table, cuGetProcAddress


def loop_ms(gs: Harness, *setup: object, sm: str | None, region: Path, **kw: object) -> float:
    return launch_loop_ms(gs, *setup, count=COUNT, sm=sm, region=region, **kw)  # type: ignore[arg-type]


def test_a_seventeenth_context_is_limited_like_the_first(gs: Harness) -> None:
    sixteen = ["ctxcreate", "launch", 1, 1] * 16  # each context launches once: 16 meters
    free = loop_ms(gs, *sixteen, "ctxcreate", sm=None, region=gs.tmp / "free.region")
    limited = loop_ms(gs, *sixteen, "ctxcreate", sm="30", region=gs.tmp / "sm.region")
    assert limited > 2 * free, (
        f"the 17th context ran {limited:.0f} ms vs {free:.0f} ms unlimited: not limited to 30 %"
    )


@pytest.mark.parametrize(("via", "binary"), VIAS, ids=["exports", "cuGetProcAddress"])
def test_a_region_with_a_compute_limit_limits_a_process_without_one(
    gs: Harness, via: str | None, binary: str
) -> None:
    region = gs.tmp / "sm30.region"
    gs.probe("init", limit="512MiB", extra={"CUDA_DEVICE_SM_LIMIT": "30"}, region=region)
    free = loop_ms(gs, sm=None, region=gs.tmp / "free.region", via=via, binary=binary)
    joined = loop_ms(gs, sm=None, region=region, via=via, binary=binary)
    assert joined > 2 * free, f"{joined:.0f} ms vs {free:.0f} ms: the region's 30 % must apply"


@pytest.mark.parametrize(("via", "binary"), VIAS, ids=["exports", "cuGetProcAddress"])
def test_a_region_without_a_compute_limit_wins_over_the_env_alike_on_both_paths(
    gs: Harness, via: str | None, binary: str
) -> None:
    region = gs.tmp / "mem-only.region"
    gs.probe("init", limit="512MiB", region=region)  # created with a memory limit only
    free = loop_ms(gs, sm=None, region=gs.tmp / "free.region", via=via, binary=binary)
    joined = loop_ms(gs, sm="30", region=region, via=via, binary=binary)
    assert joined < 1.5 * free + 50, (
        f"{joined:.0f} ms vs {free:.0f} ms: the region (no compute limit) wins on every path"
    )

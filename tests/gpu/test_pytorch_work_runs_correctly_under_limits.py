"""Real PyTorch work under the library gives the same results: fp32 matmul and CUDA graph replay.

For each allocator (caching, `backend:cudaMallocAsync`, `expandable_segments:True`): first without
the library (the control: if the work fails natively the case is skipped, it says nothing about
the library), then under `gpuslice run` with a 4 GiB cap, and with a 4 GiB cap plus a 50 % compute
share (launch handlers in the path: cuLaunchKernel and cuGraphLaunch go through the library). The
matmul is compared with float64 on the CPU; the graph replay with the same expression run eagerly.
NVML's per-process used memory must stay under the cap while the work runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import GRANULE, PROGS, Child, GiB, MiB, nvml_used_by_pid, source_env

pytestmark = pytest.mark.gpu

ALLOCATORS = {"caching": None, "cudaMallocAsync": "backend:cudaMallocAsync",
              "expandable": "expandable_segments:True"}
LIMITS = {
    "4 GiB cap": ["--gpu-memory", "4GiB"],
    "4 GiB cap + 50 % compute": ["--gpu-memory", "4GiB", "--gpu-compute", "50"],
}
N = 2048


def _env(allocator: str) -> dict[str, str]:
    conf = ALLOCATORS[allocator]
    return source_env(**({"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}))


@pytest.fixture(scope="module")
def native_work() -> dict[str, dict[str, Any]]:
    """The control, once per allocator: the same work in a process without the library."""
    pytest.importorskip("torch", reason="PyTorch is not installed in this python3")
    results = {}
    for allocator in ALLOCATORS:
        child = Child([sys.executable, str(PROGS / "holder.py"), "--api", "torch"],
                      _env(allocator))
        try:
            results[allocator] = child.send(op="work", n=N)
        finally:
            child.kill()
    return results


@pytest.mark.parametrize("limits", list(LIMITS))
@pytest.mark.parametrize("allocator", list(ALLOCATORS))
def test_matmul_and_graph_replay_give_correct_results_under_the_library(
        allocator: str, limits: str, native_work: dict[str, dict[str, Any]], libgpuslice: Path,
        nvml: Any, region_path: Path, children: Callable[..., Any],
        record: Callable[..., None]) -> None:
    control = native_work[allocator]
    child = children(_env(allocator), via_cli=[*LIMITS[limits], "--region", str(region_path)])
    done = child.send(timeout=60.0, op="work", n=N)
    nvml_used = nvml_used_by_pid(nvml, child.pid)
    record("pytorch_work", allocator=allocator, limits=limits, native=control, under_library=done,
           nvml_used=nvml_used)
    if not control["ok"]:
        pytest.skip(f"{allocator}: the work fails without the library too: {control['error']}")
    assert done["ok"], (f"{allocator}, {limits}: the work fails under the library but not without "
                        f"it: {done['error']}\n{child.log()}")
    assert done["rel_err"] < 1e-4, (
        f"fp32 matmul relative error {done['rel_err']:.2e} vs float64 (native "
        f"{control['rel_err']:.2e}; TF32 is off by default)")
    assert done["graph_err"] == 0.0, (
        f"graph replay differs from the eager result by {done['graph_err']}")
    if nvml_used is not None:
        assert nvml_used <= 4 * GiB + GRANULE, f"NVML shows {nvml_used / MiB:.0f} MiB, over 4 GiB"
    assert child.close() == 0, f"child exit status; stderr:\n{child.log()}"

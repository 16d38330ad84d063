"""PyTorch (cu13) under `gpuslice run --gpu-memory`: OOM at the cap, total == cap, every allocator.

Each case is a fresh child process (tests/gpu/progs/holder.py --api torch) started through the
CLI, with the default caching allocator, `backend:cudaMallocAsync` or `expandable_segments:True`.
Ground truth for "nothing bypasses the cap" is NVML's per-process used memory; the region's own
number must not pass the cap either. (Usable bytes may exceed cap - context by the pool's spare:
with cudaMallocAsync, "context" includes the pool's first reserve that later tensors reuse.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import GRANULE, GiB, MiB, accounted_by_pid, nvml_used_by_pid, source_env

pytestmark = pytest.mark.gpu

ALLOCATORS = {
    "caching": None,
    "cudaMallocAsync": "backend:cudaMallocAsync",
    "expandable": "expandable_segments:True",
}
# Fill with big chunks first, then small ones: what is left unused at the OOM point is at most
# one small request rounded up to the allocator's segment (20 MiB for the caching allocator's
# large pool) plus the pool's own growth step.
CHUNKS = [256 * MiB, 16 * MiB, 2 * MiB]
SLACK = 64 * MiB


@pytest.mark.parametrize("cap_gib", [2, 4, 8])
@pytest.mark.parametrize("allocator", list(ALLOCATORS))
def test_pytorch_runs_out_of_memory_at_the_cap_and_sees_the_cap_as_total(
        cap_gib: int, allocator: str, libgpuslice: Path, torch_available: None, nvml: Any,
        region_path: Path, children: Callable[..., Any], record: Callable[..., None]) -> None:
    cap = cap_gib * GiB
    extra = {"PYTORCH_CUDA_ALLOC_CONF": ALLOCATORS[allocator]} if ALLOCATORS[allocator] else {}
    child = children(source_env(**extra), api="torch",
                     via_cli=["--gpu-memory", f"{cap_gib}GiB", "--region", str(region_path)])
    ready = child.ready
    assert ready["total"] == cap, (
        f"torch.cuda.mem_get_info() total must be the cap {cap}, got {ready['total']}: "
        f"cuMemGetInfo_v2 is not virtualised on this path; stderr:\n{child.log()}")
    context = cap - ready["free"]  # context + torch's first segment, as the library accounts it
    assert 0 < context < GiB, (
        f"the context's footprint should be counted (~500 MiB on H100), "
        f"got {context / MiB:.0f} MiB")

    filled = child.send(op="fill", chunks=CHUNKS)
    usable = filled["allocated"]
    nvml_used = nvml_used_by_pid(nvml, child.pid)
    accounted = accounted_by_pid(region_path, child.pid)
    record("pytorch_cap", allocator=allocator, cap=cap, total=ready["total"], context=context,
           usable=usable, error=filled["error"], reserved=filled.get("reserved"),
           nvml_used=nvml_used, accounted=accounted)

    problems = []  # every violated expectation at once: the report needs them all
    if filled["error"] != "OutOfMemoryError":
        problems.append(f"over the cap PyTorch must raise torch.cuda.OutOfMemoryError (the "
                        f"library returns CUDA_ERROR_OUT_OF_MEMORY), got {filled['error']}")
    if usable < cap - context - SLACK:
        problems.append(f"usable {usable / MiB:.0f} MiB is more than {SLACK // MiB} MiB short of "
                        f"cap - context = {(cap - context) / MiB:.0f} MiB: the library refuses "
                        f"memory that is still free")
    if nvml_used is not None and nvml_used > cap + GRANULE:
        problems.append(f"NVML says the process uses {nvml_used / MiB:.0f} MiB, over the "
                        f"{cap_gib} GiB cap: some memory bypasses the accounting")
    if accounted is not None and not cap - SLACK <= accounted <= cap:
        problems.append(f"the region accounts {accounted / MiB:.0f} MiB to the process at the "
                        f"OOM point; expected within {SLACK // MiB} MiB under the cap")
    assert not problems, "\n".join(problems) + f"\nchild stderr:\n{child.log()}"

    assert child.send(op="free_all")["ok"]
    again = child.send(op="alloc", bytes=usable // 2)
    assert again["ok"], (
        f"after freeing everything, half the usable memory must be allocatable again: {again}")
    assert child.close() == 0, f"child exit status; stderr:\n{child.log()}"


def test_a_graph_allocating_past_the_cap_is_refused_at_capture_and_one_that_fits_is_charged(
        libgpuslice: Path, torch_available: None, nvml: Any, region_path: Path,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    # Under cudaMallocAsync a captured graph's allocation becomes graph memory, backed at replay
    # from the device's graph pool. The cuMemAllocAsync made during capture is checked against
    # the cap like any other; the memory the replay takes is charged (NVML per-process).
    cap = 4 * GiB
    child = children(source_env(PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync"), api="torch",
                     via_cli=["--gpu-memory", "4GiB", "--region", str(region_path)])
    assert child.send(op="alloc", bytes=2 * GiB)["ok"]
    too_big = child.send(op="graph_alloc", bytes=1536 * MiB)
    fits = child.send(op="graph_alloc", bytes=512 * MiB)
    nvml_used = nvml_used_by_pid(nvml, child.pid)
    accounted = accounted_by_pid(region_path, child.pid)
    record("graph_memory_at_cap", cap=cap, too_big=too_big, fits=fits, nvml_used=nvml_used,
           accounted=accounted)
    assert not too_big["ok"] and too_big["error"] == "OutOfMemoryError", (
        f"a graph allocating past the cap must fail at capture: {too_big}\n{child.log()}")
    assert fits["ok"], f"a graph allocation that fits must work: {fits}\n{child.log()}"
    assert nvml_used is not None and accounted is not None
    assert nvml_used <= cap + GRANULE, f"NVML: {nvml_used / MiB:.0f} MiB, over the cap"
    assert abs(accounted - nvml_used) <= 2 * MiB + GRANULE, (
        f"graph memory must be charged: accounted {accounted / MiB:.0f} MiB, NVML "
        f"{nvml_used / MiB:.0f} MiB\n{child.log()}")

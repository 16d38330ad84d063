"""What the library accounts to a process (gpuslice.shim.Region) vs NVML's per-process used memory.

DESIGN §6 target: within 2 MiB + one allocation granule. Checked apart: a bare context's footprint
(absolute); each driver-API path (plain odd sizes, pitch, VMM, arrays, stream-ordered with pool
release and trim) as the change it makes to both numbers; PyTorch with each allocator, absolute and
per step; and the same for a process in its own pid namespace (a container: NVML lists host pids,
the library finds its own). Managed memory is recorded, not compared: NVML does not count unified
memory as the process's device memory until it migrates.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import GRANULE, MiB, accounted_by_pid, nvml_used_by_pid, shim_env

from gpuslice.shim import Region

pytestmark = pytest.mark.gpu

TOLERANCE = 2 * MiB + GRANULE

# (step name, command to the holder): each step keeps what the earlier ones hold.
DRIVER_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("plain 1 B", {"op": "alloc", "kind": "plain", "bytes": 1}),
    ("plain 3 MiB + 1 B", {"op": "alloc", "kind": "plain", "bytes": 3 * MiB + 1}),
    ("plain 256 MiB", {"op": "alloc", "kind": "plain", "bytes": 256 * MiB}),
    ("pitch 1000 B x 3000 rows", {"op": "alloc", "kind": "pitch", "bytes": 1000, "height": 3000}),
    ("vmm 64 MiB + 1 B", {"op": "alloc", "kind": "vmm", "bytes": 64 * MiB + 1}),
    ("array 2048x2048 float4", {"op": "alloc", "kind": "array", "bytes": 2048, "height": 2048}),
    ("async 128 MiB", {"op": "alloc", "kind": "async", "bytes": 128 * MiB}),
    ("free everything (pool keeps its reserve)", {"op": "free_all"}),
    ("trim the default pool to 0", {"op": "trim", "keep": 0}),
]
TORCH_STEPS: list[tuple[str, dict[str, Any]]] = [
    ("tensor 1 B", {"op": "alloc", "bytes": 1}),
    ("tensor 1 MiB + 1 B", {"op": "alloc", "bytes": MiB + 1}),
    ("tensor 30 MiB", {"op": "alloc", "bytes": 30 * MiB}),
    ("tensor 513 MiB", {"op": "alloc", "bytes": 513 * MiB}),
    ("matmul 1024 (cuBLAS workspace, lazily loaded kernels)",
     {"op": "work", "n": 1024, "graph": False}),
    ("mem_get_info after the work", {"op": "info"}),
    ("CUDA graph that allocates 256 MiB (graph memory under cudaMallocAsync)",
     {"op": "graph_alloc", "bytes": 256 * MiB}),
    ("empty_cache after freeing all", {"op": "free_all"}),
]


def _walk(steps: list[tuple[str, dict[str, Any]]], child: Any, region: Path, nvml: Any,
          record: Callable[..., None], pattern: str) -> list[tuple[str, int, int]]:
    """Run each step; returns (step, accounted, nvml) after the context alone and after each."""
    seen: list[tuple[str, int, int]] = []
    for name, cmd in [("context only", {"op": "info"}), *steps]:
        reply = child.send(**cmd)
        assert reply["ok"], f"step {name!r} failed: {reply}\n{child.log()}"
        accounted = accounted_by_pid(region, child.pid)
        nvml_used = nvml_used_by_pid(nvml, child.pid)
        if nvml_used is None:
            pytest.skip(f"NVML has no per-process row for pid {child.pid} (pid namespace?)")
        assert accounted is not None, f"the region has no live slot for pid {child.pid}"
        record("accounted_vs_nvml", pattern=pattern, step=name, accounted=accounted,
               nvml=nvml_used, diff=accounted - nvml_used)
        seen.append((name, accounted, nvml_used))
    return seen


def _absolute_problems(seen: list[tuple[str, int, int]], pattern: str) -> list[str]:
    return [f"{pattern} / {name}: accounted {acc / MiB:.1f} MiB vs NVML {nv / MiB:.1f} MiB "
            f"(diff {(acc - nv) / MiB:+.1f})"
            for name, acc, nv in seen if abs(acc - nv) > TOLERANCE]


def _delta_problems(seen: list[tuple[str, int, int]], pattern: str) -> list[str]:
    """Each step's change in accounted bytes vs its change in NVML's number."""
    out = []
    for (_, acc0, nv0), (name, acc, nv) in pairwise(seen):
        if abs((acc - acc0) - (nv - nv0)) > TOLERANCE:
            out.append(f"{pattern} / {name}: accounted changed by {(acc - acc0) / MiB:+.1f} MiB, "
                       f"NVML by {(nv - nv0) / MiB:+.1f} MiB")
    return out


def test_a_bare_contexts_footprint_is_accounted_like_nvml_sees_it(
        libgpuslice: Path, nvml: Any, region_path: Path, children: Callable[..., Any],
        record: Callable[..., None]) -> None:
    child = children(shim_env(libgpuslice, region_path, limit="16GiB"), api="driver")
    seen = _walk([], child, region_path, nvml, record, "driver context")
    problems = _absolute_problems(seen, "driver context")
    assert not problems, ("the context's accounted footprint must match NVML's per-process "
                          "used memory within 2 MiB + one granule:\n" + "\n".join(problems))


def test_each_driver_api_path_changes_the_account_as_nvml_sees_it_change(
        libgpuslice: Path, nvml: Any, region_path: Path, children: Callable[..., Any],
        record: Callable[..., None]) -> None:
    child = children(shim_env(libgpuslice, region_path, limit="16GiB"), api="driver")
    seen = _walk(DRIVER_STEPS, child, region_path, nvml, record, "driver")
    managed = child.send(op="alloc", kind="managed", bytes=8 * MiB)
    record("accounted_vs_nvml", pattern="driver", step="managed 8 MiB (not compared)",
           accounted=accounted_by_pid(region_path, child.pid),
           nvml=nvml_used_by_pid(nvml, child.pid), ok=managed["ok"])
    problems = _delta_problems(seen, "driver")
    assert not problems, ("every allocation path must change the accounted bytes as much as "
                          "NVML's per-process number (within 2 MiB + one granule):\n"
                          + "\n".join(problems))


@pytest.mark.parametrize("allocator", ["caching", "backend:cudaMallocAsync",
                                       "expandable_segments:True"])
def test_pytorch_allocations_are_accounted_like_nvml_sees_them(
        allocator: str, libgpuslice: Path, torch_available: None, nvml: Any, region_path: Path,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    extra = {} if allocator == "caching" else {"PYTORCH_CUDA_ALLOC_CONF": allocator}
    child = children(shim_env(libgpuslice, region_path, limit="16GiB", **extra))
    pattern = f"torch {allocator}"
    seen = _walk(TORCH_STEPS, child, region_path, nvml, record, pattern)
    problems = _absolute_problems(seen, pattern) + _delta_problems(seen, pattern)
    assert not problems, ("accounted usage (context included) must track NVML within 2 MiB + "
                          "one granule:\n" + "\n".join(problems))


# A container's pid namespace without a container runtime (needs root or user namespaces).
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def _host_pid_of_namespace_init(unshare_pid: int) -> int:
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    assert len(children) == 1, f"unshare should have one child, has {children}"
    return int(children[0])


def test_in_its_own_pid_namespace_a_process_is_accounted_like_nvml(
        libgpuslice: Path, torch_available: None, nvml: Any, region_path: Path,
        children: Callable[..., Any], record: Callable[..., None]) -> None:
    # Whether NVML lists the process under its namespace pid (the driver translates) or under
    # its host pid (the library must find it), context and lazily loaded modules are charged.
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) on this machine")
    trial = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30)
    if trial.returncode != 0:
        pytest.skip(f"cannot make a pid namespace here: {trial.stderr.strip()}")
    child = children(shim_env(libgpuslice, region_path, limit="16GiB"), prefix=UNSHARE)
    host_pid = _host_pid_of_namespace_init(child.proc.pid)
    pattern = "torch in a pid namespace"
    seen: list[tuple[str, int, int]] = []
    for name, cmd in [("context only", {"op": "info"}), *TORCH_STEPS]:
        reply = child.send(**cmd)
        assert reply["ok"], f"step {name!r} failed: {reply}\n{child.log()}"
        slot = next(p for p in Region.read(region_path, check_alive=False).processes
                    if p.pid == child.pid and p.state == "live")
        assert slot.nvml_pid in (child.pid, host_pid), (
            f"the library must know the pid NVML lists it under (namespace pid {child.pid}, "
            f"host pid {host_pid}): {slot}\n{child.log()}")
        nvml_used = nvml_used_by_pid(nvml, host_pid)
        assert nvml_used is not None, f"NVML has no row for host pid {host_pid}"
        record("accounted_vs_nvml", pattern=pattern, step=name, accounted=slot.used[0],
               nvml=nvml_used, diff=slot.used[0] - nvml_used, namespace_pid=child.pid,
               host_pid=host_pid, nvml_pid_seen_inside=slot.nvml_pid)
        seen.append((name, slot.used[0], nvml_used))
    problems = _absolute_problems(seen, pattern) + _delta_problems(seen, pattern)
    assert not problems, ("in a pid namespace too, accounted usage (context and lazily loaded "
                          "modules included) must track NVML within 2 MiB + one granule:\n"
                          + "\n".join(problems))

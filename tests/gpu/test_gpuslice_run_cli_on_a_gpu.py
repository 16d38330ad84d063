"""`gpuslice run` on a real GPU: the driver is found (no refusal), a bare --gpu-memory number is
MiB, and SIGTERM to `gpuslice run` reaches the CUDA process, which releases its GPU memory, while
the temporary region goes away. The CPU-only side is tests/unit/test_cli_run.py (fake driver).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import Child, MiB, nvml_used_by_pid, source_env

pytestmark = pytest.mark.gpu


def _region_of(pid: int) -> Path:
    """The region a process under `gpuslice run` was given (its CUDA_DEVICE_MEMORY_SHARED_CACHE)."""
    key = b"CUDA_DEVICE_MEMORY_SHARED_CACHE="
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    (value,) = [e[len(key):] for e in env if e.startswith(key)]
    return Path(value.decode())


def test_a_bare_gpu_memory_number_caps_the_gpu_in_mib(
        libgpuslice: Path, region_path: Path, children: Callable[..., Child]) -> None:
    child = children(source_env(), api="driver",
                     via_cli=["--gpu-memory", "3000", "--region", str(region_path)])
    assert child.ready["total"] == 3000 * MiB, child.ready
    assert "no NVIDIA driver" not in child.log()


def test_sigterm_to_gpuslice_run_ends_the_cuda_process_and_removes_its_region(
        libgpuslice: Path, nvml: Any, children: Callable[..., Child],
        record: Callable[..., None]) -> None:
    child = children(source_env(), api="driver", via_cli=["--gpu-memory", "4GiB"])
    assert child.send(op="alloc", bytes=512 * MiB)["ok"]
    region = _region_of(child.pid)
    assert region.is_file(), "the library made the temporary region at the first CUDA call"
    assert (nvml_used_by_pid(nvml, child.pid) or 0) >= 512 * MiB
    child.proc.send_signal(signal.SIGTERM)  # to gpuslice run, not to the CUDA process
    status = child.proc.wait(timeout=30)
    assert status == 128 + signal.SIGTERM, "the command died of the SIGTERM passed on to it"
    assert not region.parent.exists(), "the temporary region is removed"
    start = time.monotonic()
    while nvml_used_by_pid(nvml, child.pid) is not None and time.monotonic() - start < 10:
        time.sleep(0.05)
    gone = time.monotonic() - start
    assert nvml_used_by_pid(nvml, child.pid) is None, "the GPU memory was released"
    record("sigterm_via_gpuslice_run", nvml_row_gone_s=round(gone, 3))

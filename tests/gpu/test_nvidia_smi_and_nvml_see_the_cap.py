"""`nvidia-smi` and NVML (v1 and v2 memory info) run under the library report the cap as total.

The output of `gpuslice run --gpu-memory 4GiB -- nvidia-smi` is saved next to the suite's results
(nvidia-smi-under-gpuslice.txt). Without the library the same query shows the real card, so the
assertions could fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from gpu_harness import GiB, MiB, gpuslice_argv, shim_env, source_env

pytestmark = pytest.mark.gpu

QUERY = ["nvidia-smi", "--query-gpu=memory.total,memory.used,memory.free",
         "--format=csv,noheader,nounits", "-i", "0"]

NVML_PROBE = """
import json, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
print(json.dumps({"v1": [v1.total, v1.used, v1.free, 0],
                  "v2": [v2.total, v2.used, v2.free, v2.reserved]}))
"""


def _query(argv: list[str], env: dict[str, str]) -> list[int]:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(argv)} failed: {done.stdout}{done.stderr}"
    return [int(x) for x in done.stdout.strip().splitlines()[0].split(",")]


def test_nvidia_smi_under_gpuslice_run_shows_the_limit_as_total(
        libgpuslice: Path, region_path: Path, results_dir: Path,
        record: Callable[..., None]) -> None:
    real_total, _, _ = _query(QUERY, source_env())
    assert real_total > 4096, f"the real card should be larger than the 4 GiB slice: {real_total}"
    run = ["run", "--gpu-memory", "4GiB", "--region", str(region_path), "--"]
    full = subprocess.run(gpuslice_argv(*run, "nvidia-smi"), env=source_env(),
                          capture_output=True, text=True, timeout=60)
    (results_dir / "nvidia-smi-under-gpuslice.txt").write_text(full.stdout + full.stderr)
    assert full.returncode == 0, f"nvidia-smi under the library failed:\n{full.stderr}"
    assert "4096MiB" in full.stdout, (
        f"nvidia-smi's memory column must show the 4 GiB limit as total:\n{full.stdout}")

    total, used, free = _query(gpuslice_argv(*run, *QUERY), source_env())
    record("nvidia_smi", limit_mib=4096, real_total_mib=real_total, total_mib=total,
           used_mib=used, free_mib=free)
    assert total == 4096, f"memory.total must be the limit (4096 MiB), got {total}"
    assert used + free == total, f"used {used} + free {free} must add up to total {total}"


def test_nvml_memory_info_v1_and_v2_report_the_slice(
        libgpuslice: Path, region_path: Path, record: Callable[..., None]) -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py (pynvml) is not installed")
    env = shim_env(libgpuslice, region_path, limit="4GiB")
    done = subprocess.run([sys.executable, "-c", NVML_PROBE], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, f"pynvml under the library failed:\n{done.stderr}"
    info = json.loads(done.stdout.strip().splitlines()[-1])
    record("nvml_memory_info", limit=4 * GiB, **info)
    for version in ("v1", "v2"):
        total, used, free, reserved = info[version]
        assert total == 4 * GiB, (
            f"nvmlDeviceGetMemoryInfo {version} total must be the 4 GiB limit, got "
            f"{total / MiB:.0f} MiB")
        assert free == total - used - reserved, (
            f"{version}: free must be total - used (- reserved for v2): {info[version]}")

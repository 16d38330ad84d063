"""Issue 7 on a real GPU: a compute budget stamped on another clock does not hold PyTorch's
kernels back, and a process forked while another thread is inside libgpuslice (creating a
context: the real driver takes ~0.1-0.5 s) can still call CUDA without hanging on the library.

Run: `PYTHONPATH=src python3 -m pytest -m gpu tests/gpu/test_compute_and_fork_on_a_gpu.py -rA`."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

import pytest
from gpu_harness import ROOT, shim_env

pytestmark = pytest.mark.gpu
COMPUTE0_TAT = 4096 + 256  # region device entry 0, compute block, tat_ns (compute_shared.h)
FORK_CHILD = ROOT / "tests" / "native" / "progs" / "fork_child.c"


def test_a_budget_from_another_clock_does_not_hold_pytorch_back(
    libgpuslice: Path, region_path: Path, children, torch_available: None
) -> None:
    env = shim_env(libgpuslice, region_path, limit="8GiB", CUDA_DEVICE_SM_LIMIT="30")
    first = children(env)
    assert first.send(op="work", timeout=300)["ok"], first.log()
    first.close()
    with open(region_path, "r+b") as f:  # a million seconds ahead: a region from another boot
        f.seek(COMPUTE0_TAT)
        f.write(struct.pack("<Q", time.monotonic_ns() + 10**15))
    second = children(env)
    t0 = time.monotonic()
    reply = second.send(op="work", timeout=120)  # before the fix: every launch waited for ever
    assert reply["ok"], second.log()
    print(f"work at 30 % after a stale budget: {time.monotonic() - t0:.1f} s")


def _libcuda_to_link() -> str:
    home = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    for cand in (
        home / "lib64/stubs/libcuda.so",
        Path("/usr/local/nvidia/lib64/libcuda.so.1"),
        Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
    ):
        if cand.exists():
            return str(cand)
    pytest.skip("no libcuda to link the fork test program against")


def test_a_child_forked_while_the_library_holds_a_lock_does_not_hang(
    libgpuslice: Path, region_path: Path, tmp_path: Path
) -> None:
    home = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    exe = tmp_path / "fork_child"
    cc = ["cc", "-std=gnu11", "-O1", f"-I{home / 'include'}"]
    subprocess.run([*cc, str(FORK_CHILD), "-o", str(exe), _libcuda_to_link(), "-lpthread"],
                   check=True, timeout=120)  # fmt: skip
    env = shim_env(libgpuslice, region_path, limit="8GiB", CUDA_DEVICE_SM_LIMIT="30")
    for fork_after_ms in ("20", "60"):  # inside the other thread's context creation
        res = subprocess.run([str(exe), fork_after_ms], env=env, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        print(res.stdout, res.stderr[-2000:])
        assert "wait rc=0" in res.stdout, f"the forked child hung:\n{res.stdout}{res.stderr}"
        assert "bg=0" in res.stdout, "the parent's own context creation succeeded"

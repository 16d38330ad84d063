"""timing.c heals when its events died with a destroyed context whose address a new context got
(the meter is found by address): before, no event of that meter could be recorded or timed
again, so the compute limit was silently off for the new context. Runs timing_heals.c, which
links timing.c against a stub driver whose events die with their context. Needs cc and cuda.h."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from harness import CUDA_INCLUDE, NATIVE

HERE = Path(__file__).resolve().parent
CC = os.environ.get("CC", "cc")


@pytest.mark.skipif(shutil.which(CC) is None or not Path(CUDA_INCLUDE, "cuda.h").exists(),
                    reason=f"needs a C compiler ({CC}) and {CUDA_INCLUDE}/cuda.h")  # fmt: skip
def test_timing_recovers_when_a_new_context_reuses_a_dead_ones_address(tmp_path: Path) -> None:
    exe = tmp_path / "timing_heals"
    build = subprocess.run(
        [CC, "-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE / 'src'}",
         f"-I{NATIVE / 'include'}", f"-I{NATIVE / 'include' / 'gpuslice'}", f"-I{CUDA_INCLUDE}",
         str(HERE / "timing_heals.c"), str(NATIVE / "src/compute/timing.c"), "-o", str(exe)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "0 failure(s)" in res.stdout, res.stdout + res.stderr

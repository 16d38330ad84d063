"""Issue 21 on real GPUs, without NCCL: two processes whose kernels wait on each other through
CUDA IPC (tests/gpu/progs/ipc_spin.cu: a compute kernel, then a kernel that spins until the
peer's kernel set its flag) under compute limits of 30 % and 50 %, on two GPUs (when there are
two) and on one GPU, through benchmarks/multi_gpu/collective_caps.py, with the library as the
node agent configures it (gang holds on: GPUSLICE_COMPUTE_PHASE=1 for every container under a
compute limit), over 2,000 steps (shorter runs end before the steady state). The issue's
targets: the job completes, its step is within 1.25x of (the step without the library / share;
on one GPU met since its processes are charged the union of their spans, 1.18-1.20x), and no
launch is held more than 10 ms past what it owed. The attack: a kernel named like NCCL's
all-reduce that "waits" (spins, i.e. computes) gets its limit's share of the unlimited rate, no
more. And the same pair as two pods of one job (each its own region and budget) handed one gang
directory (native/src/compute/crew.h) completes at its share.
NCCL itself and DDP: benchmarks/multi_gpu/run.sh (nccl_bench.py under the same limits).
Run: `PYTHONPATH=src python3 -m pytest -m gpu tests/gpu/test_collectives_under_compute_caps.py
--confcutdir=tests/gpu -rA` (needs nvcc; about 2 min of GPU time on one GPU, 3 on two)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import ROOT

pytestmark = pytest.mark.gpu
SCRIPT = ROOT / "benchmarks" / "multi_gpu" / "collective_caps.py"


def _collective_caps(libgpuslice: Path, out: Path, *args: str) -> dict[str, Any]:
    """collective_caps.py's results with the library as the node agent configures it (gang
    holds on), over 2,000 steps; `args`: more of its options."""
    if not shutil.which("nvcc") and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("no nvcc to build tests/gpu/progs/ipc_spin.cu")
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--lib",
                          str(libgpuslice), "--phase", "--steps", "2000", *args],
                         capture_output=True, text=True, timeout=900)  # fmt: skip
    print(run.stdout)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return json.loads((out / "collective_caps.json").read_text())


@pytest.fixture(scope="module")
def results(libgpuslice: Path, results_dir: Path, record) -> dict[str, Any]:
    data = _collective_caps(libgpuslice, results_dir)
    for p in data["pairs"]:
        record("collective_caps_pair", **{k: v for k, v in p.items() if k != "ranks"})
    for d in data["disguised"]:
        record("collective_caps_disguised", **d)
    return data


@pytest.fixture(scope="module")
def pods(libgpuslice: Path, results_dir: Path, record) -> dict[str, Any]:
    """The ranks as two pods of one job on the node: each its own region (budget), one gang
    directory (GPUSLICE_GANG_DIR, as the node agent hands pods annotated gpuslice.io/gang)."""
    data = _collective_caps(libgpuslice, results_dir / "pods", "--pods", "gang",
                            "--disguised-seconds", "0")
    for p in data["pairs"]:
        record("collective_caps_pods", **{k: v for k, v in p.items() if k != "ranks"})
    return data


def _pairs(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in data["pairs"] if p["backend"] == "gpuslice"]


def _complete_at_share(data: dict[str, Any], who: str, step: str) -> list[dict[str, Any]]:
    """Every gpuslice pair of `data` completed, its step (`step`: the summary's field for the
    message) within 1.25 x the target; the pairs."""
    pairs = _pairs(data)
    assert pairs, "no pair ran"
    for p in pairs:
        where = f"{who}{p['placement']} at {p['limit']} %"
        assert p["completed"], f"{where}: did not complete: {p['ranks']}"
        assert p["step_ratio"] <= 1.25, (
            f"{where}: step {p[step]:.3f} ms, target {p['target_step_ms']:.3f} ms")
    return pairs


def test_the_pair_completes_at_its_share_on_one_gpu_and_on_two(results) -> None:
    _complete_at_share(results, "", "step_ms")


def test_no_launch_is_held_past_what_it_owed_plus_10_ms(results) -> None:
    for p in _pairs(results):
        assert 0 <= p["hold_over_debt_ms"] <= 10, (p["placement"], p["limit"], p["ranks"])


def test_a_kernel_named_like_ncclallreduce_gets_no_more_than_its_share(results) -> None:
    for d in results["disguised"]:
        if d["limit"]:
            assert d["share"] is not None and d["share"] <= d["limit"] / 100 + 0.03, d


def test_two_pods_of_one_job_with_one_gang_directory_complete_at_their_share(pods) -> None:
    # apart (no directory) the same runs did not complete 400 steps in 30 s, at 30 or 50 %, on
    # one GPU or two (docs/benchmarks.md § Ranks in two pods of one job). Each pod has its own
    # budget, so on one GPU the pair gets twice the share the target assumes: at or under 1.25
    for p in _complete_at_share(pods, "two pods, ", "mean_step_ms"):
        assert 0 <= p["hold_over_debt_ms"] <= 10, ("two pods", p["placement"], p["limit"],
                                                   p["ranks"])

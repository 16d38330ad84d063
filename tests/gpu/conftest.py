"""Fixtures of the real-GPU tests: the library build, the GPU check, children, NVML, results.

Owns: the session build (`make -C native`; a build failure is a test failure with the compiler
output), the clean skip when there is no NVIDIA GPU/driver (every test module here sets
`pytestmark = pytest.mark.gpu`, deselected by default), a fresh region file per test, the
`children` factory (killed at teardown, their stderr printed into the pytest log), NVML (pynvml)
in the parent, and `record(...)`: one JSON object per figure, appended to
$GPUSLICE_GPU_RESULTS/gpu_tests.jsonl (benchmarks/gpu_suite.sh sets it) so docs/benchmarks-gpu.md
quotes the same run. Helpers (environments, Child, ground-truth readers): gpu_harness.py.
Invariant: the parent never creates a CUDA context, so it never shows up in the numbers.
Run: `PYTHONPATH=src python3 -m pytest -m gpu tests/gpu` on a GPU machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_harness import LIBRARY, PROGS, ROOT, Child, gpuslice_argv


def _gpu_problem() -> str | None:
    """Why this machine cannot run GPU tests, or None when it can."""
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH (not a GPU machine)"
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 or "GPU 0" not in probe.stdout:
        return f"nvidia-smi -L found no GPU: {probe.stdout.strip()} {probe.stderr.strip()}"
    return None


@pytest.fixture(scope="session", autouse=True)
def gpu_machine() -> None:
    """Skip the whole directory cleanly on machines without an NVIDIA GPU and driver."""
    problem = _gpu_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def libgpuslice(gpu_machine: None) -> Path:
    """Build the library once per session with the Makefile (gcc on the GPU machine)."""
    build = subprocess.run(["make", "-C", str(ROOT / "native")], capture_output=True, text=True,
                           timeout=300)
    if build.returncode != 0 or not LIBRARY.is_file():
        pytest.fail(f"make -C native failed (exit {build.returncode}):\n{build.stdout[-4000:]}\n"
                    f"{build.stderr[-4000:]}", pytrace=False)
    return LIBRARY


@pytest.fixture(scope="session")
def torch_available() -> None:
    """PyTorch tests need torch in this interpreter (children use the same python3)."""
    pytest.importorskip("torch", reason="PyTorch is not installed in this python3")


@pytest.fixture(scope="session")
def nvml() -> Iterator[Any]:
    """pynvml, initialised once; the parent uses NVML only and never a CUDA context."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py (pynvml) is not installed")
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


@pytest.fixture
def region_path(tmp_path: Path) -> Path:
    """A fresh region file: each test gets its own cap, shared only by the processes it starts."""
    return tmp_path / "gpuslice.region"


@pytest.fixture
def children() -> Iterator[Callable[..., Child]]:
    """Factory for holder children, all killed at the end of the test whatever happened."""
    started: list[Child] = []

    def start(env: dict[str, str], api: str = "torch", via_cli: list[str] | None = None,
              prefix: list[str] | None = None) -> Child:
        argv = [sys.executable, str(PROGS / "holder.py"), "--api", api]
        if via_cli is not None:
            argv = gpuslice_argv("run", *via_cli, "--", *argv)
        argv = [*(prefix or []), *argv]
        child = Child(argv, env)
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()
        if child.log():  # library log lines land in the pytest log (-rA) for the report
            print(f"--- stderr of {child.argv[-3:]} (pid {child.pid}):\n{child.log()}")


@pytest.fixture(scope="session")
def results_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tests leave artefacts: $GPUSLICE_GPU_RESULTS (set by benchmarks/gpu_suite.sh)."""
    target = os.environ.get("GPUSLICE_GPU_RESULTS")
    path = Path(target) if target else tmp_path_factory.mktemp("gpu-results")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def record() -> Iterator[Callable[..., None]]:
    """Append one JSON object per call to the results file the suite script collects."""
    target_dir = os.environ.get("GPUSLICE_GPU_RESULTS")

    def add(test: str, **fields: Any) -> None:
        line = json.dumps({"test": test, **fields})
        print(f"RESULT {line}")  # also in the pytest log (-s / -rA), in case the file is lost
        if target_dir:
            Path(target_dir).mkdir(parents=True, exist_ok=True)
            with (Path(target_dir) / "gpu_tests.jsonl").open("a") as fh:
                fh.write(line + "\n")

    yield add

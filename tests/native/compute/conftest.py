"""Fixtures for the compute controller tests: the simulator library built from the library's
own compute C sources (benchmarks/compute_accuracy/sim.py lists them) plus the fake GPU timeline
benchmarks/compute_accuracy/simgpu.c, loaded with ctypes. Needs a C compiler (cc), no GPU."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def sim():
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler: the controller simulator is built from C sources")
    spec = importlib.util.spec_from_file_location(
        "gs_compute_sim", ROOT / "benchmarks" / "compute_accuracy" / "sim.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gs_compute_sim"] = mod
    spec.loader.exec_module(mod)
    mod.lib()
    return mod

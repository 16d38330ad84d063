"""benchmarks/dra_e2e.py as a module, for the tests that run it or borrow its fake nodes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "dra_e2e.py"


@pytest.fixture(scope="module")
def dra_e2e():
    spec = importlib.util.spec_from_file_location("dra_e2e", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["dra_e2e"] = module
    spec.loader.exec_module(module)
    return module

"""Fixtures for tests/native: one build of libgpuslice + fake driver + probes per session, and a
per-test Harness (private region + fake state files). A build failure fails every test that
needs it, with the compiler output; only a machine that cannot build at all (no cuda.h, make or
cc) skips them, with one reason. Runner: harness.py; C side: progs/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from harness import CUDA_INCLUDE, Binaries, BuildError, Harness, build_all

_cached: dict[str, Binaries | BuildError] = {}
_SKIP = "cannot build libgpuslice here: "


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Report that skip at this file, not at each test, so `-ra` prints it once with a count."""
    report = (yield).get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and _SKIP in longrepr[2]:
        report.longrepr = (__file__, _SKIP_LINE, longrepr[2])


def _cannot_build() -> str | None:
    """Why this machine cannot build the library (setup.py's rule), or None."""
    inc = Path(CUDA_INCLUDE)
    if not (inc / "cuda.h").is_file():
        return f"no CUDA headers ({inc / 'cuda.h'} not found; set CUDA_HOME or CUDA_INCLUDE)"
    for tool in ("make", os.environ.get("CC") or "cc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH"
    return None


_SKIP_LINE = _cannot_build.__code__.co_firstlineno


@pytest.fixture(scope="session")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Binaries:
    why = _cannot_build()
    if why is not None:
        pytest.skip(_SKIP + why)
    if "b" not in _cached:
        try:
            _cached["b"] = build_all(tmp_path_factory.mktemp("native-bin"))
        except BuildError as exc:
            _cached["b"] = exc
    got = _cached["b"]
    if isinstance(got, BuildError):
        pytest.fail(f"native build failed:\n{got}", pytrace=False)
    return got


@pytest.fixture
def gs(binaries: Binaries, tmp_path: Path) -> Harness:
    return Harness(binaries, tmp_path)

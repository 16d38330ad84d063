"""Fixtures for tests/native: one build of libgpuslice + fake driver + probes per session, and a
per-test Harness (private region + fake state files). A build failure fails every test that
needs it, with the compiler output (never a skip). Runner: harness.py; C side: progs/."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Binaries, BuildError, Harness, build_all

_cached: dict[str, Binaries | BuildError] = {}


@pytest.fixture(scope="session")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Binaries:
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

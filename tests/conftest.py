"""Shared pytest set-up: the `gpu` marker is deselected by default (see pyproject addopts), the
test API server's fixtures, and ONE build of libgpuslice + fake driver + probes per session for
every test that runs the library (tests/native, the node agent's and the DRA plugin's tests).
A build failure fails every test that needs it, with the compiler output; only a machine that
cannot build at all (no make or cc; cuda.h comes with the dev extra's nvidia-cuda-runtime) skips
them, with one reason; where CI is set (CI=true on CI runners) that fails them instead."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))  # harness.py: build + runner

from harness import BUILD_SKIP, Binaries, BuildError, build_all, cannot_build

pytest_plugins = ["kubeapi.fixtures"]  # kube_api: the test API server (tests/kubeapi/)

_cached: dict[str, Binaries | BuildError] = {}


@pytest.fixture(scope="session")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Binaries:
    why = cannot_build()
    if why is not None:
        if os.environ.get("CI"):  # as tests/deploy/test_chart.py does for helm
            pytest.fail(f"CI is set and {BUILD_SKIP}{why}", pytrace=False)
        pytest.skip(BUILD_SKIP + why)
    if "b" not in _cached:
        try:
            _cached["b"] = build_all(tmp_path_factory.mktemp("native-bin"))
        except BuildError as exc:
            _cached["b"] = exc
    got = _cached["b"]
    if isinstance(got, BuildError):
        pytest.fail(f"native build failed:\n{got}", pytrace=False)
    return got

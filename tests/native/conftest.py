"""Fixtures for tests/native: a per-test Harness (private region + fake state files) over the
session's build (`binaries`, tests/conftest.py). Runner: harness.py; C side: progs/."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import BUILD_SKIP, Binaries, Harness, cannot_build

_SKIP_LINE = cannot_build.__code__.co_firstlineno


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Report the build skip at harness.cannot_build, not at each test, so `-ra` prints it once
    with a count."""
    report = (yield).get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and BUILD_SKIP in longrepr[2]:
        report.longrepr = (cannot_build.__code__.co_filename, _SKIP_LINE, longrepr[2])


@pytest.fixture
def gs(binaries: Binaries, tmp_path: Path) -> Harness:
    return Harness(binaries, tmp_path)

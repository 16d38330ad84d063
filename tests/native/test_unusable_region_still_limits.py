"""A region file that cannot be used (missing directory, foreign file) must never mean "no limit":
the library logs why and enforces the limits for the process alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB


def _foreign_file(tmp: Path) -> Path:
    path = tmp / "foreign.region"
    path.write_text("not a gpuslice region")
    return path


@pytest.mark.parametrize(
    "make_path",
    [
        pytest.param(lambda tmp: tmp / "no-such-dir" / "gpuslice.region", id="missing directory"),
        pytest.param(_foreign_file, id="foreign file"),
    ],
)
def test_an_unusable_region_falls_back_to_a_private_cap(gs: Harness, make_path) -> None:
    region = make_path(gs.tmp)
    res = gs.probe("init", "ctx", "info", "alloc", 64 * MiB, "alloc", 2 * MiB,
                   limit="64Mi", region=region)
    assert res.one("info").int("total") == 64 * MiB, f"the cap still applies:\n{res.describe()}"
    assert [a.rc for a in res.of("alloc")] == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY], (
        f"64 MiB fits, the next 2 MiB does not:\n{res.describe()}"
    )
    errors = res.log_lines("E")
    assert any("for this process alone" in ln for ln in errors), (
        f"the log says the cap is no longer shared and how to fix it:\n{res.describe()}"
    )

"""A CUDA_DEVICE_MEMORY_LIMIT_<i> the library does not read (`_00`, `_O`, an index past the last
device) or an unknown GPUSLICE_* name used to be ignored, so the process ran uncapped or in the
default mode without a word. Now cuInit returns CUDA_ERROR_INVALID_VALUE with one error line that
names the variable, its value and the fix; nothing is allocated."""

from __future__ import annotations

import re

import pytest
from harness import CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS, NATIVE, Harness, MiB

_max = re.search(r"#define GS_MAX_DEVICES (\d+)", (NATIVE / "src/config.h").read_text())
assert _max, "config.h lost GS_MAX_DEVICES"
PAST_LAST = int(_max.group(1))  # the first index the library does not cap

BAD = [
    ("CUDA_DEVICE_MEMORY_LIMIT_00", "64Mi", "not a device index"),
    ("CUDA_DEVICE_MEMORY_LIMIT_O", "64Mi", "not a device index"),
    (f"CUDA_DEVICE_MEMORY_LIMIT_{PAST_LAST}", "64Mi", "beyond the"),
    ("GPUSLICE_COMPUTE_MOD", "work-conserving", "unknown gpuslice variable"),
]


@pytest.mark.parametrize(("name", "value", "why"), BAD, ids=[b[0] for b in BAD])
def test_an_unread_variable_fails_cu_init_with_one_line_naming_it(
    gs: Harness, name: str, value: str, why: str
) -> None:
    res = gs.probe("init", "ctx", "alloc", 128 * MiB, extra={name: value})
    assert res.one("init").rc == CUDA_ERROR_INVALID_VALUE, f"{name} ignored:\n{res.describe()}"
    assert res.one("alloc").rc != CUDA_SUCCESS, f"never run uncapped:\n{res.describe()}"
    errors = res.log_lines("E")
    assert len(errors) == 1, f"exactly one error line:\n{res.describe()}"
    assert f'{name}="{value}"' in errors[0] and why in errors[0], errors[0]


def test_the_gpuslice_tools_own_variables_do_not_stop_cuda(gs: Harness) -> None:
    res = gs.probe(
        "init",
        limit="64Mi",
        extra={"GPUSLICE_LIBRARY": "/x/libgpuslice.so", "GPUSLICE_GPU_RESULTS": "/tmp/r"},
    )
    assert res.one("init").rc == CUDA_SUCCESS, res.describe()
    assert not res.log_lines("E"), res.describe()

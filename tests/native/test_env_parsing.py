"""CUDA_DEVICE_MEMORY_LIMIT(_<i>) grammar: DIGITS with an optional binary suffix from k/K/Ki/KiB,
m/M/Mi/MiB, g/G/Gi/GiB, t/T/Ti/TiB, surrounding whitespace allowed. Anything else (decimal units,
signs, decimals, zero, overflow, garbage) makes cuInit return CUDA_ERROR_INVALID_VALUE with one
clear error line on stderr naming the variable and the value, and never runs unlimited."""

from __future__ import annotations

import re

import pytest
from harness import CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS, GiB, Harness, KiB, MiB, Result

ACCEPTED = [
    ("67108864", 64 * MiB),
    ("65536k", 64 * MiB),
    ("65536K", 64 * MiB),
    ("65536Ki", 64 * MiB),
    ("65536KiB", 64 * MiB),
    ("64m", 64 * MiB),
    ("64M", 64 * MiB),
    ("64Mi", 64 * MiB),
    ("64MiB", 64 * MiB),
    ("1g", GiB),
    ("1G", GiB),
    ("1Gi", GiB),
    ("1GiB", GiB),
    (" 64Mi ", 64 * MiB),
    ("\t96M\n", 96 * MiB),
    ("2048K", 2 * MiB),
    ("3072Ki", 3 * MiB),
]
REJECTED = [
    "4GB",
    "-1",
    "1.5G",
    "0",
    "0Mi",
    "99999999999999999999",
    "garbage",
    "64 Mi",
    "64mb",
    "+64M",
    "0x100000",
    "16777216T",
    "64MiBs",
    "1e9",
    "64iB",
]


@pytest.mark.parametrize(("text", "size"), ACCEPTED, ids=[repr(a[0]) for a in ACCEPTED])
def test_accepted_sizes_become_the_reported_total(gs: Harness, text: str, size: int) -> None:
    res = gs.probe("init", "ctx", "info", limit=text, fake_mib=2048)
    assert res.one("init").rc == CUDA_SUCCESS, res.describe()
    assert res.one("info").int("total") == size, f"{text!r} = {size} bytes:\n{res.describe()}"
    assert not res.log_lines("E"), res.describe()


@pytest.mark.parametrize("text", ["1t", "1T", "1Ti", "1TiB"])
def test_tebibyte_suffixes_are_accepted(gs: Harness, text: str) -> None:
    res = gs.probe("init", limit=text)
    assert res.one("init").rc == CUDA_SUCCESS, res.describe()


@pytest.mark.parametrize("text", REJECTED, ids=[repr(t) for t in REJECTED])
def test_rejected_sizes_fail_cu_init_with_one_clear_line(gs: Harness, text: str) -> None:
    res = gs.probe("init", "ctx", "alloc", KiB, limit=text)
    assert res.one("init").rc == CUDA_ERROR_INVALID_VALUE, (
        f"{text!r} must be refused:\n{res.describe()}"
    )
    assert res.one("alloc").rc != CUDA_SUCCESS, f"never run unlimited:\n{res.describe()}"
    errors = res.log_lines("E")
    assert len(errors) == 1, f"exactly one error line for {text!r}:\n{res.describe()}"
    assert re.match(r"gpuslice\[\d+:\d+\] E \S+\.c:\d+ ", errors[0]), errors[0]
    assert "CUDA_DEVICE_MEMORY_LIMIT=" in errors[0] and repr(text)[1:-1].strip() in errors[0], (
        f"the line names the variable and the value: {errors[0]}"
    )


def test_the_error_line_suggests_the_fix_for_decimal_units(gs: Harness) -> None:
    res = gs.probe("init", limit="4GB")
    line = " ".join(res.log_lines("E"))
    assert "4G" in line and "4GiB" in line, f"suggest 4G or 4GiB: {line}"


def info_on_devices_0_and_1(gs: Harness, **env: object) -> Result:
    """cuMemGetInfo on device 0, then on device 1, of a fake with two devices."""
    return gs.probe("init", "ctx", 0, "info", "ctx", 1, "info", devices=2, **env)


def test_per_device_limits_apply_to_their_own_device(gs: Harness) -> None:
    res = info_on_devices_0_and_1(
        gs, extra={"CUDA_DEVICE_MEMORY_LIMIT_0": "32Mi", "CUDA_DEVICE_MEMORY_LIMIT_1": "48Mi"}
    )
    dev0, dev1 = res.of("info")
    assert (dev0.int("total"), dev1.int("total")) == (32 * MiB, 48 * MiB), res.describe()


def test_a_per_device_limit_overrides_the_all_devices_limit(gs: Harness) -> None:
    res = info_on_devices_0_and_1(gs, limit="64Mi", extra={"CUDA_DEVICE_MEMORY_LIMIT_1": "16Mi"})
    dev0, dev1 = res.of("info")
    assert (dev0.int("total"), dev1.int("total")) == (64 * MiB, 16 * MiB), res.describe()


def test_a_bad_per_device_limit_is_named_in_the_error(gs: Harness) -> None:
    res = gs.probe("init", devices=2, extra={"CUDA_DEVICE_MEMORY_LIMIT_1": "1.5G"})
    assert res.one("init").rc == CUDA_ERROR_INVALID_VALUE, res.describe()
    errors = res.log_lines("E")
    assert len(errors) == 1 and "CUDA_DEVICE_MEMORY_LIMIT_1=" in errors[0], res.describe()

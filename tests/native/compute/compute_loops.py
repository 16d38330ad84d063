"""The launch loop the compute tests time: after `init` and setup commands (default `ctx`), the
probe's `launch BLOCKS COUNT` on the fake GPU, where a kernel of N blocks keeps the device busy N
microseconds; returns the loop's wall milliseconds. A loop that does not finish fails the test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import Harness


def launch_loop_ms(
    gs: Harness,
    *setup: object,
    blocks: int = 1000,
    count: int = 300,
    sm: str | None = None,
    region: Path | None = None,
    via: str | None = None,
    binary: str = "probe",
    extra: dict[str, str] | None = None,
    timeout: float = 30,
) -> float:
    env = {**({"CUDA_DEVICE_SM_LIMIT": sm} if sm else {}), **(extra or {})}
    try:
        cmds = ["init", *(setup or ["ctx"]), "launch", blocks, count]
        res = gs.probe(*cmds, via=via, binary=binary, limit="512MiB", extra=env, region=region,
                       timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launch loop did not finish within {timeout} s (a launch held for ever?)")
    line = res.of("launch")[-1]
    assert line.rc == 0, f"launch loop failed: {res.describe()}"
    return float(line.kv["ms"])

"""Every process of a container shares one cap whatever its uid: a region created by root is used
by a later non-root process (and counts its bytes), and a process that cannot open the region
fails closed at cuInit with one log line, never running with a private full cap. Runs the
non-root process as uid/gid 65534 (needs root, as CI containers and this machine have)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import (
    CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_SUCCESS,
    Harness,
    MiB,
    Result,
    dir_for_every_uid,
    read_line,
)

NOBODY = 65534
CUDA_ERROR_OPERATING_SYSTEM = 304

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")


@pytest.fixture
def shared(gs: Harness) -> Iterator[Path]:
    """A directory every uid can reach (pytest's tmp_path is root-only), holding the region, the
    fake driver's state (writable by all, as the GPU is) and a copy of the probe."""
    with dir_for_every_uid(gs, "gpuslice-uids-", 0o777) as path:
        yield path


def _env(gs: Harness, shared: Path) -> dict[str, str]:
    env = gs.env(limit="64Mi", region=shared / "gpuslice.region")
    env["FAKE_CUDA_STATE"] = str(shared / "fake.state")
    return env


def _as_nobody(gs: Harness, shared: Path, *cmds: object) -> Result:
    argv = [str(shared / "probe"), *map(str, cmds)]
    proc = subprocess.run(argv, env=_env(gs, shared), capture_output=True, text=True, timeout=30,
                          user=NOBODY, group=NOBODY, extra_groups=[], cwd=shared)
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


def test_a_region_created_by_root_is_shared_by_a_later_non_root_process(
        gs: Harness, shared: Path) -> None:
    env = _env(gs, shared)
    root = gs.spawn("init", "ctx", "alloc", 48 * MiB, "hold", region=shared / "gpuslice.region",
                    limit="64Mi", extra={"FAKE_CUDA_STATE": env["FAKE_CUDA_STATE"]})
    try:
        assert read_line(root, "alloc").rc == CUDA_SUCCESS, root.stderr
        res = _as_nobody(gs, shared, "init", "ctx", "alloc", 32 * MiB, "alloc", 16 * MiB)
        assert res.one("init").rc == CUDA_SUCCESS, (
            f"uid 65534 opens root's region:\n{res.describe()}")
        over, fits = (a.rc for a in res.of("alloc"))
        assert over == CUDA_ERROR_OUT_OF_MEMORY, (
            f"48 MiB of root + 32 MiB of uid 65534 pass the one 64 MiB cap:\n{res.describe()}")
        assert fits == CUDA_SUCCESS, f"the remaining 16 MiB are there:\n{res.describe()}"
    finally:
        root.kill()
        root.wait()


def test_a_process_that_cannot_open_the_region_fails_closed(gs: Harness, shared: Path) -> None:
    made = gs.run([str(shared / "probe"), "init"], region=shared / "gpuslice.region", limit="64Mi")
    assert made.one("init").rc == CUDA_SUCCESS, made.describe()
    (shared / "gpuslice.region").chmod(0o644)  # e.g. made by an old version under umask 022
    res = _as_nobody(gs, shared, "init", "ctx", "alloc", 2 * MiB)
    assert res.one("init").rc == CUDA_ERROR_OPERATING_SYSTEM, (
        f"no private cap: CUDA is refused:\n{res.describe()}")
    assert res.one("alloc").rc != CUDA_SUCCESS, res.describe()
    errors = res.log_lines("E")
    assert len(errors) == 1 and "Permission denied" in errors[0], (
        f"one line says why and what to do:\n{res.describe()}")

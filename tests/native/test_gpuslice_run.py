"""`gpuslice run` end to end on the fake driver: it preloads the library with the given limit and a
region, passes the command's exit status through, rejects bad sizes with one line (exit 1);
`gpuslice top --once --json` shows a running command's usage against the limit; `gpuslice shim
--path` names the library."""

from __future__ import annotations

import json

from harness import CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS, Harness, MiB, Result, read_line


def run_probe(gs: Harness, *probe_args: object, region: str | None = None) -> Result:
    """`gpuslice run --gpu-memory 64Mi [--region REGION] -- probe PROBE_ARGS...`."""
    where = ["--region", region] if region else []
    return gs.gpuslice("run", "--gpu-memory", "64Mi", *where, "--", gs.bins["probe"], *probe_args)


def test_run_enforces_the_gpu_memory_limit_on_the_command(gs: Harness) -> None:
    res = run_probe(gs, "init", "ctx", "info", "alloc", 64 * MiB, "alloc", 1)
    assert res.returncode == 0, res.describe()
    assert res.one("info").int("total") == 64 * MiB, res.describe()
    assert [a.rc for a in res.of("alloc")] == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY], (
        res.describe()
    )


def test_run_returns_the_commands_exit_status(gs: Harness) -> None:
    res = gs.gpuslice("run", "--gpu-memory", "1Gi", "--", "sh", "-c", "exit 7")
    assert res.returncode == 7, res.describe()


def test_run_rejects_a_bad_size_with_one_line(gs: Harness) -> None:
    res = gs.gpuslice("run", "--gpu-memory", "4GB", "--", "true")
    assert res.returncode == 1, res.describe()
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuslice: error:") and "4GB" in lines[0], (
        res.describe()
    )


def test_two_runs_given_one_region_share_one_cap(gs: Harness) -> None:
    region = str(gs.tmp / "shared.region")
    first = run_probe(gs, "init", "ctx", "alloc", 1, "info", region=region)
    assert first.one("info").int("total") == 64 * MiB, first.describe()
    holder = gs.spawn(
        "init", "ctx", "alloc", 40 * MiB, "hold", limit="64Mi", region=gs.tmp / "shared.region"
    )
    try:
        assert read_line(holder, "alloc").rc == CUDA_SUCCESS
        second = run_probe(gs, "init", "ctx", "alloc", 32 * MiB, region=region)
        assert second.one("alloc").rc == CUDA_ERROR_OUT_OF_MEMORY, (
            f"40 MiB held by another process of the region:\n{second.describe()}"
        )
        top = gs.gpuslice("top", "--once", "--json", "--region", region)
        assert top.returncode == 0, top.describe()
        snap = json.loads(top.stdout)
        dev = snap["devices"][0]
        assert (dev["limit"], dev["used"]) == (64 * MiB, 40 * MiB), snap
        pids = {p["pid"]: p for p in snap["processes"] if p["alive"]}
        assert holder.pid in pids and pids[holder.pid]["used"] == {"0": 40 * MiB}, snap
    finally:
        holder.kill()
        holder.wait()


def test_shim_path_names_the_built_library(gs: Harness) -> None:
    res = gs.gpuslice("shim", "--path")
    assert res.returncode == 0, res.describe()
    assert res.stdout.strip().endswith("libgpuslice.so"), res.describe()

"""`gpuslice simulate`: load the cluster and trace, replay once per policy, print the report.

Owns: the command's flow, default policies (binpack, spread), the progress bar (stderr, only on
a terminal), and where output goes (stdout: table or JSON lines).
Does not: parse flags (cli.py) or compute/format numbers (engine.py, metrics.py, report.py).
Failure: bad files or policy names raise GpusliceError subclasses, which cli.py prints as one
`gpuslice: error: ...` line with exit code 1.
Tests: tests/unit/test_cli_simulate.py, tests/unit/simulate/test_report_render.py (golden)
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpuslice.allocator import Policy, parse_policy
from gpuslice.simulate.cluster import load_cluster
from gpuslice.simulate.engine import Replay, replay
from gpuslice.simulate.jobs import check_jobs_path, write_jobs
from gpuslice.simulate.modes import apply_mode
from gpuslice.simulate.report import json_lines, render_table
from gpuslice.simulate.trace import load_trace

__all__ = ["DEFAULT_POLICIES", "run"]

DEFAULT_POLICIES = ("binpack", "spread")


def _policies(names: tuple[str, ...]) -> list[Policy]:
    """Parse each name once; names that mean the same policy are run once."""
    out: dict[str, Policy] = {}
    for name in names or DEFAULT_POLICIES:
        policy = parse_policy(name)
        out.setdefault(policy.name, policy)
    return list(out.values())


def run(*, cluster_file: str, trace_file: str, policies: tuple[str, ...], as_json: bool,
        progress: bool, jobs_file: str | None = None, gpu_mode: str = "as-is") -> None:
    """Replay `trace_file` on `cluster_file` under each policy and print the comparison;
    with `jobs_file`, also write each job's outcome there (simulate/jobs.py). `gpu_mode`
    (simulate/modes.py): as-is, shim, mig, or both (each policy in shim, then in mig)."""
    chosen = _policies(policies)
    if jobs_file is not None:
        check_jobs_path(jobs_file)
    loaded_nodes = load_cluster(cluster_file)
    loaded_jobs = load_trace(trace_file)
    modes = ("shim", "mig") if gpu_mode == "both" else (gpu_mode,)
    runs = [(policy, mode, *apply_mode(loaded_nodes, loaded_jobs, mode))
            for mode in modes for policy in chosen]
    nodes, jobs = loaded_nodes, loaded_jobs
    err = Console(stderr=True)
    show = progress and err.is_terminal
    replays: list[Replay] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("events"), TimeElapsedColumn(), console=err, transient=True,
                  disable=not show) as bar:
        for policy, mode, mode_nodes, mode_jobs in runs:
            label = policy.name if len(modes) == 1 else f"{policy.name} {mode}"
            task = bar.add_task(f"simulating {label}", total=2 * len(jobs))
            result = replay(mode_nodes, mode_jobs, policy,
                            on_progress=lambda n, task=task: bar.update(task, completed=n))
            bar.update(task, completed=2 * len(jobs))
            if len(modes) > 1:
                result.policy = result.metrics.policy = label
            replays.append(result)
    if jobs_file is not None:
        write_jobs(jobs_file, jobs, replays)
    results = [r.metrics for r in replays]
    if as_json:
        sys.stdout.write(json_lines(results))
        sys.stdout.flush()
        return
    title = (f"{Path(cluster_file).name}: {len(nodes)} nodes; {Path(trace_file).name}: "
             f"{len(jobs):,} jobs")
    render_table(results, Console(), title=title)

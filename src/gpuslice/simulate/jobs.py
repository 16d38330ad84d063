"""`gpuslice simulate --jobs FILE`: what happened to each job, one row per job and policy.

Owns: the jobs file (CSV or JSON lines, chosen by the file's extension), its columns and the
check that FILE can be written, done before any replay so a typo costs no simulation time.
Does not: replay (engine.py) or summarise (metrics.py).
Columns: policy, line (of the trace file), pod, arrival, duration, start, wait, node, gpus (NVML
indices on that node), reason (why it was never placed; empty when placed). Times in seconds.
Failure: GpusliceError naming FILE and the fix (unknown extension, missing directory, unwritable).
Tests: tests/unit/simulate/test_jobs_file.py, tests/unit/test_cli_simulate.py
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from gpuslice.errors import GpusliceError
from gpuslice.simulate.engine import Outcome, Replay
from gpuslice.simulate.trace import Job

__all__ = ["COLUMNS", "check_jobs_path", "rows", "write_jobs"]

COLUMNS = ("policy", "line", "pod", "arrival", "duration", "start", "wait", "node", "gpus",
           "reason")
_FORMATS = {".csv": "csv", ".jsonl": "jsonl"}


def check_jobs_path(path: str) -> str:
    """The format for `path` ("csv" or "jsonl"); GpusliceError if it cannot be written there."""
    p = Path(path)
    fmt = _FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise GpusliceError(f"--jobs {path}: unknown format {p.suffix or '(no extension)'!r}; "
                            "name the file .csv or .jsonl")
    if not p.parent.is_dir():
        raise GpusliceError(f"--jobs {path}: directory {p.parent} does not exist; create it first")
    if p.is_dir():
        raise GpusliceError(f"--jobs {path}: is a directory; give a file name")
    return fmt


def _row(policy: str, job: Job, o: Outcome) -> dict[str, Any]:
    placed = o.start is not None
    return {"policy": policy, "line": job.line, "pod": job.pod.key, "arrival": job.arrival,
            "duration": job.duration, "start": round(o.start, 3) if o.start is not None else None,
            "wait": round(o.start - job.arrival, 3) if o.start is not None else None,
            "node": o.node, "gpus": list(o.gpus) if placed else None, "reason": o.reason}


def rows(jobs: Sequence[Job], replays: Sequence[Replay]) -> list[dict[str, Any]]:
    """One dict per job and policy, policies in the order given, jobs in trace order."""
    return [_row(r.policy, jobs[o.index], o) for r in replays for o in r.outcomes]


def write_jobs(path: str, jobs: Sequence[Job], replays: Sequence[Replay]) -> None:
    """Write the jobs file in the format its extension names (check_jobs_path first)."""
    fmt = check_jobs_path(path)
    table = rows(jobs, replays)
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            if fmt == "jsonl":
                f.writelines(msgspec.json.encode(r).decode() + "\n" for r in table)
                return
            out = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
            out.writeheader()
            for r in table:  # CSV: None is an empty cell, GPU indices are joined by spaces
                gpus = r["gpus"]
                out.writerow({**r, "gpus": " ".join(map(str, gpus)) if gpus else ""})
    except OSError as exc:
        raise GpusliceError(f"--jobs {path}: cannot write: {exc.strerror}; check the path and "
                            "permissions") from None

"""Trace file -> jobs: when each pod arrives, how long it runs, and what it asks for.

Owns: the trace format (JSON lines `{"arrival": s, "duration": s, "pod": {...}}`; a `.yaml`/`.yml`
file holds a list of the same objects) and turning each pod into a PodRequest via dialects.
Does not: decide what a pod means (gpuslice.dialects does), place or replay (engine.py).
Invariants: jobs keep file order (Job.index); times are 0..MAX_SECONDS; every job asks for a GPU;
a pod without metadata gets namespace `default` and name `job-<line>`.
Failure: bad JSON/YAML, missing or unknown keys, negative times, a pod the dialect parser rejects
-> errors.InputFileError `trace.jsonl:17: ...` (line number, pod key, the fix; one line per
problem of the pod). YAML reading is bounded (simulate/_yaml.py). Never a traceback.
Tests: tests/unit/simulate/test_trace_file.py
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from gpuslice import dialects
from gpuslice.errors import InputFileError, RequestError
from gpuslice.model import PodRequest
from gpuslice.simulate._validate import explain
from gpuslice.simulate._yaml import load_yaml

__all__ = ["MAX_SECONDS", "Job", "JobLine", "load_trace", "parse_job"]


class JobLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One line of a trace file, as written."""

    arrival: float
    duration: float
    pod: dict[str, Any]


class Job(msgspec.Struct, frozen=True, kw_only=True):
    """One job of the trace, validated: index is its position in the file (0-based)."""

    index: int
    line: int
    arrival: float
    duration: float
    pod: PodRequest


MAX_SECONDS = 1e10
"""Latest arrival and longest duration: keeps every sum of times finite and exact to ~1 ms."""
_DECODER = msgspec.json.Decoder(JobLine)
_HINT = 'each line must be {"arrival": <seconds>, "duration": <seconds>, "pod": {<Pod>}}'


def _named(pod: dict[str, Any], line: int) -> dict[str, Any]:
    """The pod with namespace/name filled in where the trace leaves them out."""
    meta = pod.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        return pod  # let the dialect parser report the malformed metadata
    if meta.get("name") and meta.get("namespace"):
        return pod
    filled = {"namespace": "default", "name": f"job-{line}", **{
        k: v for k, v in meta.items() if v is not None}}
    return {**pod, "metadata": filled}


def parse_job(raw: JobLine, *, index: int, line: int, where: str,
              defaults: dialects.Defaults) -> Job:
    """Validate one decoded job line; `where` is `file:line` for messages."""
    for field in ("arrival", "duration"):
        value = getattr(raw, field)
        if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
            raise InputFileError(f"{where}: {field}={value}: must be 0 to {MAX_SECONDS:.0e} "
                                 "seconds (about 300 years); times are seconds, not milliseconds")
    pod = _named(raw.pod, line)
    meta = pod.get("metadata")
    key = (f"{meta.get('namespace')}/{meta.get('name')}" if isinstance(meta, Mapping)
           else f"<job {line}>")
    try:
        request = dialects.parse_pod(pod, defaults)
    except RequestError as exc:  # every problem of the pod, one line each
        raise InputFileError("\n".join(f"{where}: pod {key}: {p}" for p in exc.problems)) from None
    if not request.slices:
        raise InputFileError(f"{where}: pod {key}: asks for no GPU; every trace job must ask for "
                             "one (nvidia.com/gpu, volcano.sh/vgpu-number, tencent.com/vcuda-core)")
    return Job(index=index, line=line, arrival=raw.arrival, duration=raw.duration, pod=request)


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read the trace file: {exc}; "
                             "check the --trace path") from None


def _jsonl(file: str, text: str, defaults: dialects.Defaults) -> list[Job]:
    jobs: list[Job] = []
    for n, raw_line in enumerate(text.splitlines(), start=1):
        if not raw_line.strip():
            continue
        where = f"{file}:{n}"
        try:
            raw = _DECODER.decode(raw_line)
        except msgspec.ValidationError as exc:
            path, what = explain(exc)
            raise InputFileError(f"{where}: {path + ': ' if path else ''}{what}; {_HINT}") from None
        except msgspec.DecodeError as exc:
            raise InputFileError(f"{where}: not valid JSON ({exc}); {_HINT}, "
                                 "one job per line") from None
        jobs.append(parse_job(raw, index=len(jobs), line=n, where=where, defaults=defaults))
    return jobs


def _yaml(file: str, text: str, defaults: dialects.Defaults) -> list[Job]:
    data = load_yaml(text, file=file, fix="fix the syntax")
    if isinstance(data, Mapping) and set(data) == {"jobs"}:
        data = data["jobs"]
    if not isinstance(data, list):
        raise InputFileError(f"{file}: expected a list of jobs (or `jobs: [...]`); {_HINT}")
    jobs = []
    for i, item in enumerate(data):
        where = f"{file}: jobs[{i}]"
        try:
            raw = msgspec.convert(item, JobLine)
        except msgspec.ValidationError as exc:
            path, what = explain(exc)
            raise InputFileError(f"{where}: {path + ': ' if path else ''}{what}; {_HINT}") from None
        jobs.append(parse_job(raw, index=i, line=i + 1, where=where, defaults=defaults))
    return jobs


def load_trace(path: str | Path, defaults: dialects.Defaults | None = None) -> list[Job]:
    """Read and validate a whole trace; raise InputFileError on the first bad job."""
    file = str(path)
    text = _read(path)
    defaults = defaults if defaults is not None else dialects.Defaults()
    is_yaml = file.endswith((".yaml", ".yml"))
    jobs = _yaml(file, text, defaults) if is_yaml else _jsonl(file, text, defaults)
    if not jobs:
        raise InputFileError(f"{file}: the trace holds no jobs; {_HINT}")
    return jobs

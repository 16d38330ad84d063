"""The trace file: jobs in, every bad line reported with its line number; the bundled trace."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from gpuslice.errors import InputFileError
from gpuslice.model import ContainerKind
from gpuslice.simulate.trace import load_trace

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "examples" / "trace.jsonl"


def _pod(limits: dict[str, str], **meta: str) -> dict[str, Any]:
    out: dict[str, Any] = {"spec": {"containers": [{"name": "main",
                                                    "resources": {"limits": limits}}]}}
    if meta:
        out["metadata"] = meta
    return out


def _line(arrival: Any = 0, duration: Any = 10, pod: Any = None, **extra: Any) -> str:
    row = {"arrival": arrival, "duration": duration,
           "pod": pod if pod is not None else _pod({"nvidia.com/gpu": "1"}), **extra}
    return json.dumps(row)


def _write(tmp_path: Path, *lines: str, name: str = "t.jsonl") -> Path:
    f = tmp_path / name
    f.write_text("\n".join(lines) + "\n")
    return f


def test_jobs_keep_file_order_times_and_their_dialect_request(tmp_path: Path) -> None:
    f = _write(tmp_path, _line(5, 60, _pod({"volcano.sh/vgpu-number": "2",
                                            "volcano.sh/vgpu-memory": "4096"})),
               _line(1.5, 0.5))
    jobs = load_trace(f)
    assert [(j.index, j.line, j.arrival, j.duration) for j in jobs] == [
        (0, 1, 5.0, 60.0), (1, 2, 1.5, 0.5)], "file order is kept; the engine sorts by time"
    s = jobs[0].pod.slices[0]
    assert (s.count, s.memory_mib) == (2, 4096), "the dialect parser read the Volcano request"


def test_a_pod_without_metadata_is_named_after_its_line_in_the_default_namespace(
        tmp_path: Path) -> None:
    f = _write(tmp_path, "", _line(), _line(pod=_pod({"nvidia.com/gpu": "1"}, name="x")))
    jobs = load_trace(f)
    assert [j.pod.key for j in jobs] == ["default/job-2", "default/x"], (
        "blank lines are skipped but still counted, so names match line numbers")


def test_a_yaml_trace_holds_the_same_jobs_as_a_list(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("jobs:\n- {arrival: 1, duration: 2, pod: {spec: {containers: [{name: main, "
                 "resources: {limits: {nvidia.com/gpu: '1'}}}]}}}\n")
    (job,) = load_trace(f)
    assert (job.arrival, job.duration, job.pod.key) == (1.0, 2.0, "default/job-1")


BAD = [
    ("broken JSON", "{\"arrival\": 1,", "t.jsonl:2: not valid JSON", "one job per line"),
    ("a missing duration", json.dumps({"arrival": 1, "pod": {}}),
     "t.jsonl:2: duration: missing (required)", '"duration": <seconds>'),
    ("an unknown key", _line(priority=3), "t.jsonl:2: priority: unknown key", '"arrival"'),
    ("a time given as text", _line(arrival="10s"), "t.jsonl:2: arrival: expected float, got str",
     "<seconds>"),
    ("a negative arrival", _line(arrival=-1), "t.jsonl:2: arrival=-1.0: must be 0 to 1e+10",
     "seconds"),
    ("a negative duration", _line(duration=-0.5),
     "t.jsonl:2: duration=-0.5: must be 0 to 1e+10 seconds", "not milliseconds"),
    ("an arrival near the largest float", _line(arrival=1e308),
     "t.jsonl:2: arrival=1e+308: must be 0 to 1e+10 seconds", "not milliseconds"),
    ("a duration that would overflow the clock", _line(duration=1.7e308),
     "t.jsonl:2: duration=1.7e+308: must be 0 to 1e+10 seconds", "not milliseconds"),
    ("a quantity string of 5,000 digits", _line(pod=_pod({"nvidia.com/gpu": "1" * 5000})),
     't.jsonl:2: pod default/job-2: container "main": nvidia.com/gpu=111', "a whole number"),
    ("an exponent of 5,000 digits", _line(pod=_pod({"nvidia.com/gpu": "1e" + "9" * 5000})),
     't.jsonl:2: pod default/job-2: container "main": nvidia.com/gpu=1e99', "a whole number"),
    ("an integer of 5,000 digits",
     _line(pod=_pod({"nvidia.com/gpu": 123456789})).replace("123456789", "1" * 5000),
     "t.jsonl:2: pod: integer value out of range (in a value nested inside it)", "<seconds>"),
    ("an infinite time", '{"arrival": 1e999, "duration": 1, "pod": {}}',
     "t.jsonl:2: arrival: number out of range", "<seconds>"),
    ("a job that is not an object", "[1, 2]", "t.jsonl:2: expected object, got array",
     '"pod": {<Pod>}'),
    ("a pod the dialect parser rejects",
     _line(pod=_pod({"nvidia.com/gpucores": "150", "nvidia.com/gpu": "1"})),
     't.jsonl:2: pod default/job-2: container "main": nvidia.com/gpucores=150: above 100',
     "raise nvidia.com/gpu"),
    ("a pod without a spec", _line(pod={"metadata": {"name": "p", "namespace": "ns"}}),
     "t.jsonl:2: pod ns/p: pod: spec=null", "give the pod a spec"),
    ("a pod that asks for no GPU", _line(pod=_pod({"cpu": "1"})),
     "t.jsonl:2: pod default/job-2: asks for no GPU", "nvidia.com/gpu"),
]


@pytest.mark.parametrize(("line", "where", "fix"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_trace_line_names_the_file_line_and_fix(tmp_path: Path, line: str, where: str,
                                                      fix: str) -> None:
    f = _write(tmp_path, _line(), line)
    with pytest.raises(InputFileError) as err:
        load_trace(f)
    text = str(err.value).replace(str(tmp_path) + "/", "")
    assert text.startswith(where), f"file:line and the entry come first: {text}"
    assert fix in text, f"the message should say how to fix it: {text}"


def test_every_problem_of_one_pod_is_its_own_line(tmp_path: Path) -> None:
    pod = _pod({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150", "nvidia.com/gpumem": "20Gi"})
    with pytest.raises(InputFileError) as err:
        load_trace(_write(tmp_path, _line(), _line(pod=pod)))
    lines = str(err.value).replace(str(tmp_path) + "/", "").splitlines()
    assert len(lines) == 2, lines
    assert all(line.startswith('t.jsonl:2: pod default/job-2: container "main": nvidia.com/')
               for line in lines), lines


def _script(name: str, path: Path) -> Any:
    """A script of the repository (not a package) loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(10)
def test_a_yaml_alias_bomb_fails_fast_with_one_line(tmp_path: Path) -> None:
    f = tmp_path / "bomb.yaml"  # 9**10 = 3.5 billion values from 1 kB
    f.write_text(_script("input_limits", ROOT / "benchmarks" / "input_limits.py").bomb(10))
    with pytest.raises(InputFileError, match=r"bomb.yaml: aliases \(\*name\) expand \d+ written "
                                             r"values into more than 1,000,\d+; write the values"):
        load_trace(f)


def test_a_few_yaml_aliases_are_fine(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("- &job {arrival: 0, duration: 5, pod: {spec: {containers: [{name: main, "
                 "resources: {limits: {nvidia.com/gpu: 1}}}]}}}\n- *job\n")
    assert [j.duration for j in load_trace(f)] == [5.0, 5.0]


@pytest.mark.parametrize(("text", "says"), [
    ("- {arrival: 0, duration: 1, pod: {x: " + "1" * 5000 + "}}\n",
     "t.yaml: a number is too long to read"),
    ("- " + "[" * 1500 + "]" * 1500 + "\n", "t.yaml: nested too deeply to read"),
], ids=["a 5,000-digit integer", "lists nested 1,500 deep"])
def test_yaml_that_python_cannot_read_fails_in_one_line(tmp_path: Path, text: str,
                                                        says: str) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(text)
    with pytest.raises(InputFileError) as err:
        load_trace(f)
    assert str(err.value).replace(str(tmp_path) + "/", "").startswith(says)


def test_an_empty_trace_is_an_error_not_an_empty_report(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="holds no jobs"):
        load_trace(_write(tmp_path, "", ""))


def test_a_missing_trace_file_says_to_check_the_path(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"cannot read the trace file.*--trace"):
        load_trace(tmp_path / "nope.jsonl")


def test_a_yaml_trace_that_is_not_a_list_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "t.yml"
    f.write_text("arrival: 1\n")
    with pytest.raises(InputFileError, match="expected a list of jobs"):
        load_trace(f)


# --- the bundled trace -------------------------------------------------------------------------

def _generator() -> Any:
    return _script("make_trace", ROOT / "examples" / "make_trace.py")


def test_the_bundled_trace_is_what_the_seeded_generator_writes() -> None:
    gen = _generator()
    text = gen.dumps(gen.generate(seed=7))
    assert text == TRACE.read_text(), (
        "examples/trace.jsonl must be reproducible: python examples/make_trace.py --seed 7")


def test_the_bundled_trace_mixes_every_dialect_and_stays_small() -> None:
    raw = TRACE.read_text()
    assert TRACE.stat().st_size < 3_000_000, "the brief caps the example at ~3 MB"
    for needle in ("nvidia.com/gpumem-percentage", '"nvidia.com/gpucores":"100"',
                   "nvidia.com/priority", "nvidia.com/use-gputype", "nvidia.com/nouse-gputype",
                   "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid", "initContainers",
                   '"restartPolicy":"Always"', "volcano.sh/vgpu-memory",
                   "tencent.com/vcuda-core", "tencent.com/vcuda-memory"):
        assert needle in raw, f"the example trace should exercise {needle}"
    jobs = load_trace(TRACE)
    assert len(jobs) == 5000
    kinds = {s.kind for j in jobs for s in j.pod.slices}
    assert kinds == set(ContainerKind), "init, sidecar and app containers all appear"
    assert any(s.count >= 4 for j in jobs for s in j.pod.slices), "multi-GPU jobs appear"
    assert any(s.memory_percent is not None and s.memory_percent < 100
               for j in jobs for s in j.pod.slices), "percent memory requests appear"

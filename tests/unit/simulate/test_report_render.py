"""Report output: golden files for the small example, and the table's formatting rules.

Regenerate the golden files after a deliberate change with
    GPUSLICE_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/simulate/test_report_render.py
and review the diff: every number in them must be explainable.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from rich.console import Console

from gpuslice.cli import main
from gpuslice.simulate.metrics import Metrics
from gpuslice.simulate.report import json_lines, render_table

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
GOLDEN = ROOT / "tests" / "golden"
SMALL = ["simulate", "--cluster", str(DATA / "small_cluster.yaml"),
         "--trace", str(DATA / "small_trace.jsonl")]
PLAIN = {"FORCE_COLOR": None, "TTY_COMPATIBLE": None, "COLUMNS": None, "NO_COLOR": None}


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GPUSLICE_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), (
        f"output differs from {path}; if the change is intended, regenerate (see module doc)")


@pytest.mark.parametrize(("name", "extra"), [("simulate_small.txt", []),
                                             ("simulate_small.json", ["--json"])],
                         ids=["table", "json lines"])
def test_the_small_example_matches_its_golden_file(name: str, extra: list[str]) -> None:
    result = CliRunner().invoke(main, [*SMALL, *extra], env=PLAIN)
    assert result.exit_code == 0, result.output
    _golden(name, result.stdout)


def _metrics(policy: str, **kw: object) -> Metrics:
    base = {"policy": policy, "jobs": 10, "placed": 9, "unplaced": 1, "allocation_rate": 0.9,
            "mean_memory_utilization": 0.5, "peak_memory_utilization": 0.75,
            "mean_core_utilization": 0.25, "peak_core_utilization": 0.5, "fragmentation": 0.1,
            "wait_mean": 30.0, "wait_p50": 0.0, "wait_p95": 90.0, "wait_max": 7200.0,
            "jobs_waited": 2, "max_queue": 1, "makespan": 600.0,
            "unplaced_reasons": {"insufficient GPU memory": 1}, "gpus": 4,
            "memory_mib": 4000, "median_request_mib": 500}
    return msgspec.convert({**base, **kw}, Metrics)


def _render(*results: Metrics) -> str:
    out = io.StringIO()
    render_table(list(results), Console(file=out, width=120, force_terminal=True,
                                        color_system="standard"))
    return out.getvalue()


def test_the_best_value_of_a_row_is_bold_only_when_policies_differ() -> None:
    text = _render(_metrics("a/a", fragmentation=0.2), _metrics("b/b", fragmentation=0.1))
    assert "\x1b[1m10.0%" in text, "lower fragmentation is better: b/b's 10.0% is bold"
    assert "\x1b[1m20.0%" not in text
    assert "\x1b[1m90.0%" not in text, "equal allocation rates: nothing to point at"


def test_a_single_policy_table_marks_nothing_bold() -> None:
    assert "\x1b[1m50.0%" not in _render(_metrics("a/a"))


def test_times_print_in_readable_units_and_undefined_waits_as_a_dash() -> None:
    text = _render(_metrics("a/a", wait_p50=None))
    assert "1.5 min" in text and "2.0 h" in text and "10.0 min" in text, text
    p50 = next(x for x in text.splitlines() if "wait, p50" in x)
    assert p50.split()[-1] == "-", f"no placed job means no p50, not 0: {p50!r}"


def test_every_rejection_reason_under_any_policy_gets_its_own_row() -> None:
    text = _render(_metrics("a/a", unplaced_reasons={"too few GPUs on node": 1}),
                   _metrics("b/b"))
    line = next(x for x in text.splitlines() if "too few GPUs on node" in x)
    assert line.split()[-2:] == ["1", "0"], "b/b has no such rejection: 0, not blank"


def test_json_lines_hold_one_object_per_policy_in_order() -> None:
    text = json_lines([_metrics("a/a"), _metrics("b/b")])
    rows = [msgspec.json.decode(x) for x in text.splitlines()]
    assert [r["policy"] for r in rows] == ["a/a", "b/b"]
    assert rows[0]["wait_p95"] == 90.0 and rows[0]["unplaced_reasons"] == {
        "insufficient GPU memory": 1}

"""`gpuslice simulate` end to end through click: the bundled example, options and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpuslice.cli import main

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.yaml")
TRACE = str(ROOT / "examples" / "trace.jsonl")
DATA = ROOT / "tests" / "unit" / "simulate" / "data"
SMALL = ["--cluster", str(DATA / "small_cluster.yaml"), "--trace", str(DATA / "small_trace.jsonl")]
# output must not depend on the caller's terminal settings
PLAIN = {"FORCE_COLOR": None, "TTY_COMPATIBLE": None, "COLUMNS": None, "NO_COLOR": None}


def simulate(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, ["simulate", *args], env={**PLAIN, **(env or {})})


@pytest.fixture(scope="module")
def bundled() -> Result:
    return simulate("--cluster", CLUSTER, "--trace", TRACE, "--json")


def test_the_bundled_example_prints_one_json_object_per_default_policy(bundled: Result) -> None:
    assert bundled.exit_code == 0, bundled.output
    rows = [json.loads(line) for line in bundled.stdout.splitlines()]
    assert [r["policy"] for r in rows] == ["binpack/binpack", "spread/spread"], (
        "binpack and spread are compared when no --policy is given")
    for r in rows:
        for key in ("policy", "placed", "unplaced", "allocation_rate", "mean_memory_utilization",
                    "peak_memory_utilization", "mean_core_utilization", "fragmentation",
                    "wait_p50", "wait_p95", "wait_max", "makespan", "unplaced_reasons"):
            assert key in r, f"{key} is part of the JSON contract"
        assert r["placed"] + r["unplaced"] == 5000, "every job is either placed or never placed"
        assert 0 < r["unplaced"] < 20, "the example holds a few jobs no GPU can take"


def test_the_bundled_example_is_busy_enough_for_the_policies_to_differ(bundled: Result) -> None:
    a, b = (json.loads(line) for line in bundled.stdout.splitlines())
    assert a["jobs_waited"] > 100 and b["jobs_waited"] > 100, "the cluster is contended"
    assert a["mean_memory_utilization"] != b["mean_memory_utilization"]
    assert a["wait_p95"] != b["wait_p95"]


def test_one_policy_prints_a_table_with_one_column() -> None:
    result = simulate(*SMALL, "--policy", "spread/binpack")
    assert result.exit_code == 0, result.output
    assert "spread/binpack" in result.stdout and "binpack/binpack" not in result.stdout
    assert "allocation rate" in result.stdout and "fragmentation" in result.stdout


def test_several_policies_print_side_by_side_columns_in_the_order_given() -> None:
    result = simulate(*SMALL, "--policy", "topology", "--policy", "spread")
    header = next(line for line in result.stdout.splitlines() if "metric" in line)
    assert header.index("binpack/topology") < header.index("spread/spread"), header


def test_two_runs_print_the_same_bytes() -> None:
    a, b = simulate(*SMALL), simulate(*SMALL)
    assert a.exit_code == 0 and a.stdout == b.stdout, "replays are deterministic"


def test_a_policy_named_twice_runs_once() -> None:
    result = simulate(*SMALL, "--json", "--policy", "binpack", "--policy", "binpack/binpack")
    assert [json.loads(x)["policy"] for x in result.stdout.splitlines()] == ["binpack/binpack"]


def test_an_unknown_policy_is_one_error_line_listing_the_valid_names() -> None:
    result = simulate(*SMALL, "--policy", "fastest")
    assert result.exit_code == 1
    assert result.stderr.startswith("gpuslice: error: "), result.stderr
    assert "fastest" in result.stderr and "binpack" in result.stderr and "spread" in result.stderr


def test_a_bad_cluster_file_is_one_error_line_naming_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("version: 1\nnodeGroups:\n- {name: a, count: 1, gpu: {model: m, count: 1, "
                   "memoryMiB: -5}}\n")
    result = simulate("--cluster", str(bad), "--trace", TRACE)
    assert result.exit_code == 1
    assert result.stderr.strip().endswith(
        "nodeGroups[0].gpu.memoryMiB: expected int >= 1; give each GPU's memory in MiB as a "
        "whole number, e.g. 81559 for an H100 80GB"), result.stderr
    assert "Traceback" not in result.output


def test_a_bad_trace_line_is_one_error_line_naming_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text((DATA / "small_trace.jsonl").read_text() + '{"arrival": -3}\n')
    result = simulate("--cluster", CLUSTER, "--trace", str(bad))
    assert result.exit_code == 1
    assert "t.jsonl:15: duration: missing (required)" in result.stderr, result.stderr


def test_progress_is_hidden_when_stderr_is_not_a_terminal() -> None:
    result = simulate(*SMALL)
    assert result.exit_code == 0
    assert result.stderr == "", "a pipe or file gets no progress bar"


def test_progress_shows_on_a_terminal_unless_no_progress_is_given() -> None:
    tty = {"TTY_COMPATIBLE": "1"}
    shown = simulate(*SMALL, "--json", env=tty)
    assert "simulating binpack/binpack" in shown.stderr, shown.stderr
    hidden = simulate(*SMALL, "--json", "--no-progress", env=tty)
    assert hidden.stderr == "", hidden.stderr
    assert shown.stdout == hidden.stdout, "the bar never changes the results"

"""`gpuslice simulate --jobs FILE`: each job's node, GPUs, start, wait or reason, in CSV or JSON
lines by extension, consistent with the summary; a bad FILE fails before any replay."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gpuslice.cli import main
from gpuslice.simulate.jobs import COLUMNS

DATA = Path(__file__).resolve().parent / "data"
SMALL = ["--cluster", str(DATA / "small_cluster.yaml"), "--trace", str(DATA / "small_trace.jsonl")]


def simulate(*args: str) -> Result:
    return CliRunner().invoke(main, ["simulate", *SMALL, "--no-progress", *args])


def test_the_csv_names_each_jobs_node_gpus_start_wait_and_reason(tmp_path: Path) -> None:
    out = tmp_path / "jobs.csv"
    assert simulate("--policy", "binpack", "--jobs", str(out)).exit_code == 0
    assert "\r" not in out.read_text(), "plain lines, so grep and sort work on them"
    with out.open(newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == COLUMNS
        by_pod = {r["pod"]: r for r in reader}
    assert len(by_pod) == 14, "one row per job of the trace"
    train = by_pod["demo/train-4"]
    assert (train["node"], train["gpus"], train["start"], train["wait"], train["reason"]) == (
        "h100-000", "0 1 2 3", "0.0", "0.0", ""), "4 whole H100s at once"
    waited = by_pod["demo/h100-only"]
    assert (waited["arrival"], waited["start"], waited["wait"], waited["node"]) == (
        "60.0", "600.0", "540.0", "h100-000"), "it waits for train-4 (ends at 600 s)"
    never = by_pod["demo/too-big"]
    assert (never["start"], never["node"], never["gpus"], never["reason"]) == (
        "", "", "", "insufficient GPU memory")


def test_jsonl_rows_agree_with_the_summary_for_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "jobs.jsonl"
    result = simulate("--json", "--jobs", str(out))
    assert result.exit_code == 0, result.output
    summary = {m["policy"]: m for m in map(json.loads, result.stdout.splitlines())}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["policy"] for r in rows] == ["binpack/binpack"] * 14 + ["spread/spread"] * 14
    for policy, m in summary.items():
        mine = [r for r in rows if r["policy"] == policy]
        placed = [r for r in mine if r["start"] is not None]
        assert len(placed) == m["placed"]
        assert max(r["wait"] for r in placed) == m["wait_max"], "the longest wait is findable"
        reasons: dict[str, int] = {}
        for r in mine:
            if r["reason"] is not None:
                assert r["node"] is None and r["gpus"] is None
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
        assert reasons == m["unplaced_reasons"]
        assert all(r["gpus"] and r["wait"] == round(r["start"] - r["arrival"], 3)
                   for r in placed)


@pytest.mark.parametrize(("name", "says"), [
    ("jobs.txt", "--jobs {p}: unknown format '.txt'; name the file .csv or .jsonl"),
    ("no/such/dir/jobs.csv", "--jobs {p}: directory {d} does not exist; create it first"),
])
def test_a_jobs_file_that_cannot_be_written_fails_before_the_replay(tmp_path: Path, name: str,
                                                                    says: str) -> None:
    p = tmp_path / name
    result = CliRunner().invoke(main, ["simulate", "--cluster", "/nonexistent.yaml", "--trace",
                                       "t.jsonl", "--jobs", str(p)])
    assert result.exit_code == 1, "checked before the cluster file is even read"
    assert result.stderr.splitlines() == [
        "gpuslice: error: " + says.format(p=p, d=p.parent)]

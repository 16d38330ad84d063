"""GPUSLICE_COMPUTE_TRACE (native/src/compute/trace.h) against the fake driver: a limited launch
loop writes one line per launch, one per measured batch and one name per kernel key, on the
host's monotonic clock, and the held launches show their wait. Without the variable nothing is
written."""

from __future__ import annotations

import sys
from pathlib import Path

from compute_loops import launch_loop_ms


def _trace(gs, tmp_path, extra):
    region = gs.tmp / "trace.region"
    launch_loop_ms(gs, blocks=1000, count=100, sm="30", region=region, extra=extra)
    return sorted(tmp_path.glob("compute-trace.*.tsv"))


def test_a_limited_loop_traces_every_launch_and_batch(gs, tmp_path):
    files = _trace(gs, tmp_path, {"GPUSLICE_COMPUTE_TRACE": str(tmp_path)})
    assert len(files) == 1, files
    rows = [line.split("\t") for line in files[0].read_text().splitlines()]
    launches = [r for r in rows if r[0] == "L"]
    batches = [r for r in rows if r[0] == "B"]
    names = [r for r in rows if r[0] == "N"]
    assert len(launches) == 100, f"{len(launches)} launch lines for 100 launches"
    assert all(len(r) == 13 for r in launches) and all(len(r) == 10 for r in batches)
    assert len(names) == 1 and names[0][1] == launches[0][5], names
    enter, admit = ([int(r[i]) for r in launches] for i in (1, 2))
    assert all(a >= e > 0 for e, a in zip(enter, admit, strict=True))
    # 100 kernels of 1 ms at 30 %: the bucket's 15 ms go at once, the other 85 take ~283 ms
    held = sum(a - e for e, a in zip(enter, admit, strict=True)) / 1e6
    assert 200 <= held <= 340, f"launches held {held:.0f} ms in total"
    # past what it owed: 0 for a launch that went at once; a held one's wake-up quantum
    # (meter.c) and sleep overshoot (a loose bound: CI machines are busy)
    over = [int(r[11]) for r in launches]
    assert all(o == 0 for o, e, a in zip(over, enter, admit, strict=True) if a == e), over
    assert 0 < max(over) / 1e6 <= 50, f"held up to {max(over) / 1e6:.1f} ms past what was owed"
    # why: a process alone is held by its budget ('b'), or measures first ('m'); '-' went at once
    why = [r[12] for r in launches]
    assert {w for w, e, a in zip(why, enter, admit, strict=True) if a == e} == {"-"}, why
    assert {w for w, e, a in zip(why, enter, admit, strict=True) if a > e} <= {"b", "m"}, why
    assert "b" in why, why
    charged = sum(int(r[6]) for r in batches) / 1e6
    assert 80 <= charged <= 110, f"batches debited {charged:.0f} ms of GPU time for 100 ms of work"


def test_no_trace_without_the_variable(gs, tmp_path):
    assert _trace(gs, tmp_path, {}) == []


def test_trace_summary_reads_what_the_library_writes(gs, tmp_path, capsys):
    """benchmarks/multi_gpu/trace_summary.py (what GPU runs report) parses every launch line,
    and ranks holds by how far past what they owed they went (issue 21's 10 ms bound)."""
    sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks" / "multi_gpu"))
    import trace_summary

    files = _trace(gs, tmp_path, {"GPUSLICE_COMPUTE_TRACE": str(tmp_path)})
    proc = trace_summary.load(files[0])
    assert len(proc.launches) == 100 and proc.batches and not proc.truncated
    worst = max(x.over for x in proc.launches)
    assert trace_summary.main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    table = text.split("## Held furthest past what they owed")[1].splitlines()
    assert f"| {trace_summary.ms(worst)} |" in table[4], table[:5]


def test_trace_summary_reads_traces_of_earlier_libraries(tmp_path):
    """Launch lines of earlier libraries lack the last fields (over: 12th, why: 13th)."""
    sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks" / "multi_gpu"))
    import trace_summary

    common = ["L", "100", "2100", "0", "0", "k", "0", "5", "0", "3", "3"]
    trace = tmp_path / "compute-trace.7.tsv"
    trace.write_text("\n".join("\t".join(common + extra) for extra in ([], ["9"], ["9", "o"])))
    got = [(x.held, x.over, x.why) for x in trace_summary.load(trace).launches]
    assert got == [(2000, 0, "?"), (2000, 9, "?"), (2000, 9, "o")], got


def test_trace_summary_says_how_much_of_a_hold_came_after_its_streams_own_work(tmp_path):
    """A launch held 10 ms whose stream still ran this process's earlier work until 9.7 ms was
    held 0.3 ms after that work (the kernel could not have started before it); batches of other
    streams, and those seen done after the launch went, do not count."""
    sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks" / "multi_gpu"))
    import trace_summary

    lines = [["L", "1000000", "11000000", "0", "s1", "k", "0", "0", "0", "1", "3", "10000000",
              "o"],
             ["B", "10700000", "0", "s1", "2700000", "2700000", "2700000", "3", "k", "0"],
             ["B", "10900000", "0", "s2", "2700000", "2700000", "2700000", "3", "k", "0"],
             ["B", "11500000", "0", "s1", "2700000", "2700000", "2700000", "3", "k", "0"],
             ["L", "20000000", "25000000", "0", "s3", "k", "0", "0", "0", "1", "3", "5000000",
              "q"]]
    trace = tmp_path / "compute-trace.8.tsv"
    trace.write_text("\n".join("\t".join(f) for f in lines))
    proc = trace_summary.load(trace)
    assert [proc.after_own_work(x) for x in proc.launches] == [300000, 5000000], \
        "all of a hold with no batch of its stream before it counts"


def test_trace_summary_splits_holds_past_owed_at_a_kernel(tmp_path, capsys):
    """--split-at: the furthest past what it owed before the first kernel matching, and after."""
    sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks" / "multi_gpu"))
    import trace_summary

    lines = [["N", "a", "ncclAllReduce"], ["N", "g", "sgemm"],
             ["L", "0", "12000000", "0", "s", "a", "0", "0", "0", "1", "3", "12000000", "q"],
             ["L", "20000000", "21000000", "0", "s", "g", "0", "0", "0", "1", "3", "1000000",
              "b"],
             ["L", "30000000", "33000000", "0", "s", "a", "0", "0", "0", "1", "3", "3000000",
              "o"]]
    (tmp_path / "compute-trace.9.tsv").write_text("\n".join("\t".join(f) for f in lines))
    assert trace_summary.main([str(tmp_path), "--split-at", "gemm"]) == 0
    table = capsys.readouterr().out.split("first kernel matching `gemm`")[1].splitlines()
    assert table[4] == "| 9 | 1 | 12.00 | 2 | 3.00 |", table

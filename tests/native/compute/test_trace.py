"""GPUSLICE_COMPUTE_TRACE (native/src/compute/trace.h) against the fake driver: a limited launch
loop writes one line per launch, one per measured batch and one name per kernel key, on the
host's monotonic clock, and the held launches show their wait. Without the variable nothing is
written."""

from __future__ import annotations

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
    assert len(launches[0]) == 11 and all(len(r) == 10 for r in batches)
    assert len(names) == 1 and names[0][1] == launches[0][5], names
    enter, admit = ([int(r[i]) for r in launches] for i in (1, 2))
    assert all(a >= e > 0 for e, a in zip(enter, admit, strict=True))
    # 100 kernels of 1 ms at 30 %: the bucket's 15 ms go at once, the other 85 take ~283 ms
    held = sum(a - e for e, a in zip(enter, admit, strict=True)) / 1e6
    assert 200 <= held <= 340, f"launches held {held:.0f} ms in total"
    charged = sum(int(r[6]) for r in batches) / 1e6
    assert 80 <= charged <= 110, f"batches debited {charged:.0f} ms of GPU time for 100 ms of work"


def test_no_trace_without_the_variable(gs, tmp_path):
    assert _trace(gs, tmp_path, {}) == []

"""Renders replay metrics: a rich table (one column per policy) or JSON lines (one per policy).

Owns: labels, number formats and the row order people read; the JSON line shape (Metrics fields).
Does not: compute anything (metrics.py) or choose where output goes (command.py passes a Console).
Invariants: same metrics -> same text; fractions print as percentages in the table and as 0..1
numbers in JSON; the best value of a comparable row is bold when several policies are shown.
Tests: tests/unit/simulate/test_report_render.py, tests/golden/simulate_small.{txt,json}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from rich import box
from rich.console import Console
from rich.table import Table

from gpuslice.simulate.metrics import Metrics

__all__ = ["json_lines", "render_table"]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _sec(x: float | None) -> str:
    """Seconds in the unit a person reads fastest (JSON keeps exact seconds)."""
    if x is None:
        return "-"
    if x >= 3600:
        return f"{x / 3600:.1f} h"
    if x >= 60:
        return f"{x / 60:.1f} min"
    return f"{x:.1f} s"


def _reason_rows(results: Sequence[Metrics]) -> list[tuple[str, list[str]]]:
    """One row per rejection reason seen under any policy, most jobs first."""
    totals: dict[str, int] = {}
    for m in results:
        for reason, n in m.unplaced_reasons.items():
            totals[reason] = totals.get(reason, 0) + n
    order = sorted(totals, key=lambda r: (-totals[r], r))
    return [(f"  {r}", [f"{m.unplaced_reasons.get(r, 0):,}" for m in results]) for r in order]


# label, text, sort key for "best" (None: not comparable), higher is better
_Row = tuple[str, Callable[[Metrics], str], Callable[[Metrics], float] | None, bool]
_ROWS: list[_Row] = [
    ("jobs", lambda m: f"{m.jobs:,}", None, True),
    ("placed", lambda m: f"{m.placed:,}", lambda m: m.placed, True),
    ("never placed", lambda m: f"{m.unplaced:,}", None, False),
    ("  (reasons)", lambda m: "", None, False),  # replaced by one row per reason
    ("allocation rate", lambda m: _pct(m.allocation_rate), lambda m: m.allocation_rate, True),
    ("memory used, mean", lambda m: _pct(m.mean_memory_utilization),
     lambda m: m.mean_memory_utilization, True),
    ("memory used, peak", lambda m: _pct(m.peak_memory_utilization), None, True),
    ("cores used, mean", lambda m: _pct(m.mean_core_utilization),
     lambda m: m.mean_core_utilization, True),
    ("cores used, peak", lambda m: _pct(m.peak_core_utilization), None, True),
    ("fragmentation", lambda m: _pct(m.fragmentation),
     lambda m: m.fragmentation, False),
    ("jobs that waited", lambda m: f"{m.jobs_waited:,}", lambda m: m.jobs_waited, False),
    ("longest queue", lambda m: f"{m.max_queue:,}", lambda m: m.max_queue, False),
    ("wait, mean", lambda m: _sec(m.wait_mean), lambda m: m.wait_mean or 0.0, False),
    ("wait, p50", lambda m: _sec(m.wait_p50), lambda m: m.wait_p50 or 0.0, False),
    ("wait, p95", lambda m: _sec(m.wait_p95), lambda m: m.wait_p95 or 0.0, False),
    ("wait, max", lambda m: _sec(m.wait_max), lambda m: m.wait_max or 0.0, False),
    ("makespan", lambda m: _sec(m.makespan), lambda m: m.makespan, False),
]


def render_table(results: Sequence[Metrics], console: Console, *, title: str = "") -> None:
    """Print one table: a row per metric, a column per policy."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("metric", min_width=18)
    for m in results:
        table.add_column(m.policy, justify="right", no_wrap=True, min_width=len(m.policy))
    for label, text, key, higher in _ROWS:
        if label == "  (reasons)":
            for reason, cells in _reason_rows(results):
                table.add_row(reason, *cells)
            continue
        cells = [text(m) for m in results]
        if key is not None and len(results) > 1:
            values = [key(m) for m in results]
            best = max(values) if higher else min(values)
            if values.count(best) < len(values):
                cells = [f"[bold]{c}[/bold]" if v == best else c
                         for c, v in zip(cells, values, strict=True)]
        table.add_row(label, *cells)
    wide = console.measure(table, options=console.options.update_width(10_000))
    # a file or pipe has no width: print the table whole; never squeeze a terminal below
    # the narrowest the table can be (the terminal wraps lines rather than hiding columns)
    need = wide.maximum if not console.is_terminal else wide.minimum
    console.width = max(console.width, need)
    with console.capture() as cap:
        if title:
            console.print(title, highlight=False)
        console.print(table)
        if results:
            m = results[0]
            console.print(f"{m.gpus:,} GPUs, {m.memory_mib:,} MiB in all; the median job asks "
                          f"{m.median_request_mib:,} MiB per GPU. Definitions: docs/simulate.md",
                          highlight=False)
    # rich pads every line to the table width; trailing blanks only get in the way of diffs
    console.file.write("".join(line.rstrip() + "\n" for line in cap.get().splitlines()))
    console.file.flush()


def json_lines(results: Sequence[Metrics]) -> str:
    """One compact JSON object per policy, one per line, in the order given."""
    return "".join(msgspec.json.encode(m).decode() + "\n" for m in results)

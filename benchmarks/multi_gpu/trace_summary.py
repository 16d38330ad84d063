"""Read the compute controller's launch traces (GPUSLICE_COMPUTE_TRACE, native/src/compute/trace.h)
of one run's processes and say where the time went: per process its launches, holds and charged
GPU time; the collectives of the ranks side by side (the n-th NCCL kernel of each process, or with
--key-pattern any kernel name), how far apart their launches went and what held the late one; the
longest holds, holds past what they owed (issue 21: at most 10 ms), with how much of each came
after its own stream's earlier work was seen done (the rest the GPU spent on that work, so the
kernel could not have started sooner), and batches; and every process's lines around the
longest hold and the one furthest past what it owed, merged on one clock.

With --split-at REGEX (e.g. `gemm`: nccl_bench.py's DDP steps start with the first GEMM), each
process's furthest hold past what it owed before the first kernel whose name matches, and from
it on.

Usage: python3 benchmarks/multi_gpu/trace_summary.py DIR [--key-pattern REGEX] [--window-ms 30]
         [--split-at REGEX]
Prints markdown. stdlib only (it runs on the bare GPU machine)."""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Launch:
    enter: int
    admit: int
    device: int
    stream: str
    key: str
    owed: int
    gang: int
    catchup: int
    flags: int
    over: int = 0  # held past what it owed (traces before this field: 0)
    why: str = "?"  # what held it last (trace.h; traces before this field: ?)

    @property
    def held(self) -> int:
        return self.admit - self.enter


@dataclass
class Batch:
    now: int
    device: int
    stream: str
    span: int
    charge: int
    busy: int
    launches: int
    key: str


@dataclass
class Proc:
    pid: str
    launches: list[Launch] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    truncated: bool = False

    def after_own_work(self, x: Launch) -> int:
        """How long `x` was held after the last batch of its own device and stream seen done
        before it went (all of its hold if none): the part of the hold in which that stream
        had nothing of this process's left to run. Batches are seen done when the library
        polls, so this is at most that late."""
        done = [b.now for b in self.batches
                if b.device == x.device and b.stream == x.stream and b.now <= x.admit]
        return x.admit - max(x.enter, max(done, default=x.enter))


def load(path: Path) -> Proc:
    p = Proc(path.name.split(".")[1])
    for line in path.read_text(errors="replace").splitlines():
        f = line.split("\t")
        if f[0] == "L" and len(f) in (11, 12, 13):  # older traces lack over, why
            p.launches.append(Launch(int(f[1]), int(f[2]), int(f[3]), f[4], f[5], int(f[7]),
                                     int(f[8]), int(f[9]), int(f[10]),
                                     int(f[11]) if len(f) > 11 else 0,
                                     f[12] if len(f) > 12 else "?"))
        elif f[0] == "B" and len(f) == 10:
            p.batches.append(Batch(int(f[1]), int(f[2]), f[3], int(f[4]), int(f[5]), int(f[6]),
                                   int(f[7]), f[8]))
        elif f[0] == "N" and len(f) == 3:
            p.names[f[1]] = f[2]
        elif f[0] == "X":
            p.truncated = True
    return p


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f}"


def short(name: str) -> str:
    return name if len(name) <= 48 else name[:45] + "..."


def _table(title: str, columns: list[str], rows: list[list[object]]) -> list[str]:
    """A markdown section: `## title`, then the table."""
    return ["", f"## {title}", "", "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns), *("| " + " | ".join(map(str, r)) + " |" for r in rows)]


def split_overs(procs: list[Proc], names: dict[str, str], at: re.Pattern[str]) -> list[str]:
    """Per process: the furthest past what it owed before its first kernel matching `at`, and
    from it on (none matching: all of it before)."""
    rows = []
    for p in procs:
        first = min((x.enter for x in p.launches if at.search(names.get(x.key, ""))),
                    default=None)
        before = [x.over for x in p.launches if first is None or x.enter < first]
        after = [x.over for x in p.launches if first is not None and x.enter >= first]
        rows.append([p.pid, len(before), ms(max(before, default=0)), len(after),
                     ms(max(after, default=0)) if after else "-"])
    return _table(f"Past what they owed, before and from the first kernel matching "
                  f"`{at.pattern}`", ["pid", "launches before", "furthest ms",
                                      "launches from it", "furthest ms"], rows)


def summarize(procs: list[Proc], pattern: re.Pattern[str], window_ms: float,
              split_at: re.Pattern[str] | None = None) -> str:
    names: dict[str, str] = {}
    for p in procs:
        names.update(p.names)
    t0 = min((p.launches[0].enter for p in procs if p.launches), default=0)
    out = ["| pid | device | launches | held s | holds > 10 ms | longest hold ms | charged GPU s |"
           " batches | truncated |", "|---|---|---|---|---|---|---|---|---|"]
    for p in procs:
        held = [x.held for x in p.launches]
        devs = sorted({x.device for x in p.launches})
        out.append(f"| {p.pid} | {devs} | {len(p.launches)} | {sum(held) / 1e9:.2f} | "
                   f"{sum(h > 10_000_000 for h in held)} | {ms(max(held, default=0))} | "
                   f"{sum(b.busy for b in p.batches) / 1e9:.3f} | {len(p.batches)} | "
                   f"{p.truncated} |")
    # the n-th matching kernel of every process, side by side
    colls = {p.pid: [x for x in p.launches if pattern.search(names.get(x.key, ""))]
             for p in procs}
    n = min((len(v) for v in colls.values()), default=0)
    out += ["", f"## Collectives ({n} matched in every process, pattern `{pattern.pattern}`)"]
    if n and len(procs) > 1:
        skews = []
        for i in range(n):
            admits = [colls[p.pid][i].admit for p in procs]
            skews.append(max(admits) - min(admits))
        out.append(f"launch skew ms: p50 {ms(statistics.median(skews))}, p90 "
                   f"{ms(sorted(skews)[int(0.9 * (n - 1))])}, max {ms(max(skews))}; "
                   f"> 5 ms: {sum(s > 5e6 for s in skews)} of {n}")
        out += ["", "first 25 with a skew > 5 ms (t = admit of the late one, from the first "
                "launch; per process: held ms, owed ms, gang ms, catchup, flags)",
                "", "| # | t s | skew ms | " + " | ".join(p.pid for p in procs) + " |",
                "|---|---|---|" + "---|" * len(procs)]
        shown = 0
        for i, s in enumerate(skews):
            if s <= 5e6 or shown >= 25:
                continue
            shown += 1
            cells = [colls[p.pid][i] for p in procs]
            late = max(c.admit for c in cells)
            out.append(f"| {i} | {(late - t0) / 1e9:.3f} | {ms(s)} | " + " | ".join(
                f"{ms(c.held)} / {ms(c.owed)} / {ms(c.gang)} / {c.catchup} / {c.flags}"
                for c in cells) + " |")
    # longest holds and batches
    columns = ["pid", "t s", "held ms", "owed ms", "gang ms", "past owed ms", "why", "catchup",
               "flags", "kernel"]

    def row(pid: str, x: Launch) -> list[object]:
        return [pid, f"{(x.enter - t0) / 1e9:.3f}", ms(x.held), ms(x.owed), ms(x.gang),
                ms(x.over), x.why, x.catchup, x.flags, short(names.get(x.key, x.key))]

    holds = sorted(((x.held, p.pid, x) for p in procs for x in p.launches), key=lambda h: -h[0])
    out += _table("Longest holds", columns, [row(pid, x) for _, pid, x in holds[:15]])
    why: dict[str, list[int]] = {}
    for p in procs:
        for x in p.launches:
            if x.held > 0:
                why.setdefault(x.why, []).append(x.held)
    out += _table("Held, by what held them last (trace.h)",
                  ["why", "launches", "held s", "p50 ms", "p90 ms"],
                  [[k, len(v), f"{sum(v) / 1e9:.2f}", ms(statistics.median(v)),
                    ms(sorted(v)[min(len(v) - 1, int(0.9 * len(v)))])]
                   for k, v in sorted(why.items())])
    overs = sorted(((x.over, p, x) for p in procs for x in p.launches), key=lambda h: -h[0])
    out += _table("Held furthest past what they owed (" + str(sum(o > 10_000_000 for o, _, _ in
                                                                    overs)) + " over 10 ms)",
                  [*columns, "after own stream's work ms"],
                  [[*row(p.pid, x), ms(p.after_own_work(x))] for _, p, x in overs[:15]])
    if split_at is not None:
        out += split_overs(procs, names, split_at)
    spans = sorted(((b.span, p.pid, b) for p in procs for b in p.batches), key=lambda s: -s[0])
    out += _table("Longest batches", ["pid", "found s", "span ms", "charge ms", "busy ms",
                                      "launches", "first kernel"],
                  [[pid, f"{(b.now - t0) / 1e9:.3f}", ms(span), ms(b.charge), ms(b.busy),
                    b.launches, short(names.get(b.key, b.key))] for span, pid, b in spans[:15]])
    for what, (top, pid, x) in (("the longest hold", holds[0] if holds else (0, "", None)),
                                ("the hold furthest past what it owed",
                                 (overs[0][0], overs[0][1].pid, overs[0][2]) if overs
                                 else (0, "", None))):
        if top > 0 and x is not None:
            out += _around(procs, names, what, pid, x, window_ms)
    return "\n".join(out)


def _around(procs: list[Proc], names: dict[str, str], what: str, pid: str, x: Launch,
            window_ms: float) -> list[str]:
    """Every process's lines around launch `x` of `pid`, merged on one clock."""
    lo, hi = x.enter - int(window_ms * 1e6), x.admit + int(window_ms * 1e6)
    rows = []
    for p in procs:
        rows += [(y.enter, p.pid, f"L held {ms(y.held)} owed {ms(y.owed)} gang {ms(y.gang)} "
                  f"over {ms(y.over)} why {y.why} cu {y.catchup} f {y.flags} "
                  f"{short(names.get(y.key, y.key))}") for y in p.launches
                 if lo <= y.enter <= hi or lo <= y.admit <= hi]
        rows += [(b.now, p.pid, f"B span {ms(b.span)} busy {ms(b.busy)} n {b.launches} "
                  f"{short(names.get(b.key, b.key))}") for b in p.batches if lo <= b.now <= hi]
    rows.sort()
    return ["", f"## Around {what} (pid {pid}, {window_ms} ms either side, at most 300 lines; "
            "t = ms from the window's start)", "", "```",
            *(f"{(t - lo) / 1e6:9.3f} {p:>8} {text}" for t, p, text in rows[:300]), "```"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--key-pattern", default=r"^nccl|barrier",
                    help="kernel names matched across processes (default: NCCL's, ipc_spin's)")
    ap.add_argument("--window-ms", type=float, default=30)
    ap.add_argument("--split-at", type=re.compile, default=None,
                    help="also the furthest past owed before / from the first kernel matching")
    args = ap.parse_args(argv)
    files = sorted(args.dir.glob("compute-trace.*.tsv"))
    if not files:
        print(f"no compute-trace.*.tsv in {args.dir}")
        return 1
    print(f"# Trace of {args.dir.name}\n")
    print(summarize([load(f) for f in files], re.compile(args.key_pattern), args.window_ms,
                    args.split_at))
    return 0


if __name__ == "__main__":
    sys.exit(main())

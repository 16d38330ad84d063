"""Turn one GPU-suite results directory into the Markdown tables of docs/benchmarks-gpu.md.

Reads (all optional, a missing file is reported, not fatal): env.json (machine facts),
pytest-junit.xml (per-test outcome), gpu_tests.jsonl (figures recorded by tests/gpu), overhead.json
(benchmarks/shim_overhead/run.py). Prints Markdown on stdout. Stdlib only.
Usage: summarize.py RESULTS_DIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

MiB = 1 << 20


def _mib(v: Any) -> str:
    return f"{v / MiB:.1f}" if isinstance(v, int | float) else "n/a"


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tests_table(junit: Path) -> list[str]:
    if not junit.is_file():
        return ["(no pytest-junit.xml: the test phase did not run or was killed)"]
    out = ["| test | outcome | detail |", "|---|---|---|"]
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                detail = (node.get("message") or "").splitlines()[0][:160] if node.get(
                    "message") else ""
                break
        out.append(f"| {case.get('name')} | {outcome} | {detail.replace('|', '/')} |")
    return out


def cap_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| allocator | cap (MiB) | total seen (MiB) | context (MiB) | usable (MiB) | "
           "usable / (cap - context) | error at cap | NVML used at OOM (MiB) | accounted (MiB) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["test"] != "pytorch_cap":
            continue
        room = r["cap"] - r["context"]
        share = f"{r['usable'] / room:.4f}" if room > 0 else "n/a"
        out.append(f"| {r['allocator']} | {_mib(r['cap'])} | {_mib(r['total'])} | "
                   f"{_mib(r['context'])} | {_mib(r['usable'])} | {share} | {r['error']} | "
                   f"{_mib(r['nvml_used'])} | {_mib(r['accounted'])} |")
    return out


def nvml_table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| pattern | step | accounted (MiB) | NVML (MiB) | diff (MiB) |",
           "|---|---|---|---|---|"]
    for r in rows:
        if r["test"] == "accounted_vs_nvml":
            diff = r.get("diff")
            out.append(f"| {r['pattern']} | {r['step']} | {_mib(r.get('accounted'))} | "
                       f"{_mib(r.get('nvml'))} | {_mib(diff)} |")
    return out


def other_rows(rows: list[dict[str, Any]]) -> list[str]:
    skip = {"pytorch_cap", "accounted_vs_nvml"}
    return [f"- `{r['test']}`: " + ", ".join(f"{k}={v}" for k, v in r.items() if k != "test")
            for r in rows if r["test"] not in skip]


def overhead_tables(path: Path) -> list[str]:
    if not path.is_file():
        return ["(no overhead.json: the benchmark phase did not run or was killed)"]
    res = json.loads(path.read_text())
    names = list(res["workloads"])
    out = ["Each cell: median us per call (vs native median; median of paired per-repetition "
           "ratios; min-max over runs).", "",
           "| configuration | " + " | ".join(f"{res['workloads'][w]}"
                                               for w in names) + " |",
           "|---" * (len(names) + 1) + "|"]
    for cfg, entry in res["hot_paths"].items():
        cells = []
        for w in names:
            e = entry.get(w)
            if not e:
                cells.append("n/a")
                continue
            rom = e.get("ratio_of_medians")
            nat = res["hot_paths"].get("native", {}).get(w)
            if rom is None and nat:  # files from before run.py recorded it
                rom = e["median_us"] / nat["median_us"]
            pct = f"{(rom - 1) * 100:+.2f} %" if rom is not None else "?"
            paired = f"{(e['ratio'] - 1) * 100:+.2f} %" if e["ratio"] is not None else "?"
            cells.append(f"{e['median_us']:.3f} ({pct}; paired {paired}; "
                         f"{e['min_us']:.3f}-{e['max_us']:.3f})")
        out.append(f"| {cfg} ({entry['runs']} runs, {entry['failed']} failed) | "
                   + " | ".join(cells) + " |")
    out.append("")
    out.append("Targets over native: " + ", ".join(
        f"{res['workloads'][w]} <= {t} %" for w, t in res["targets_percent"].items()))
    startup = res.get("startup", {})
    for prog, e in startup.items():
        names = [n for n, v in e.items() if isinstance(v, dict)]
        out += ["", f"| start-up: {prog} | median (ms) | vs native (ms) | runs |",
                "|---|---|---|---|"]
        for n in names:
            med, delta = e[n]["median_s"], e[n].get("delta_ms")
            out.append(f"| {n} | {med * 1e3 if med else float('nan'):.1f} | "
                       f"{f'{delta:+.1f}' if delta is not None else 'n/a'} | "
                       f"{len(e[n]['samples_s'])} |")
        if e.get("errors"):
            text = "; ".join(e["errors"]).replace("\n", " ").replace("|", "/")[:300]
            out.append(f"| errors | {text} | | |")
    return out


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: summarize.py RESULTS_DIR (a directory written by benchmarks/gpu_suite.sh)",
              file=sys.stderr)
        return 2
    d = Path(sys.argv[1])
    rows = _rows(d / "gpu_tests.jsonl")
    env = json.loads((d / "env.json").read_text()) if (d / "env.json").is_file() else {}
    parts = ["## Machine", "", *[f"- {k}: {v}" for k, v in env.items()], "",
             "## GPU tests", "", *tests_table(d / "pytest-junit.xml"), "",
             "## PyTorch under the cap", "", *cap_table(rows), "",
             "## Accounted vs NVML per-process used memory", "", *nvml_table(rows), "",
             "## Other recorded figures", "", *other_rows(rows), "",
             "## Overhead", "", *overhead_tables(d / "overhead.json")]
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

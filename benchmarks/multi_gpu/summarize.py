"""The multi-GPU run's summary (benchmarks/multi_gpu/run.sh): one Markdown report from the JSON
the run left, and the NCCL runs merged into one file.

Owns: overhead = 1 - with/without per all-reduce size (bus bandwidth, the median over the rounds
of each configuration) and for the DDP step; NCCL's memory per rank (NVML vs the region's
account); the inventory's facts and problems; the GPU tests' outcome (JUnit XML).
Does not: measure anything or judge targets beyond printing them (issue 14: overhead <= 2 %).
Stdlib only: runs where nothing else is installed.
Usage: summarize.py RESULTS_DIR [NCCL_RUN.json ...]  (writes RESULTS_DIR/nccl.json, prints MD)
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

MiB = 1 << 20
BASELINE = "plain"
TARGET = 0.02
TOLERANCE = 4 * MiB  # accounted vs NVML: 2 MiB + one 2 MiB granule (DESIGN §6)


def overhead(with_lib: float, without: float) -> float:
    """1 - with/without for a rate (bandwidth): positive = the library costs that share."""
    return 1 - with_lib / without


def _by_label(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        out.setdefault(r["label"], []).append(r)
    return out


def _median(runs: list[dict[str, Any]], key: str) -> dict[int, float]:
    """size -> median of `key` (busbw_gbs, algbw_gbs) over the runs of one configuration."""
    sizes: dict[int, list[float]] = {}
    for r in runs:
        for row in r.get("all_reduce", []):
            sizes.setdefault(row["bytes"], []).append(row[key])
    return {s: statistics.median(v) for s, v in sorted(sizes.items())}


def nccl_section(runs: list[dict[str, Any]]) -> list[str]:
    if not runs:
        return ["No NCCL run finished (see run.log)."]
    labels = _by_label(runs)
    order = [BASELINE, *sorted(k for k in labels if k != BASELINE)]
    order = [k for k in order if k in labels]
    bw = {k: _median(labels[k], "busbw_gbs") for k in order}
    alg = {k: _median(labels[k], "algbw_gbs") for k in order}  # busbw x a constant; 1 rank: 0
    rounds = ", ".join(f"{k} x{len(labels[k])}" for k in order)
    lines = [f"All-reduce (float32 sum), bus bandwidth GB/s, median of rounds ({rounds}); "
             f"overhead = 1 - with/without {BASELINE} (target <= {TARGET:.0%}):", ""]
    others = [k for k in order if k != BASELINE]
    head = ["size", *order, *(f"overhead {k}" for k in others if BASELINE in bw)]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in bw[order[0]]:
        cells = [f"{size // MiB} MiB"] + [f"{bw[k].get(size, float('nan')):.1f}" for k in order]
        if BASELINE in bw:
            cells += [f"{overhead(alg[k][size], alg[BASELINE][size]):+.1%}" for k in others
                      if size in alg[k]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "DDP step (ms, median of each run's median):", ""]
    ddp = {k: statistics.median(r["ddp"]["step_ms_median"] for r in labels[k] if "ddp" in r)
           for k in order if any("ddp" in r for r in labels[k])}
    for k, ms in ddp.items():
        extra = f" (overhead {1 - ddp[BASELINE] / ms:+.1%})" if BASELINE in ddp and k != BASELINE \
            else ""
        lines.append(f"- {k}: {ms:.2f} ms{extra}")
    lines += ["", "Memory per rank on its GPU (MiB), first run of each configuration: NVML / "
              "accounted by the region / PyTorch reserved, from the context to after DDP:", ""]
    for k in order:
        for r in labels[k][:1]:
            for rank in r.get("per_rank", []):
                cells = []
                for m in rank["memory"]:
                    acc = "-" if m["accounted"] is None else f"{m['accounted'] / MiB:.0f}"
                    nv = "-" if m["nvml"] is None else f"{m['nvml'] / MiB:.0f}"
                    cells.append(f"{m['phase']} {nv}/{acc}/{m['reserved'] / MiB:.0f}")
                    diff = m.get("accounted_minus_nvml")
                    if diff is not None and abs(diff) > TOLERANCE:
                        cells.append(f"OFF BY {diff / MiB:+.1f} MiB (> 2 MiB + a granule)")
                    if m.get("elsewhere"):
                        cells.append(f"ALSO ON {m['elsewhere']}")
                lines.append(f"- {k} rank {rank['rank']}: " + "; ".join(cells))
    errors = [(r["label"], r.get("error")) for r in runs if r.get("error")]
    if errors:
        lines += ["", f"Errors: {errors}"]
    return lines


def inventory_section(inv: dict[str, Any] | None) -> list[str]:
    if inv is None:
        return ["inventory.py left no JSON (see run.log)."]
    lines = []
    for g in inv.get("nvml", {}).get("gpus", []):
        types = sorted({str(x["remote_type"]) for x in g["nvlink_links"]})
        lines.append(f"- NVML GPU {g['index']}: {g['name']}, {g['memory_mib']} MiB, bus "
                     f"{g['pci_bus']}, NUMA {g['numa_node']}, {len(g['nvlink_links'])} active "
                     f"NVLink links (remote types {types})")
    for p in inv.get("nvml", {}).get("pairs", []):
        lines.append(f"- pair {p['gpus']}: P2P NVLink {p['p2p_nvlink']}, read {p['p2p_read']}, "
                     f"common ancestor {p['common_ancestor']}")
    agent = inv.get("agent", {})
    published = {g["uuid"]: g.get("nvlinkPeers", []) for g in
                 agent.get("inventory", {}).get("gpus", [])}
    nvml_gpus = [g["uuid"] for g in inv.get("nvml", {}).get("gpus", [])]
    for p in inv.get("nvml", {}).get("pairs", []):
        a, b = (nvml_gpus[i] for i in p["gpus"])
        if p["p2p_nvlink"] == 0 and b not in published.get(a, []) and a not in \
                published.get(b, []):
            lines.append(f"- MISMATCH: NVML says GPUs {p['gpus']} reach each other over NVLink, "
                         "the agent published no peer (tests/unit/node/"
                         "test_topology_allocate_nvswitch.py)")
    for g in agent.get("inventory", {}).get("gpus", []):
        lines.append(f"- agent's inventory: {g['uuid']} numaNode={g.get('numaNode')} "
                     f"nvlinkPeers={g.get('nvlinkPeers', [])}")
    if "assignment" in agent:
        env = agent["env"]
        chosen = agent["assignment"]
        lines.append(f"- Allocate (topology, {len(chosen)} GPUs): {chosen}, connection "
                     f"{agent['connection']} (best on node {agent['best_connection_on_node']}); "
                     f"GPUSLICE_DEVICE_UUIDS={env.get('GPUSLICE_DEVICE_UUIDS')}, limits "
                     f"{[v for k, v in sorted(env.items()) if 'MEMORY_LIMIT_' in k]}")
    if "holder" in inv:
        lines.append(f"- PyTorch under that answer sees totals "
                     f"{[d['total'] // MiB for d in inv['holder']['devices']]} MiB")
    lines.append(f"- problems: {inv.get('problems')}")
    return lines


def tests_section(junit: Path) -> list[str]:
    if not junit.is_file():
        return ["No GPU test report (see run.log)."]
    cases = ET.parse(junit).getroot().iter("testcase")
    lines = []
    for c in cases:
        outcome = next((t.tag for t in c if t.tag in ("failure", "error", "skipped")), "passed")
        lines.append(f"- {c.get('name')}: {outcome}")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: summarize.py RESULTS_DIR [NCCL_RUN.json ...]")
    results, runs = Path(argv[0]), []
    for f in argv[1:]:
        try:
            runs.append(json.loads(Path(f).read_text()))
        except (OSError, ValueError) as exc:  # a run killed at its limit leaves no JSON
            print(f"<!-- skipped {f}: {exc} -->")
    if runs:
        (results / "nccl.json").write_text(json.dumps(runs, indent=1) + "\n")
    inv_file = results / "inventory.json"
    inv = json.loads(inv_file.read_text()) if inv_file.is_file() else None
    out = ["# Multi-GPU run", "", "## GPU tests (tests/gpu/test_multi_gpu.py)", "",
           *tests_section(results / "pytest-junit.xml"), "", "## Inventory and Allocate", "",
           *inventory_section(inv), "", "## NCCL", "", *nccl_section(runs)]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

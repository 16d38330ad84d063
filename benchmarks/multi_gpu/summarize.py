"""The multi-GPU run's summary (benchmarks/multi_gpu/run.sh): one Markdown report from the JSON
the run left, and the NCCL runs merged into one file.

Owns: overhead = 1 - with/without per all-reduce size (bus bandwidth, the median over the rounds
of each configuration) and for the DDP step; NCCL's memory per rank (NVML vs the region's
account); the inventory's facts and problems; the GPU tests' outcome (JUnit XML).
Under compute limits (issue 21): the DDP step against its target (the plain step / share, of the
same placement: one rank per GPU, or every rank on one GPU), each round's longest hold and how
far a hold went past what it owed; collective_caps.py's IPC pairs and the disguised kernel.
Does not: measure anything or judge targets beyond printing them (issue 14: overhead <= 2 %;
issue 21: step <= 1.25x target, hold <= owed + 10 ms).
Stdlib only: runs where nothing else is installed.
Usage: summarize.py RESULTS_DIR [--collective collective_caps.json] [NCCL_RUN.json ...]
(writes RESULTS_DIR/nccl.json, prints MD)
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
    ranked = [k for k in order if not k.startswith("same-gpu")]  # gloo's are not comparable
    bw = {k: _median(labels[k], "busbw_gbs") for k in ranked}
    alg = {k: _median(labels[k], "algbw_gbs") for k in ranked}  # busbw x a constant; 1 rank: 0
    rounds = ", ".join(f"{k} x{len(labels[k])}" for k in ranked)
    lines = [f"All-reduce (float32 sum), bus bandwidth GB/s, median of rounds ({rounds}); "
             f"overhead = 1 - with/without {BASELINE} (target <= {TARGET:.0%}):", ""]
    others = [k for k in ranked if k != BASELINE]
    head = ["size", *ranked, *(f"overhead {k}" for k in others if BASELINE in bw)]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in bw[ranked[0]] if ranked else []:
        cells = [f"{size // MiB} MiB"] + [f"{bw[k].get(size, float('nan')):.1f}" for k in ranked]
        if BASELINE in bw:
            cells += [f"{overhead(alg[k][size], alg[BASELINE][size]):+.1%}" for k in others
                      if size in alg[k]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "DDP step (ms, median of each run's median); under a compute limit L the "
              "target is (the plain step of the same placement) / L, met when step <= 1.25 x "
              "target; holds: the longest of one launch over the ranks, and how far one went "
              "past what it owed (target <= 10 ms):", ""]
    ddp = {k: statistics.median(r["ddp"]["step_ms_median"] for r in labels[k] if "ddp" in r)
           for k in order if any("ddp" in r for r in labels[k])}
    for k, ms in ddp.items():
        base = "same-gpu-plain" if k.startswith("same-gpu") else BASELINE
        limit = labels[k][0].get("sm_limit", 0)
        extra = f" (overhead {1 - ddp[base] / ms:+.1%})" if base in ddp and k != base else ""
        if limit and base in ddp:  # throughput: the mean step (held and free steps alternate)
            mean = statistics.median(r["ddp"].get("step_ms_mean", ms) for r in labels[k]
                                     if "ddp" in r)
            base_mean = statistics.median(r["ddp"].get("step_ms_mean", ddp[base])
                                          for r in labels[base] if "ddp" in r)
            target = base_mean / (limit / 100)
            extra = (f" at {limit} %: mean {mean:.2f} ms, target (plain mean {base_mean:.2f} / "
                     f"{limit / 100}) {target:.2f} ms, ratio {mean / target:.2f}")
        held = [h for r in labels[k] for rank in r.get("per_rank", []) if (h := rank.get("holds"))]
        if held and limit:
            extra += (f"; hold max {max(h['hold_max_ms'] for h in held):.1f} ms, past what it "
                      f"owed {max(h['hold_over_debt_ms'] for h in held):.2f} ms")
        lines.append(f"- {k} ({labels[k][0].get('ranks')} ranks): {ms:.2f} ms{extra}")
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


def collective_section(data: dict[str, Any] | None) -> list[str]:
    if data is None:
        return ["collective_caps.py left no JSON (not run, or see run.log)."]
    lines = [f"IPC pair (tests/gpu/progs/ipc_spin.cu), {data['steps']} steps of a "
             f"{data['compute_us']:.0f} us compute kernel + a kernel spinning on the peer:", ""]
    for p in data["pairs"]:
        if p["backend"] == "none":
            mean = p.get("mean_step_ms", -1)
            lines.append(f"- {p['placement']}, no library: step mean {mean:.3f} ms, median "
                         f"{p['step_ms']:.3f} ms")
            continue
        ratio = "-" if p.get("step_ratio") is None else f"{p['step_ratio']:.2f}"
        lines.append(f"- {p['placement']}, {p['backend']} at {p['limit']} %: completed "
                     f"{p['completed']}, step mean {p.get('mean_step_ms', -1):.3f} ms, median "
                     f"{p['step_ms']:.3f} ms (target "
                     f"{p['target_step_ms']:.3f}, ratio {ratio}), hold max "
                     f"{p['hold_max_ms']:.1f} ms, past what it owed "
                     f"{p['hold_over_debt_ms']:.2f} ms")
    for d in data["disguised"]:
        if d["limit"]:
            lines.append(f"- kernel named ncclDevKernel_AllReduce_... spinning 2 ms at "
                         f"{d['limit']} %: share {d.get('share')} of its unlimited rate")
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
    results, runs, coll = Path(argv[0]), [], None
    rest = argv[1:]
    if rest[:1] == ["--collective"] and len(rest) > 1:
        coll, rest = json.loads(Path(rest[1]).read_text()), rest[2:]
    for f in rest:
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
           *inventory_section(inv), "", "## NCCL", "", *nccl_section(runs), "",
           "## Kernels waiting on a peer (collective_caps.py)", "", *collective_section(coll)]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

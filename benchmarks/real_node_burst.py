"""A burst of GPU pods of mixed shapes onto ONE real kubelet: how long does the extender's
in-flight rule hold them, and how long from bind to Running through the real kubelet's
admission and the node agent's Allocate? Zero over-committed GPUs?

What runs (tests/kubelet/real.py, the same harness as tests/integration/real_node/): etcd,
kube-apiserver, kube-controller-manager, kube-scheduler (deploy/scheduler/
kube-scheduler-config.yaml, its defaults: client QPS 50, back-off 1-10 s), `gpuslice
scheduler`, `gpuslice webhook`, and on this machine fake-cri + the kubelet v1.36 + `gpuslice
node-agent --gpu-backend fake:N` (N GPUs of 16 GiB, split 10). Each run creates --pods pods at
once (shapes: tests/kubelet/real.py BURST_SHAPES, seeded), waits until all run, records
create -> bound (the pod seen with spec.nodeName), bound -> end of its flight (the kubelet's
status showing it admitted, or the agent's gpuslice.io/allocated mark, whichever comes first;
the marks the agent wrote are counted),
bound -> Running, create -> Running (p50/p99/max; a watch in this process, monotonic clock),
the scheduling attempts the in-flight rule refused (kube-scheduler's FailedScheduling events
naming it; the extender's gpuslice_scheduler_pods_refused_total{reason="waiting for an
in-flight pod"}), over-committed GPUs (recomputed from the pods' assignments) and whether
every container's devices in the kubelet's checkpoint lie on its assigned GPUs; then deletes
the pods and waits until the kubelet has let go of them.

Needs root and the binaries of tools/kube/build.sh (KUBEBUILDER_ASSETS, else built). The
kubelet changes the host (sysctls, /var/lib/kubelet, a bind mount): the harness restores it
on exit, Ctrl-C included.
Usage: sudo python3 benchmarks/real_node_burst.py [--pods 30 --runs 5 --gpus 4 --json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the harness and the control plane

from kubeapi.envtest import ControlPlane, build_assets, find_assets  # noqa: E402
from kubelet import real  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=30)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=4, help="fake GPUs of the node (16 GiB, split 10)")
    ap.add_argument("--seed", type=int, default=1, help="shapes of run i use seed + i")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="real-node-burst-") as tmp:
        work = Path(tmp)
        assets = find_assets(os.environ.get("KUBEBUILDER_ASSETS")) or build_assets(
            work / "build.log")
        problem = real.cannot_run(assets)
        if problem is not None:
            print(f"real_node_burst: {problem}", file=sys.stderr)
            return 2
        (work / "plane").mkdir()
        plane = ControlPlane(assets, work / "plane").start()
        tier = real.Tier(plane, gpus=a.gpus)
        try:
            t0 = time.monotonic()
            tier.start()
            started = time.monotonic() - t0
            runs = []
            for i in range(a.runs):
                runs.append(asyncio.run(real.burst(tier, count=a.pods, seed=a.seed + i)))
                tier.clean()
                if not a.json:
                    print(json.dumps({f"run {i + 1}": summary([runs[-1]])}), file=sys.stderr)
        finally:
            tier.stop()
            plane.stop()
    out = {"pods": a.pods, "gpus": a.gpus, "runs": a.runs, "tier_start_s": round(started, 1),
           **summary(runs), "per_run": runs, "cpu_count": os.cpu_count(),
           "load_average": [round(x, 2) for x in os.getloadavg()],
           "versions": versions(assets, plane)}
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))
    bad = sum(r["overcommitted_gpus"] for r in runs) or any(
        r["devices_not_on_assigned_gpus"] or r["running"] != a.pods for r in runs)
    return 1 if bad else 0


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure, the median over runs of each run's p50/p99/max (and the range of the max)."""
    out: dict[str, Any] = {}
    for key in ("create_to_bound_s", "create_to_bound_s_held", "create_to_bound_s_never_held",
                "bound_to_flight_end_s", "bound_to_running_s", "create_to_running_s"):
        per = [r[key] for r in runs if r[key]]
        if not per:
            continue
        out[key] = {q: round(statistics.median(p[q] for p in per), 3) for q in ("p50", "p99",
                                                                              "max")}
        out[key]["max_range"] = [min(p["max"] for p in per), max(p["max"] for p in per)]
    refusals = [r["in_flight_refusals"] for r in runs]
    out["in_flight_refusals_per_run"] = {k: [x[k] for x in refusals] for k in refusals[0]}
    out["allocated_marks_written_per_run"] = [r["allocated_marks_written"] for r in runs]
    out["wall_s_per_run"] = [r["wall_s"] for r in runs]
    out["running_per_run"] = [r["running"] for r in runs]
    out["overcommitted_gpus"] = sum(r["overcommitted_gpus"] for r in runs)
    out["devices_not_on_assigned_gpus"] = sum(len(r["devices_not_on_assigned_gpus"])
                                              for r in runs)
    return out


def versions(assets: Any, plane: Any) -> dict[str, str]:
    def version(binary: Path | None) -> str:
        if binary is None:
            return "absent"
        got = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
        return got.stdout.split()[-1] if got.stdout.split() else "unknown"

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return {"kube-apiserver": plane.version.split()[-1], "kubelet": version(assets.kubelet),
            "kube-scheduler": version(assets.kube_scheduler), "gpuslice": commit}


if __name__ == "__main__":
    sys.exit(main())

"""Kernels that wait on another process under a compute limit (issue 21), without NCCL: the pair
of tests/gpu/progs/ipc_spin.cu (a compute kernel, then a one-thread kernel that spins until the
peer process's kernel set its flag through CUDA IPC) on two GPUs and on ONE GPU, and the
"disguised" attack (a kernel named like NCCL's all-reduce that spins = computes).

Owns: building ipc_spin with nvcc, the runs (no library; the library at each limit; optionally
an older library with a time limit: the stall before issue 21), and one JSON file of results
with the issue's checks computed: `completed`, `step_ratio` = capped mean step / (plain mean step /
share) (the mean over the whole run: throughput, start included)
(target <= 1.25), `hold_over_debt_ms` (target <= 10), the attack's `share` (target <= limit).
Does not: assert (tests/gpu/test_collectives_under_compute_caps.py does, from the same JSON).
Usage (a GPU machine, the library built): python3 benchmarks/multi_gpu/collective_caps.py
  --out DIR [--limits 30,50] [--steps 400] [--compute-us 500] [--before-lib OLD.so]
  [--pods one|gang|apart] (the ranks: one container; two pods with one gang directory; apart)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "gpu" / "progs" / "ipc_spin.cu"
LIBRARY = ROOT / "native" / "build" / "libgpuslice.so"
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def build(work: Path) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    out = work / "ipc_spin"
    run = subprocess.run([nvcc, "-O2", "-o", str(out), str(SOURCE)], capture_output=True,
                         text=True, timeout=300)
    if run.returncode != 0:
        sys.exit(f"collective_caps: nvcc failed: {run.stderr[-3000:]}")
    return out


def gpu_uuids() -> list[str]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [u.strip() for u in out.splitlines() if u.strip()]


# gang holds (GPUSLICE_COMPUTE_PHASE): on, as the node agent sets them for a container under a
# compute limit; --no-phase: off for both pairs (the controller without them)
PHASE = {"one-gpu": "1", "two-gpus": "1"}
TRACE: dict[str, Path] = {}  # --trace: "dir" -> each run's own subdirectory of it
# --pods: the ranks are processes of one container (one region, "one"), or two pods of one job
# on the node, each with its own region, handed one gang directory ("gang", crew.h) or not
# ("apart")
PODS = {"layout": "one"}


def _env(lib: Path | None, limit: int, region: Path, uuids: list[str], gpu: int,
         label: str = "", phase: str = "0", gang: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_DEVICE_", "GPUSLICE_", "LD_PRELOAD"))}
    env.update(SAFE_ENV, CUDA_VISIBLE_DEVICES=str(gpu))
    if lib is not None:
        env.update(LD_PRELOAD=str(lib), CUDA_DEVICE_MEMORY_SHARED_CACHE=str(region),
                   GPUSLICE_DEVICE_UUIDS=",".join(uuids), CUDA_DEVICE_SM_LIMIT=str(limit),
                   GPUSLICE_COMPUTE_PHASE=phase)
        if gang is not None:
            env["GPUSLICE_GANG_DIR"] = str(gang)
        if TRACE and label:
            (TRACE["dir"] / label).mkdir(parents=True, exist_ok=True)
            env["GPUSLICE_COMPUTE_TRACE"] = str(TRACE["dir"] / label)
    return env


def run_pair(prog: Path, gpus: list[int], lib: Path | None, limit: int, steps: int,
             compute_us: float, uuids: list[str], timeout: float) -> dict[str, Any]:
    """Both ranks of the IPC pair, one per entry of `gpus` (equal entries: one GPU)."""
    with tempfile.TemporaryDirectory(prefix="gs-ipc-") as d:
        pods = PODS["layout"]
        regions = [Path(d) / ("region" if pods == "one" else f"region-{r}") for r in (0, 1)]
        gang = Path(d) / "gang" if pods == "gang" else None
        if gang is not None:
            gang.mkdir()
        placement = "one-gpu" if gpus[0] == gpus[-1] else "two-gpus"
        label = f"{placement.removesuffix('s')}-{limit}"
        procs = [subprocess.Popen([str(prog), "pair", str(r), d, str(steps), str(compute_us)],
                                  env=_env(lib, limit, regions[r], uuids, g, label,
                                           PHASE[placement], gang),
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for r, g in enumerate(gpus)]  # fmt: skip
        ranks, completed = [], True
        for p in procs:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                out, err = p.communicate()
                completed = False
            line = next((x for x in out.splitlines() if x.startswith("{")), None)
            ranks.append(json.loads(line) if line else {"error": err[-1500:], "rc": p.returncode})
            completed &= p.returncode == 0 and line is not None and not ranks[-1].get("gave_up")
    return {"completed": completed, "ranks": ranks,
            "step_ms": max((r.get("step_ms_median", -1) for r in ranks), default=-1),
            # throughput: the step time (a median hides holds that come in bursts)
            "mean_step_ms": max((1000 * r["wall_s"] / r["steps"] for r in ranks
                                 if r.get("steps")), default=-1),
            "hold_max_ms": max((r.get("hold_max_ms", -1) for r in ranks), default=-1),
            "hold_over_debt_ms": max((r.get("hold_over_debt_ms", -1) for r in ranks),
                                     default=-1)}


def run_disguised(prog: Path, lib: Path | None, limit: int, seconds: float, spin_us: float,
                  uuids: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gs-dis-") as d:
        env = _env(lib, limit, Path(d) / "region", uuids, 0)
        run = subprocess.run([str(prog), "disguised", str(seconds), str(spin_us)], env=env,
                             capture_output=True, text=True, timeout=seconds + 60)
    line = next((x for x in run.stdout.splitlines() if x.startswith("{")), None)
    return json.loads(line) if line else {"error": run.stderr[-1500:], "rc": run.returncode}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lib", type=Path, default=LIBRARY)
    ap.add_argument("--before-lib", type=Path, help="an older build, run with --before-timeout")
    ap.add_argument("--before-timeout", type=float, default=30)
    ap.add_argument("--timeout", type=float, default=60, help="s for one pair with the library")
    ap.add_argument("--limits", default="30,50")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--compute-us", type=float, default=500)
    ap.add_argument("--disguised-seconds", type=float, default=4)
    ap.add_argument("--placements", default="two-gpus,one-gpu")
    ap.add_argument("--phase", action=argparse.BooleanOptionalAction, default=True,
                    help="gang holds (GPUSLICE_COMPUTE_PHASE=1, as the node agent sets them); "
                         "--no-phase: without them")
    ap.add_argument("--trace", type=Path, help="GPUSLICE_COMPUTE_TRACE: DIR/<placement>-<limit>")
    ap.add_argument("--pods", choices=("one", "gang", "apart"), default="one",
                    help="the ranks: processes of one container (one region), or two pods of "
                         "one job, each its own region, with one GPUSLICE_GANG_DIR (gang) or "
                         "without (apart)")
    args = ap.parse_args(argv)
    PODS["layout"] = args.pods
    if args.trace:
        TRACE["dir"] = args.trace
    if not args.phase:
        PHASE.update(dict.fromkeys(PHASE, "0"))
    if not args.lib.is_file():
        sys.exit(f"collective_caps: no library at {args.lib}: build it (make -C native ZIG=)")
    limits = [int(x) for x in args.limits.split(",") if x]
    args.out.mkdir(parents=True, exist_ok=True)
    uuids = gpu_uuids()
    work = Path(tempfile.mkdtemp(prefix="gs-coll-"))
    prog = build(work)
    placements = {"two-gpus": [0, 1], "one-gpu": [0, 0]}
    result: dict[str, Any] = {"gpus": len(uuids), "steps": args.steps, "pods": args.pods,
                              "compute_us": args.compute_us, "pairs": [], "disguised": []}
    for name in args.placements.split(","):
        gpus = placements[name]
        if max(gpus) >= len(uuids):
            print(f"skip {name}: {len(uuids)} GPU(s)")
            continue
        plain = run_pair(prog, gpus, None, 0, args.steps, args.compute_us, uuids, args.timeout)
        result["pairs"].append({"placement": name, "backend": "none", "limit": 0, **plain})
        print(f"{name} no library: step mean {plain['mean_step_ms']:.3f} ms", flush=True)
        for limit in limits:
            for backend, lib, timeout in (("gpuslice", args.lib, args.timeout),
                                          ("before", args.before_lib, args.before_timeout)):
                if lib is None:
                    continue
                r = run_pair(prog, gpus, lib, limit, args.steps, args.compute_us, uuids, timeout)
                target = plain["mean_step_ms"] / (limit / 100)
                r["step_ratio"] = r["mean_step_ms"] / target if r["completed"] else None
                result["pairs"].append({"placement": name, "backend": backend, "limit": limit,
                                        "target_step_ms": target, **r})
                print(f"{name} {backend} {limit}%: completed {r['completed']}, step mean "
                      f"{r['mean_step_ms']:.3f} ms, median {r['step_ms']:.3f} ms (target "
                      f"{target:.3f}, ratio {r['step_ratio']}), "
                      f"hold max {r['hold_max_ms']:.1f} ms, over debt "
                      f"{r['hold_over_debt_ms']:.2f} ms", flush=True)
    free = run_disguised(prog, None, 0, args.disguised_seconds, 2000, uuids)
    result["disguised"].append({"limit": 0, **free})
    for limit in limits:
        r = run_disguised(prog, args.lib, limit, args.disguised_seconds, 2000, uuids)
        r["share"] = r.get("per_s", 0) / free["per_s"] if free.get("per_s") else None
        result["disguised"].append({"limit": limit, **r})
        print(f"disguised ncclDevKernel at {limit}%: {r.get('per_s')} /s vs {free.get('per_s')} "
              f"/s alone: share {r['share']}", flush=True)
    (args.out / "collective_caps.json").write_text(json.dumps(result, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

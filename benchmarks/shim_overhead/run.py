"""Overhead of libgpuslice on the CUDA hot paths and on process start-up, with vs without it.

Owns: running benchmarks/shim_overhead/shim_bench (built by benchmarks/gpu_suite.sh) as a fresh
process per (repetition, configuration), configurations interleaved in a rotating order so drift
hits all of them alike; two native configurations (A/A) give the noise floor. Statistics: per run
the median of its batches; per configuration the median over repetitions, its ratio to native's
median, and the median of the per-repetition (paired) ratios. Start-up: wall time of
`shim_bench --startup` and of `python3 -c "import torch; torch.zeros(1, device='cuda')"`, median.
Does not: build anything or judge pass/fail (targets are printed next to the numbers).
Failure: a run that exits non-zero is recorded with its stderr and left out of the statistics.
Stdlib only (runs on the GPU machine). Usage: run.py --bench BIN --lib SO --out overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKLOADS = {"launch": "empty-kernel launch", "malloc_rt": "cudaMalloc+cudaFree 1 MiB",
             "malloc_drv": "cuMemAlloc_v2+cuMemFree_v2 1 MiB (dlsym)"}
TARGETS = {"launch": 1.0, "malloc_rt": 2.0, "malloc_drv": 2.0}  # percent over native
_SHIM_VARS = ("CUDA_DEVICE_", "GPUSLICE_", "LD_PRELOAD", "LIBCUDA_")


def configurations(lib: Path, region_dir: Path) -> dict[str, dict[str, str]]:
    """Name -> extra environment. 'native' and 'native-again' run without the library."""
    preload = {"LD_PRELOAD": str(lib)}
    return {
        "native": {},
        "native-again": {},
        "lib-nolimit": {**preload, "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region_dir / "a")},
        "lib-memlimit": {**preload, "CUDA_DEVICE_MEMORY_LIMIT": "16GiB",
                         "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region_dir / "b")},
        "lib-sm0": {**preload, "CUDA_DEVICE_SM_LIMIT": "0",
                    "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region_dir / "c")},
    }


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_SHIM_VARS)}


def rotated(names: list[str], rep: int) -> list[str]:
    k = rep % len(names)
    return names[k:] + names[:k]


def run_hot_paths(bench: Path, configs: dict[str, dict[str, str]], reps: int,
                  extra_args: list[str]) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    for rep in range(reps):
        for name in rotated(list(configs), rep):
            done = subprocess.run([str(bench), *extra_args], env={**base_env(), **configs[name]},
                                  capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                runs[name].append({"rep": rep, "error": done.stderr.strip()[-2000:]})
                print(f"  rep {rep} {name}: FAILED {done.stderr.strip()[-300:]}", flush=True)
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs[name].append({"rep": rep, **result})
            print(f"  rep {rep} {name:13s} " + " ".join(
                f"{w}={result[w + '_us']:.3f}us" for w in WORKLOADS), flush=True)
    return runs


def summarize_hot_paths(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Median per configuration and median paired ratio to native, per workload."""
    out: dict[str, Any] = {}
    native = {r["rep"]: r for r in runs["native"] if "error" not in r}
    for name, rows in runs.items():
        ok = [r for r in rows if "error" not in r]
        entry: dict[str, Any] = {"runs": len(ok), "failed": len(rows) - len(ok)}
        for w in WORKLOADS:
            values = [r[f"{w}_us"] for r in ok]
            ratios = [r[f"{w}_us"] / native[r["rep"]][f"{w}_us"] for r in ok if r["rep"] in native]
            nat_values = [r[f"{w}_us"] for r in native.values()]
            if values:
                med = statistics.median(values)
                entry[w] = {"median_us": med, "min_us": min(values), "max_us": max(values),
                            "ratio": statistics.median(ratios) if ratios else None,
                            "ratio_of_medians": med / statistics.median(nat_values)
                            if nat_values else None}
        out[name] = entry
    return out


def time_command(argv: list[str], env: dict[str, str]) -> float | str:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    elapsed = time.perf_counter() - t0
    return elapsed if done.returncode == 0 else f"exit {done.returncode}: {done.stderr[-500:]}"


def run_startup(bench: Path, lib: Path, region_dir: Path, reps: int,
                torch_reps: int) -> dict[str, Any]:
    configs = {"native": {},
               "lib-nolimit": {"LD_PRELOAD": str(lib),
                               "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region_dir / "s0")},
               "lib-memlimit": {"LD_PRELOAD": str(lib), "CUDA_DEVICE_MEMORY_LIMIT": "16GiB",
                                "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region_dir / "s1")}}
    programs = {"cuda-binary": ([str(bench), "--startup"], reps),
                "torch": ([sys.executable, "-c",
                           "import torch; torch.zeros(1, device='cuda')"], torch_reps)}
    out: dict[str, Any] = {}
    for prog, (argv, n) in programs.items():
        samples: dict[str, list[float]] = {name: [] for name in configs}
        errors: list[str] = []
        time_command(argv, base_env())  # warm the page cache once, not counted
        for rep in range(n):
            for name in rotated(list(configs), rep):
                got = time_command(argv, {**base_env(), **configs[name]})
                if isinstance(got, float):
                    samples[name].append(got)
                else:
                    errors.append(f"{name}: {got}")
        out[prog] = {name: {"median_s": statistics.median(v) if v else None, "samples_s": v}
                     for name, v in samples.items()}
        out[prog]["errors"] = errors
        nat = out[prog]["native"]["median_s"]
        for name in configs:
            got = out[prog][name]["median_s"]
            out[prog][name]["delta_ms"] = (got - nat) * 1e3 if nat and got else None
        print(f"  startup {prog}: " + ", ".join(
            f"{name} {out[prog][name]['median_s']}" for name in configs)
            + f", errors {len(errors)}", flush=True)
    return out


def table(result: dict[str, Any]) -> str:
    """The short text table the suite prints last."""
    lines = ["config (median us per call, vs native median)",
             "                " + "".join(f"{w:>24s}" for w in WORKLOADS)]
    for name, entry in result["hot_paths"].items():
        cells = []
        for w in WORKLOADS:
            e = entry.get(w)
            if not e:
                cells.append(f"{'n/a':>24s}")
                continue
            pct = (f"{(e['ratio_of_medians'] - 1) * 100:+.2f}%"
                   if e.get("ratio_of_medians") is not None else "?")
            cells.append(f"{e['median_us']:>12.3f}us {pct:>9s}")
        lines.append(f"{name:16s}" + "".join(cells))
    lines.append("targets: " + ", ".join(f"{w} <= {t:.0f}%" for w, t in TARGETS.items()))
    for prog, entry in result.get("startup", {}).items():
        cells = [f"{name} {e['median_s'] * 1e3:.1f} ms"
                 + (f" ({e['delta_ms']:+.1f})" if e.get("delta_ms") is not None else "")
                 for name, e in entry.items() if name != "errors" and e["median_s"]]
        lines.append(f"startup {prog:12s} " + "  ".join(cells))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, required=True, help="shim_bench binary")
    parser.add_argument("--lib", type=Path, required=True, help="libgpuslice.so")
    parser.add_argument("--out", type=Path, required=True, help="JSON result file")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--startup-reps", type=int, default=11)
    parser.add_argument("--torch-startup-reps", type=int, default=5)
    parser.add_argument("--bench-args", default="--launches 30000 --mallocs 1500 --batches 5",
                        help="shim_bench arguments (work per run)")
    args = parser.parse_args()
    for path, what in ((args.bench, "--bench"), (args.lib, "--lib")):
        if not path.is_file():
            parser.error(f"{what}={path}: no such file; build it first (benchmarks/gpu_suite.sh)")
    with tempfile.TemporaryDirectory(prefix="gs-overhead-") as tmp:
        region_dir = Path(tmp)
        print("hot paths (us per call; each line one fresh process):", flush=True)
        runs = run_hot_paths(args.bench, configurations(args.lib, region_dir), args.reps,
                             args.bench_args.split())
        result: dict[str, Any] = {"workloads": WORKLOADS, "targets_percent": TARGETS,
                                  "reps": args.reps, "bench_args": args.bench_args,
                                  "hot_paths": summarize_hot_paths(runs), "runs": runs}
        args.out.write_text(json.dumps(result, indent=1))
        print("start-up (wall time of the whole process):", flush=True)
        result["startup"] = run_startup(args.bench, args.lib, region_dir, args.startup_reps,
                                        args.torch_startup_reps)
    args.out.write_text(json.dumps(result, indent=1))
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

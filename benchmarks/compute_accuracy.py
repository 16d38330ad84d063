"""Compute-share accuracy of libgpuslice: achieved throughput / unlimited throughput per limit.
Owns: the --simulate benchmark (the library's own controller C + a fake GPU timeline, see
compute_accuracy/simgpu.c) and the real-GPU benchmark (PyTorch workers under LD_PRELOAD; the
same workloads with no limit and under MPS for comparison): solo limits, a 30/70 pair, three
tenants 20/30/50, two processes of one container, the work-conserving step response, tail
latency. Prints one table (a row per cell, a column per backend); one JSON object per case with
--json.
Does not: build the library for the GPU run (run `make -C native` first) or assert targets
(it reports; tests/native/compute/ and docs/compute.md judge).
Failure: a worker that fails is reported as {"error": ...} for its cases; MPS is always stopped.
Usage: python benchmarks/compute_accuracy.py --simulate [--json]
       python3 benchmarks/compute_accuracy.py --out DIR [--before-lib OLD.so] [--no-mps]
           [--scenarios solo,...] [--limits 10,30,50,70]   (on a GPU, after make -C native)"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LIMITS = (10, 30, 50, 70)
PHASES = ("matmul", "small", "graph", "infer")
PAIR_PHASES = "matmul,small,graph"  # two containers 30/70 on one GPU (and three, 20/30/50)
TRIO = (20, 30, 50)
PAIR_SCENARIO, TRIO_SCENARIO = "pair-30/70", "three-20/30/50"
SAME_SCENARIO = "same-container-2-procs"
# work-conserving step response: a low-priority 30 % borrower alone, then a high-priority hard
# 70 % tenant arrives; per-10 ms throughput of the arrival
STEP_SCENARIO = "work-conserving-step"
STEP_ARRIVE_S, STEP_CHUNK = 1.0, 20
SCENARIOS = ("solo", PAIR_SCENARIO, TRIO_SCENARIO, SAME_SCENARIO, STEP_SCENARIO)
WARM_S, MEASURE_S, GAP_S = 0.4, 1.2, 0.1


def _sim():
    spec = importlib.util.spec_from_file_location(
        "gs_compute_sim", HERE / "compute_accuracy" / "sim.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gs_compute_sim"] = mod
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- simulation


def sim_workloads(sim) -> dict[str, dict]:
    us = sim.US
    # shaped like the GPU run's phases (H200): 8192^3 bf16 matmul ~1.6 ms, chunks of 8;
    # 13 us adds in chunks of 200; graphs of 20 adds; an 8-kernel step with CPU between launches.
    # Each launch has a key (function + dims) with a fixed duration +-1 % (the step: 8 keys).
    key = dict(keys=1, key_fixed=True, jitter_pct=1)
    return {
        "matmul": dict(kernel_ns=(1500 * us, 1800 * us), sync_every=8, **key),
        "small": dict(kernel_ns=(11 * us, 15 * us), cpu_ns=2 * us, sync_every=200, **key),
        "graph": dict(kernel_ns=(11 * us, 15 * us), kernels_per_launch=20, sync_every=10, **key),
        "infer": dict(
            kernel_ns=(5 * us, 35 * us),
            cpu_ns=8 * us,
            sync_every=8,
            step_cpu_ns=20 * us,
            **{**key, "keys": 8},
        ),
    }


def window_error(bins: list[int], bin_ns: int, limit: int, base_rate: float) -> float:
    """Largest |share - limit| (points) over 1 s sliding windows of 100 ms bins."""
    per = max(1, 1_000_000_000 // bin_ns)
    worst = 0.0
    for i in range(len(bins) - per + 1):
        share = sum(bins[i : i + per]) / (per * bin_ns) / base_rate
        worst = max(worst, abs(share * 100 - limit))
    return round(worst, 2)


def max_window_share(bins: list[int], bin_ns: int) -> float:
    """Largest share of GPU time (0-1) the process's work took over any 1 s window."""
    per = max(1, 1_000_000_000 // bin_ns)
    sums = [sum(bins[i : i + per]) for i in range(len(bins) - per + 1)]
    return round(max(sums, default=0) / (per * bin_ns), 4)


def simulate() -> list[dict]:
    sim = _sim()
    lat = 5 * sim.US  # launch latency: reproduces the H200's small-kernel under-delivery
    cases: list[dict] = []
    for name, kw in sim_workloads(sim).items():
        base_case = sim.Case(submit_ns=lat, procs=[sim.Proc(**kw)])
        base = sim.run(base_case)[0]["work_ns"]
        rate = base / (base_case.duration_ns - base_case.warmup_ns)
        for limit in LIMITS:
            case = sim.Case(submit_ns=lat, procs=[sim.Proc(limit=limit, **kw)])
            r = sim.run(case)[0]
            cases.append(
                {
                    "mode": "simulate",
                    "scenario": "solo",
                    "workload": name,
                    "limit": limit,
                    "achieved": round(r["work_ns"] / base, 4),
                    "gpu_share": round(r["work_ns"] / (case.duration_ns - case.warmup_ns), 4),
                    "max_1s_gpu_share": max_window_share(r["bins"], case.bin_ns),
                    "unlimited_gpu_share": round(rate, 4),
                    "window_err_pts": window_error(r["bins"], case.bin_ns, limit, rate),
                    "launches_per_event_pair": round(r["launches"] / max(1, r["batches"]), 1),
                    "p50_ms": round(r["step_p50_ns"] / 1e6, 3),
                    "p99_ms": round(r["step_p99_ns"] / 1e6, 3),
                }
            )
        # two containers 30/70, GPU time-sliced between them; the last one also loses 100 us of
        # GPU time per context switch (reproduces the H200 pair: ~10 % of the GPU lost)
        for ts_ms, sw_us in ((1, 0), (2, 0), (8, 0), (2, 100)):
            case = sim.Case(
                submit_ns=lat,
                timeslice_ns=ts_ms * sim.MS,
                switch_ns=sw_us * sim.US,
                procs=[sim.Proc(limit=30, tenant=0, **kw), sim.Proc(limit=70, tenant=1, **kw)],
            )
            rs = sim.run(case)
            for lim, r in zip((30, 70), rs, strict=True):
                cases.append(
                    {
                        "mode": "simulate",
                        "scenario": f"pair-30/70-timeslice-{ts_ms}ms"
                        + (f"-switch-{sw_us}us" if sw_us else ""),
                        "workload": name,
                        "limit": lim,
                        "achieved": round(r["work_ns"] / base, 4),
                        "max_1s_gpu_share": max_window_share(r["bins"], case.bin_ns),
                    }
                )
        case = sim.Case(
            submit_ns=lat, procs=[sim.Proc(limit=lim, tenant=t, **kw) for t, lim in enumerate(TRIO)]
        )
        for lim, r in zip(TRIO, sim.run(case), strict=True):
            cases.append(
                {
                    "mode": "simulate",
                    "scenario": TRIO_SCENARIO,
                    "workload": name,
                    "limit": lim,
                    "achieved": round(r["work_ns"] / base, 4),
                    "max_1s_gpu_share": max_window_share(r["bins"], case.bin_ns),
                }
            )
        case = sim.Case(submit_ns=lat, procs=[sim.Proc(limit=50, tenant=0, **kw) for _ in range(2)])
        each = [r["work_ns"] / base for r in sim.run(case)]
        cases.append(
            {
                "mode": "simulate",
                "scenario": SAME_SCENARIO,
                "workload": name,
                "limit": 50,
                "achieved": round(sum(each), 4),
                "per_process": [round(x, 4) for x in each],
            }
        )
    cases += simulate_step(sim, lat)
    return cases


def reach_ms(shares: list[float], bin_ms: float, target: float) -> float | None:
    """Time (ms after arrival) from which every 50 ms window of the arriving tenant's
    throughput stays within 3 points of its limit or above; None if it never does."""
    per = max(1, round(50 / bin_ms))
    means = [sum(shares[i : i + per]) / per for i in range(len(shares) - per + 1)]
    for i in range(len(means)):
        if all(m >= target - 0.03 for m in means[i:]):
            return round(i * bin_ms, 1)
    return None


def step_summary(share: list[float], low: list[float], at: int) -> dict:
    """The step response from 10 ms bins: `share` = the arrival's throughput from its arrival,
    `low` = the borrower's from the start, `at` = the arrival's bin in `low`."""
    alone, after = low[10:at], low[at + 10 :]  # skip each side's first 100 ms
    return {
        "achieved": round(sum(share[10:]) / len(share[10:]), 4),
        "reach_ms": reach_ms(share, 10, 0.70),
        "reach_steady_ms": reach_ms(share, 10, sum(share[50:]) / len(share[50:])),
        "first_100ms": [round(x, 2) for x in share[:10]],
        "borrower_alone": round(sum(alone) / len(alone), 4),
        "borrower_first_50ms": [round(x, 2) for x in low[at : at + 5]],
        "borrower_after": round(sum(after) / len(after), 4),
    }


def simulate_step(sim, lat: int) -> list[dict]:
    """Work-conserving step response: a low-priority 30 % tenant borrows the idle GPU, a
    high-priority hard 70 % tenant arrives at 1.5 s; 10 ms bins of the arrival's throughput."""
    kw = sim_workloads(sim)["small"]
    bin_ns, arrive = 10 * sim.MS, 1500 * sim.MS
    base_case = sim.Case(submit_ns=lat, procs=[sim.Proc(**kw)])
    rate = sim.run(base_case)[0]["work_ns"] / (base_case.duration_ns - base_case.warmup_ns)
    case = sim.Case(
        submit_ns=lat,
        bin_ns=bin_ns,
        warmup_ns=500 * sim.MS,
        duration_ns=3000 * sim.MS,
        procs=[
            sim.Proc(limit=30, tenant=0, work_conserving=True, priority=1, **kw),
            sim.Proc(limit=70, tenant=1, priority=0, start_ns=arrive, **kw),
        ],
    )
    low, high = (
        [b / bin_ns / rate for b in r["bins"][:-1]] for r in sim.run(case)
    )  # the last bin may be partial
    at = (arrive - case.warmup_ns) // bin_ns
    case = {"mode": "simulate", "scenario": STEP_SCENARIO, "workload": "small", "limit": 70}
    return [case | step_summary(high[at:], low, at)]


# ---------------------------------------------------------------- GPU worker


class _Clocks:
    """Samples the SM clock (MHz) and board power (W) of GPU 0 through NVML (ctypes) every
    20 ms while a phase is measured, with the clock-event reasons seen; absent NVML -> no
    samples (fields omitted)."""

    def __init__(self) -> None:
        import ctypes
        import threading

        self.samples: list[tuple[int, int]] = []
        self._on = threading.Event()
        self._nvml = None
        self.reasons = 0  # NVML clocks event reasons seen during the phase (bitmask)
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            handle = ctypes.c_void_p()
            if (
                nvml.nvmlInit_v2() == 0
                and nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
            ):
                self._nvml, self._handle = nvml, handle
        except OSError:
            return
        if self._nvml:
            threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        import ctypes

        mhz, mw, why = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        while True:
            time.sleep(0.02)
            if not self._on.is_set():
                continue
            ok = self._nvml.nvmlDeviceGetClockInfo(self._handle, 1, ctypes.byref(mhz)) == 0
            if ok and self._nvml.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(mw)) == 0:
                self.samples.append((mhz.value, mw.value))
            if (
                self._nvml.nvmlDeviceGetCurrentClocksEventReasons(self._handle, ctypes.byref(why))
                == 0
            ):
                self.reasons |= why.value

    def start(self) -> None:
        self.samples = []
        self.reasons = 0
        self._on.set()

    def stop(self) -> dict:
        self._on.clear()
        s = list(self.samples)
        if not s:
            return {}
        out = {
            "sm_mhz": round(sum(a for a, _ in s) / len(s)),
            "power_w": round(sum(b for _, b in s) / len(s) / 1000),
            "clock_reasons": hex(self.reasons),
        }
        return out

    def call_costs(self) -> dict:
        """Mean µs per call of the NVML reads a clock-aware budget could use."""
        import ctypes

        if not self._nvml:
            return {}
        u, ull = ctypes.c_uint(), ctypes.c_ulonglong()
        calls = {
            "clock": lambda: self._nvml.nvmlDeviceGetClockInfo(self._handle, 1, ctypes.byref(u)),
            "power": lambda: self._nvml.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(u)),
            "energy": lambda: self._nvml.nvmlDeviceGetTotalEnergyConsumption(
                self._handle, ctypes.byref(ull)
            ),
            "power_limit": lambda: self._nvml.nvmlDeviceGetEnforcedPowerLimit(
                self._handle, ctypes.byref(u)
            ),
            "clock_reasons": lambda: self._nvml.nvmlDeviceGetCurrentClocksEventReasons(
                self._handle, ctypes.byref(ull)
            ),
        }
        out = {}
        for name, call in calls.items():
            t0 = time.perf_counter()
            ok = all(call() == 0 for _ in range(200))
            out[name] = round((time.perf_counter() - t0) / 200 * 1e6, 2) if ok else None
        self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle, ctypes.byref(u))
        out["enforced_limit_w"] = u.value / 1000
        return out


def _worker(args: argparse.Namespace) -> None:
    """Runs inside one process (maybe under LD_PRELOAD): every phase on a fixed wall schedule."""
    import torch

    dev = torch.device("cuda")
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device=dev, dtype=torch.bfloat16)
    x = torch.zeros(8 * 1024 * 1024, device=dev)
    g_x = torch.zeros(4 * 1024 * 1024, device=dev)
    layers = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) for _ in range(4)]
    inp = torch.randn(512, 4096, device=dev, dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            g_x.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            g_x.add_(1.0)
    torch.cuda.synchronize()

    def matmul() -> None:
        torch.mm(a, b, out=c)

    def small() -> None:
        x.add_(1.0)

    def replay() -> None:
        graph.replay()

    def infer() -> None:
        h = inp
        for w in layers:
            h = torch.relu(h @ w)

    region = (
        os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE", "")
        if os.environ.get("LD_PRELOAD")
        else ""
    )

    def busy_ns(offset: int = 16) -> int:  # device 0's compute block: busy_ns@16, corrected@72
        if not region:
            return 0
        with open(region, "rb") as f:
            f.seek(4096 + 256 + offset)
            return int.from_bytes(f.read(8), "little")

    fns = {
        "matmul": (matmul, 8),
        "small": (small, 200),
        "graph": (replay, 10),
        "infer": (infer, 1),
        "adds20": (small, STEP_CHUNK),  # the step response's loop, unlimited
    }
    out: dict[str, dict] = {}
    clocks = _Clocks()
    if args.nvml_costs:
        out["nvml_call_us"] = clocks.call_costs()
    barrier = Path(args.barrier)  # all workers of a slot start their schedule together
    (barrier / f"ready-{os.getpid()}").touch()
    deadline = time.time() + 60
    while len(list(barrier.glob("ready-*"))) < args.n and time.time() < deadline:
        time.sleep(0.01)
    start = max(p.stat().st_mtime for p in barrier.glob("ready-*")) + 0.2
    for i, phase in enumerate(args.phases.split(",")):
        t_phase = start + i * (WARM_S + MEASURE_S + GAP_S)
        if phase in ("stepA", "stepB"):
            out[phase] = _step_phase(phase, small, t_phase)
            continue
        fn, chunk = fns[phase]
        while time.time() < t_phase:
            time.sleep(0.002)
        while time.time() < t_phase + WARM_S:
            for _ in range(chunk):
                fn()
            torch.cuda.synchronize()
        t0, busy0, corr0 = time.perf_counter(), busy_ns(), busy_ns(72)
        clocks.start()
        iters, steps, marks = 0, [], []
        while True:
            s0 = time.perf_counter()
            for _ in range(chunk):
                fn()
            torch.cuda.synchronize()
            s1 = time.perf_counter()
            iters += chunk
            steps.append(s1 - s0)
            marks.append((s1 - t0, iters))
            if s1 - t0 >= MEASURE_S:
                break
        elapsed = marks[-1][0]
        clock = clocks.stop()
        bins = [0] * 15  # iterations per 100 ms
        prev = 0
        for t, n in marks:
            bins[min(14, int(t / 0.1))] += n - prev
            prev = n
        steps.sort()
        out[phase] = {
            "rate": iters / elapsed,
            "iters": iters,
            "bins": bins,
            "gpu_time_share": (busy_ns() - busy0) / 1e9 / elapsed,
            "corrected_share": (busy_ns(72) - corr0) / 1e9 / elapsed,
            "p50_ms": steps[len(steps) // 2] * 1e3,
            "p99_ms": steps[(len(steps) * 99) // 100] * 1e3,
            **clock,
        }
    Path(args.result).write_text(json.dumps(out))


def _step_phase(phase: str, small, t_phase: float) -> dict:
    """stepA (the borrower) runs from WARM_S on; stepB warms up with it, stays idle, and arrives
    STEP_ARRIVE_S later. Iterations per 10 ms bin from STEP_ARRIVE_S before to 1 s after."""
    import torch

    while time.time() < t_phase:
        time.sleep(0.002)
    while time.time() < t_phase + WARM_S:  # both warm up (then B is silent: A borrows again)
        for _ in range(STEP_CHUNK):
            small()
        torch.cuda.synchronize()
    t_arrive = t_phase + WARM_S + GAP_S + STEP_ARRIVE_S
    t_begin = t_arrive - (STEP_ARRIVE_S if phase == "stepA" else 0.0)
    while time.time() < t_begin:
        time.sleep(0.001)
    bins = [0] * int((t_arrive + 1.0 - t_begin) / 0.01)
    while time.time() < t_arrive + 1.0:
        for _ in range(STEP_CHUNK):
            small()
        torch.cuda.synchronize()
        bins[min(len(bins) - 1, int((time.time() - t_begin) / 0.01))] += STEP_CHUNK
    return {"bins_10ms": bins}


# ---------------------------------------------------------------- GPU driver


def _spawn(env_extra: dict[str, str], phases: str, barrier: Path, n: int, result: Path, log: Path):
    env = dict(os.environ)
    env.update(env_extra)
    phases = env.pop("GS_BENCH_PHASES", phases)  # a worker of a slot may run other phases
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--phases",
        phases,
        "--barrier",
        str(barrier),
        "--n",
        str(n),
        "--result",
        str(result),
        *(["--nvml-costs"] if env.pop("GS_BENCH_NVML_COSTS", "") else []),
    ]
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _run_slot(workers: list[dict[str, str]], phases: str, outdir: Path, tag: str) -> list[dict]:
    """Start the workers together; each gets `env`; returns their result dicts (or errors)."""
    barrier = Path(tempfile.mkdtemp(prefix=f"gs-barrier-{tag}-"))
    procs = []
    for i, env in enumerate(workers):
        res, log = outdir / f"{tag}-{i}.json", outdir / f"{tag}-{i}.log"
        procs.append((_spawn(env, phases, barrier, len(workers), res, log), res, log))
    results = []
    for p, res, log in procs:
        try:
            rc = p.wait(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = -9
        if rc == 0 and res.exists():
            results.append(json.loads(res.read_text()))
        else:
            results.append({"error": f"worker rc={rc}: " + log.read_text()[-800:]})
    return results


def _lib_env(limit: int, region: Path, board: Path, lib: Path) -> dict[str, str]:
    return {
        "LD_PRELOAD": str(lib),
        "CUDA_DEVICE_SM_LIMIT": str(limit),
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(region),
        "GPUSLICE_BOARD_DIR": str(board),
        "LIBCUDA_LOG_LEVEL": os.environ.get("LIBCUDA_LOG_LEVEL", "2"),
    }


def _cases(
    backend: str, scenario: str, limits: list[int], results: list[dict], base: dict, phases: str
) -> list[dict]:
    cases = []
    for limit, res in zip(limits, results, strict=True):
        for phase in phases.split(","):
            case = {
                "mode": "gpu",
                "backend": backend,
                "scenario": scenario,
                "workload": phase,
                "limit": limit,
            }
            if "error" in res or "error" in base:
                case["error"] = res.get("error") or base.get("error")
            else:
                r, b = res[phase], base[phase]
                case["achieved"] = round(r["rate"] / b["rate"], 4)
                if r.get("gpu_time_share"):
                    case["measured_gpu_share"] = round(r["gpu_time_share"], 4)
                    # other contexts' slices taken out of this tenant's batches (share of wall)
                    case["corrected_share"] = round(r.get("corrected_share", 0.0), 4)
                    # library-measured GPU us per iteration vs unlimited wall us per iteration
                    case["lib_us_per_iter"] = round(r["gpu_time_share"] / r["rate"] * 1e6, 2)
                case["unlimited_us_per_iter"] = round(1e6 / b["rate"], 2)
                for k in ("sm_mhz", "power_w", "clock_reasons"):
                    if k in r:
                        case[k] = r[k]
                per_bin = [n / (b["rate"] * 0.1) for n in r["bins"][:-1]]
                case["bin_share_min_max"] = [round(min(per_bin), 3), round(max(per_bin), 3)]
                case["p50_ms"], case["p99_ms"] = round(r["p50_ms"], 3), round(r["p99_ms"], 3)
            cases.append(case)
    return cases


def _lib_slots(backend: str, lib: Path, tmp: Path, board: Path, limits: list[int]) -> list[tuple]:
    """(backend, scenario, limits, worker envs, phases) of every slot of one library build."""

    def env(limit: int, region: str, **extra: str) -> dict[str, str]:
        return {**_lib_env(limit, tmp / f"{backend}-{region}.region", board, lib), **extra}

    all_phases = ",".join(PHASES)
    slots = [(backend, "solo", [lim], [env(lim, f"solo{lim}")], all_phases) for lim in limits]
    slots += [
        (backend, PAIR_SCENARIO, [30, 70], [env(30, "a"), env(70, "b")], PAIR_PHASES),
        (backend, TRIO_SCENARIO, list(TRIO), [env(x, f"t{x}") for x in TRIO], PAIR_PHASES),
        (backend, SAME_SCENARIO, [50, 50], [env(50, "same")] * 2, "matmul,small,graph"),
    ]
    step = [
        env(30, "borrower", GPUSLICE_COMPUTE_MODE="work-conserving", CUDA_TASK_PRIORITY="1",
            GS_BENCH_PHASES="stepA"),
        env(70, "arrival", CUDA_TASK_PRIORITY="0", GS_BENCH_PHASES="stepB"),
    ]  # fmt: skip
    return [*slots, (backend, STEP_SCENARIO, [30, 70], step, "")]


def _mps_slots(client: dict[str, str]) -> list[tuple]:
    def env(pct: int) -> dict[str, str]:
        return {**client, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}

    slots = [("mps", "solo", [lim], [env(lim)], ",".join(PHASES)) for lim in LIMITS]
    return [
        *slots,
        ("mps", PAIR_SCENARIO, [30, 70], [env(30), env(70)], PAIR_PHASES),
        ("mps", TRIO_SCENARIO, list(TRIO), [env(x) for x in TRIO], PAIR_PHASES),
        # MPS limits each client, not a container: two clients at 50 % each
        ("mps", SAME_SCENARIO, [50, 50], [env(50)] * 2, "matmul,small,graph"),
    ]


def _same_cases(backend: str, results: list[dict], base: dict, phases: str) -> list[dict]:
    cases = []
    for phase in phases.split(","):
        case = {"mode": "gpu", "backend": backend, "scenario": SAME_SCENARIO}
        case |= {"workload": phase, "limit": 50}
        if any("error" in r for r in [*results, base]):
            case["error"] = next(r["error"] for r in [*results, base] if "error" in r)
        else:
            each = [r[phase]["rate"] / base[phase]["rate"] for r in results]
            case["achieved"] = round(sum(each), 4)
            case["per_process"] = [round(x, 4) for x in each]
        cases.append(case)
    return cases


def _step_cases(backend: str, results: list[dict], base: dict) -> list[dict]:
    case = {"mode": "gpu", "backend": backend, "scenario": STEP_SCENARIO, "workload": "small"}
    case["limit"] = 70
    if any("error" in r for r in [*results, base]):
        return [case | {"error": next(r["error"] for r in [*results, base] if "error" in r)}]
    per_bin = base["adds20"]["rate"] * 0.01  # unlimited iterations per 10 ms of the same loop
    low, high = (
        [n / per_bin for n in r[k]["bins_10ms"][:-1]]  # the last bin may be partial
        for r, k in zip(results, ("stepA", "stepB"), strict=True)
    )
    return [case | step_summary(high, low, int(STEP_ARRIVE_S * 100))]


def gpu(
    outdir: Path, mps: bool, limits: list[int], before_lib: Path | None, scenarios: set[str]
) -> list[dict]:
    lib = ROOT / "native" / "build" / "libgpuslice.so"
    for path in (lib, before_lib):
        if path and not path.exists():
            raise SystemExit(f"gpuslice: error: {path} not built; run `make -C native` first")
    tmp = Path(tempfile.mkdtemp(prefix="gs-compute-"))
    board = tmp / "board"
    board.mkdir()
    base_phases = ",".join([*PHASES, "adds20"])
    base = _run_slot([{"GS_BENCH_NVML_COSTS": "1"}], base_phases, outdir, "base")[0]
    cases = _cases("none", "unlimited", [100], [base], base, ",".join(PHASES))
    if "nvml_call_us" in base:
        cases.append({"mode": "gpu", "backend": "none", "scenario": "nvml-call-us",
                      **base["nvml_call_us"]})  # fmt: skip
    slots = _lib_slots("gpuslice", lib, tmp, board, limits)
    if before_lib:  # the previous build, same GPU, same run
        slots += _lib_slots("gpuslice-before", before_lib, tmp, board, limits)
    # the same pairs without any limit: what time-slicing alone leaves each side
    slots += [("no-limit", PAIR_SCENARIO, [30, 70], [{}, {}], PAIR_PHASES)]
    slots += [("no-limit", TRIO_SCENARIO, list(TRIO), [{}, {}, {}], PAIR_PHASES)]
    cases += _run_slots([x for x in slots if x[1] in scenarios], outdir, base)
    if mps:
        cases += _gpu_mps(outdir, tmp, base, scenarios)
    return cases


def _run_slots(slots: list[tuple], outdir: Path, base: dict) -> list[dict]:
    cases = []
    for backend, scenario, limits, envs, phases in slots:
        tag = f"{backend}-{scenario}-{limits[0]}".replace("/", "_")
        res = _run_slot(envs, phases, outdir, tag)
        if scenario == SAME_SCENARIO:
            cases += _same_cases(backend, res, base, phases)
        elif scenario == STEP_SCENARIO:
            cases += _step_cases(backend, res, base)
        else:
            cases += _cases(backend, scenario, limits, res, base, phases)
    return cases


def _gpu_mps(outdir: Path, tmp: Path, base: dict, scenarios: set[str]) -> list[dict]:
    pipe, logd = tmp / "mps-pipe", tmp / "mps-log"
    pipe.mkdir()
    logd.mkdir()
    menv = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(logd))
    started = (
        subprocess.run(["nvidia-cuda-mps-control", "-d"], env=menv, check=False).returncode == 0
    )
    try:
        if not started:
            return [{"mode": "gpu", "backend": "mps", "error": "nvidia-cuda-mps-control -d failed"}]
        client = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logd)}
        return _run_slots([x for x in _mps_slots(client) if x[1] in scenarios], outdir, base)
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n", env=menv, check=False)


# ---------------------------------------------------------------- output


def _cell(case: dict) -> str:
    """One backend's figure for one row: achieved, with what else the row is about."""
    if "error" in case:
        return "error"
    text = f"{case['achieved']:.3f}" if "achieved" in case else ""
    if "per_process" in case:
        text += " (" + " + ".join(f"{x:.3f}" for x in case["per_process"]) + ")"
    if case.get("scenario") == STEP_SCENARIO:
        text += (
            f" reach limit {case['reach_ms']} ms, steady {case['reach_steady_ms']} ms;"
            f" borrower alone {case['borrower_alone']:.2f}"
        )
    if case.get("workload") == "infer" and "p99_ms" in case:
        text += f" p50/p99 {case['p50_ms']:.3f}/{case['p99_ms']:.3f} ms"
    return text


def print_table(cases: list[dict]) -> None:
    """One row per cell (scenario, workload, limit), one column per backend, side by side."""
    rows: dict[tuple, dict[str, str]] = {}
    backends: list[str] = []
    for case in cases:
        if "workload" not in case or case.get("scenario") == "unlimited":
            continue
        backend = case.get("backend", case["mode"])
        if backend not in backends:
            backends.append(backend)
        key = (case["scenario"], case["workload"], case["limit"])
        rows.setdefault(key, {})[backend] = _cell(case)
    head = ["scenario", "workload", "limit", "target", *backends]
    table = [
        [sc, wl, str(lim), f"{lim / 100:.2f}", *(cells.get(b, "") for b in backends)]
        for (sc, wl, lim), cells in rows.items()
    ]
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(head)]
    for r in [head, *table]:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    for case in cases:  # what is not a cell: NVML call costs, unlimited latency
        if case.get("scenario") == "nvml-call-us":
            print("NVML µs per call:", {k: v for k, v in case.items() if k not in ("mode",
                  "backend", "scenario")})  # fmt: skip
        elif case.get("scenario") == "unlimited" and case.get("workload") == "infer":
            print(f"unlimited inference step p50/p99 {case['p50_ms']}/{case['p99_ms']} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="fake GPU timeline, no GPU needed")
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    ap.add_argument("--out", type=Path, default=None, help="GPU run: directory for logs/results")
    ap.add_argument("--no-mps", action="store_true", help="GPU run: skip the MPS comparison")
    ap.add_argument(
        "--limits",
        default=",".join(map(str, LIMITS)),
        help="GPU run: solo limits to measure (comma list)",
    )
    ap.add_argument(
        "--before-lib",
        type=Path,
        default=None,
        help="GPU run: also run every library scenario with this libgpuslice.so (an older build)",
    )
    ap.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help="GPU run: scenarios to run (comma list; the unlimited baseline always runs)",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--phases", default=",".join(PHASES), help=argparse.SUPPRESS)
    ap.add_argument("--barrier", default="", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--result", default="", help=argparse.SUPPRESS)
    ap.add_argument("--nvml-costs", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    if args.simulate:
        cases = simulate()
    else:
        outdir = args.out or Path(tempfile.mkdtemp(prefix="gs-compute-out-"))
        outdir.mkdir(parents=True, exist_ok=True)
        try:
            limits = [int(x) for x in args.limits.split(",") if x.strip()]
        except ValueError:
            raise SystemExit(
                f"gpuslice: error: --limits {args.limits!r}: give percentages like 10,30,50,70"
            ) from None
        scenarios = {x.strip() for x in args.scenarios.split(",") if x.strip()}
        if unknown := scenarios - set(SCENARIOS):
            raise SystemExit(
                f"gpuslice: error: --scenarios: unknown {sorted(unknown)}; choose from {SCENARIOS}"
            )
        cases = gpu(outdir, not args.no_mps, limits, args.before_lib, scenarios)
        (outdir / "cases.json").write_text("\n".join(json.dumps(c) for c in cases) + "\n")
    if args.json:
        for case in cases:
            print(json.dumps(case))
    else:
        print_table(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())

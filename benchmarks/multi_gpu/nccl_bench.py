"""NCCL under libgpuslice (issue 14 item 2): all-reduce bandwidth and a small DDP step, one rank
per GPU, with NCCL's own memory checked against NVML per process.

Owns: what one `torchrun --nproc-per-node N` run measures. Whether the library is loaded, and
with which caps and compute limit, is the environment's business (benchmarks/multi_gpu/run.sh
runs this without the library, with memory caps, and with caps + a compute limit); overhead =
1 - with/without is computed by summarize.py from the JSON of each run.
Measures: all-reduce (float32, sum) bus bandwidth for 1 MiB-1 GiB, as nccl-tests defines it
(algbw = bytes / time, busbw = algbw * 2(n-1)/n), the median of --reps timings of --iters
back-to-back calls (CUDA events, the slowest rank's time); a DDP training step (ms, median);
per rank and phase (context, NCCL up, after the all-reduces, after DDP): NVML's used memory
for the process on its GPU, what the region accounts to it there (when the library runs),
and PyTorch's reserved bytes (NVML - reserved - context = NCCL's own buffers and modules).
Per rank under a compute limit (issue 21): its longest hold of one launch and how far one hold
went past what it owed (the region's hold_max_ns / hold_over_debt_ns), and its share of time held.
`--backend gloo --same-gpu`: every rank on GPU 0 (NCCL refuses two ranks on one GPU), the
collectives through gloo; the DDP step is the same.
Checks (exit 1): every all-reduce sums right; DDP replicas stay identical.
Safety: NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1 are set here; another value in the environment is refused).
Usage: torchrun --nproc-per-node 2 benchmarks/multi_gpu/nccl_bench.py --label plain --out F
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# NVLink multicast can put a shared host's GPUs out of service (device docs, KINDS.md)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}
MiB = 1 << 20
SIZES_MIB = tuple(1 << i for i in range(11))  # 1 MiB .. 1 GiB


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9) of one all-reduce, as nccl-tests reports them."""
    alg = nbytes / seconds / 1e9
    return alg, alg * 2 * (ranks - 1) / ranks


def _safe_env() -> None:
    bad = {k: os.environ[k] for k, v in SAFE_ENV.items() if os.environ.get(k, v) != v}
    if bad:
        sys.exit(f"nccl_bench: error: {bad} would allow NVLink multicast; unset them or set "
                 f"{SAFE_ENV}")
    os.environ.update(SAFE_ENV)


def _digits(uuid: str) -> str:
    """A GPU UUID's hex digits: NVML writes `GPU-` and dashes, PyTorch its own format."""
    return re.sub(r"[^0-9a-f]", "", uuid.lower().removeprefix("gpu-"))


# native/include/gpuslice/region.h: slots after the header and 16 device entries, 384 bytes
# each, pid first, compute block at 288 (compute_shared.h: throttle_ns @8, throttled @24,
# hold_max_ns @48, hold_over_debt_ns @56)
SLOTS_AT, SLOT_BYTES, COMPUTE_AT = 4096 + 16 * 512, 384, 288


def holds(region: str | None) -> dict[str, float] | None:
    """This process's hold statistics in the region (None without the library)."""
    if not region or not Path(region).is_file():
        return None
    import struct

    data = Path(region).read_bytes()
    for at in range(SLOTS_AT, len(data) - SLOT_BYTES + 1, SLOT_BYTES):
        if struct.unpack_from("<i", data, at)[0] == os.getpid():
            c = at + COMPUTE_AT
            (throttle,), (throttled,) = (struct.unpack_from("<Q", data, c + off) for off in (8, 24))
            hold_max, over = struct.unpack_from("<Qq", data, c + 48)
            return {"throttled_s": throttle / 1e9, "throttled": throttled,
                    "hold_max_ms": hold_max / 1e6, "hold_over_debt_ms": over / 1e6}
    return None


class Memory:
    """This rank's memory on its GPU: NVML per process, the region's account, PyTorch's."""

    def __init__(self, torch: Any, local: int) -> None:
        import pynvml

        self.torch, self.nvml = torch, pynvml
        pynvml.nvmlInit()
        mine = _digits(str(getattr(torch.cuda.get_device_properties(local), "uuid", "")))
        self.gpus: dict[str, Any] = {}  # uuid -> NVML handle, NVML order
        self.uuid = ""
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            u = pynvml.nvmlDeviceGetUUID(h)
            u = u.decode() if isinstance(u, bytes) else u
            self.gpus[u] = h
            if _digits(u) == mine or (not mine and i == local):
                self.uuid = u
        self.region = os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE") \
            if os.environ.get("LD_PRELOAD") else None

    def _nvml(self, uuid: str) -> int | None:
        for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.gpus[uuid]):
            if p.pid == os.getpid():
                return int(p.usedGpuMemory or 0)
        return None

    def _accounted(self) -> dict[str, int]:
        """uuid -> bytes the region accounts to this process (empty without the library)."""
        if not self.region or not Path(self.region).exists():
            return {}
        from gpuslice.shim import Region  # PYTHONPATH=src; stdlib only

        region = Region.read(self.region)
        me = next((p for p in region.processes if p.pid == os.getpid() and p.state == "live"),
                  None)
        return {d.uuid: int(me.used[d.index]) for d in region.devices if d.uuid and me}

    def sample(self, phase: str) -> dict[str, Any]:
        """This process on its GPU, and on any other GPU where NVML or the region shows it
        (a rank with a context on its peer's GPU would be charged there)."""
        self.torch.cuda.synchronize()
        time.sleep(0.15)  # the library re-reads driver memory at most every 100 ms
        self.torch.cuda.synchronize()
        acc = self._accounted()
        nvml = {u: self._nvml(u) for u in self.gpus}
        mine_nvml, mine_acc = nvml.get(self.uuid), acc.get(self.uuid)
        elsewhere = {u: {"nvml": nvml[u], "accounted": acc.get(u)} for u in self.gpus
                     if u != self.uuid and (nvml[u] or acc.get(u))}
        return {"phase": phase, "nvml": mine_nvml, "accounted": mine_acc,
                "reserved": int(self.torch.cuda.memory_reserved()),
                "accounted_minus_nvml": None if mine_nvml is None or mine_acc is None
                else mine_acc - mine_nvml, "elsewhere": elsewhere}


def _time_all_reduce(torch: Any, dist: Any, buf: Any, iters: int, reps: int) -> float:
    """Seconds per all-reduce: the median over reps of the slowest rank's mean."""
    times = []
    for _ in range(reps):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buf)
        end.record()
        end.synchronize()
        t = torch.tensor([start.elapsed_time(end) / 1e3 / iters], device=buf.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(float(t))
    return statistics.median(times)


def all_reduce_sweep(torch: Any, dist: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    n, rank = dist.get_world_size(), dist.get_rank()
    out = []
    for mib in args.sizes:
        buf = torch.full((mib * MiB // 4,), float(rank + 1), device="cuda")
        dist.all_reduce(buf)  # checked once: every element is 1 + 2 + ... + n
        want = n * (n + 1) / 2
        if not bool((buf == want).all()):
            raise RuntimeError(f"all-reduce of {mib} MiB gave a wrong sum (want {want})")
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sec = _time_all_reduce(torch, dist, buf, args.iters, args.reps)
        alg, bus = bus_bandwidth(mib * MiB, sec, n)
        out.append({"bytes": mib * MiB, "time_us": sec * 1e6, "algbw_gbs": alg, "busbw_gbs": bus})
        del buf
    torch.cuda.synchronize()
    return out


def ddp_step(torch: Any, dist: Any, args: argparse.Namespace) -> dict[str, Any]:
    """A small MLP trained with DDP: median step time; replicas must stay identical."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    width = args.ddp_width
    layers: list[Any] = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.GELU()]
    model = DistributedDataParallel(nn.Sequential(*layers).cuda())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(dist.get_rank())
    x = torch.randn(args.ddp_batch, width, device="cuda", generator=gen)
    steps = []
    for i in range(args.ddp_steps + 5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= 5:  # warm-up steps build DDP's buckets and cuBLAS's plans
            steps.append(time.perf_counter() - t0)
    check = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum()
    lo, hi = check.clone(), check.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    if float(hi - lo) != 0.0:
        raise RuntimeError(f"DDP replicas differ after {len(steps) + 5} steps ({float(lo)} vs "
                           f"{float(hi)})")
    params = sum(p.numel() for p in model.parameters())
    del model, opt
    return {"params": params, "batch": args.ddp_batch, "steps": len(steps),
            "step_ms_median": statistics.median(steps) * 1e3, "step_ms_min": min(steps) * 1e3,
            "step_ms_mean": statistics.fmean(steps) * 1e3, "step_ms_max": max(steps) * 1e3,
            "loss": float(loss)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default="run", help="name of this configuration in the JSON")
    p.add_argument("--out", help="rank 0 also writes the JSON here")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                   default=list(SIZES_MIB), help="all-reduce sizes in MiB (default 1,2,..,1024)")
    p.add_argument("--iters", type=int, default=20, help="all-reduces per timing")
    p.add_argument("--reps", type=int, default=5, help="timings per size (median reported)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--ddp-steps", type=int, default=30)
    p.add_argument("--ddp-width", type=int, default=4096)
    p.add_argument("--ddp-batch", type=int, default=256)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--same-gpu", action="store_true",
                   help="every rank on GPU 0 (with --backend gloo: NCCL refuses it)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _safe_env()
    import torch
    import torch.distributed as dist

    local = 0 if args.same_gpu else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    torch.empty(1, device="cuda")  # the context, before NCCL's
    mem = Memory(torch, local)
    phases = [mem.sample("context")]
    if args.backend == "nccl":
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()  # the first collective brings NCCL's communicator up
    phases.append(mem.sample("nccl_up"))
    result: dict[str, Any] = {"label": args.label, "ranks": dist.get_world_size(),
                              "backend": args.backend, "same_gpu": args.same_gpu,
                              "sm_limit": int(os.environ.get("CUDA_DEVICE_SM_LIMIT", "0") or 0)
                              if os.environ.get("LD_PRELOAD") else 0}
    failed = None
    try:
        t0 = time.perf_counter()
        result["all_reduce"] = all_reduce_sweep(torch, dist, args)
        result["all_reduce_s"] = time.perf_counter() - t0
        phases.append(mem.sample("after_all_reduce"))
        result["ddp"] = ddp_step(torch, dist, args)
        phases.append(mem.sample("after_ddp"))
    except RuntimeError as exc:  # a CUDA/NCCL error or a failed check: reported, exit 1
        failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:400]}"
        result["error"] = failed
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"rank": rank, "pid": os.getpid(), "gpu": mem.uuid,
                                      "memory": phases, "error": failed,
                                      "holds": holds(mem.region)})
    result["per_rank"] = gathered
    result["env"] = {k: v for k, v in sorted(os.environ.items())
                     if k in SAFE_ENV or k == "LD_PRELOAD" or k.startswith(("CUDA_", "GPUSLICE_"))}
    nccl = torch.cuda.nccl.version()
    result["versions"] = {"torch": torch.__version__, "nccl": ".".join(map(str, nccl))
                          if isinstance(nccl, tuple) else str(nccl)}
    if rank == 0:
        text = json.dumps(result, indent=1)
        print(text, flush=True)
        if args.out:
            Path(args.out).write_text(text + "\n")
    dist.destroy_process_group()
    return 1 if any(r["error"] for r in gathered) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Real-GPU PyTorch probe for libgpuslice (run by native/tools/gpu_check.sh; not CI).

Prints one JSON line: torch.cuda.mem_get_info() under the cap, how much it could allocate in 256 MiB
tensors before OutOfMemoryError, NVML's per-process used memory vs the region's accounted bytes,
and NVML memory info as this process sees it. argv[1]: a label; argv[2] (optional): hold seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch


def nvml_numbers() -> dict[str, int | None]:
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    mine = None
    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
        if p.pid == os.getpid():
            mine = p.usedGpuMemory
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    return {"nvml_proc_used": mine, "nvml_total": mem.total, "nvml_used": mem.used,
            "nvml_free": mem.free}


def accounted() -> int | None:
    path = os.environ.get("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    if not path or not os.path.exists(path):
        return None
    from gpuslice.shim import Region

    return Region.read(path).devices[0].used


def main() -> None:
    label = sys.argv[1]
    hold = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    size = int(os.environ.get("PROBE_CHUNK_MIB", "256")) << 20
    out: dict[str, object] = {"label": label, "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
    x = torch.randn(1024, 1024, device="cuda")
    out["matmul_ok"] = bool(torch.isfinite((x @ x).sum()).item())
    free, total = torch.cuda.mem_get_info()
    out["mem_get_info_MiB"] = [free >> 20, total >> 20]
    out["after_ctx"] = {"accounted_MiB": (accounted() or 0) >> 20, **nvml_numbers()}
    chunks = []
    try:
        limit = int(os.environ.get("PROBE_MAX_CHUNKS", "100000"))
        while len(chunks) < limit:
            chunks.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as exc:
        out["oom"] = str(exc).splitlines()[0][:200]
    torch.cuda.synchronize()
    out["allocated_MiB"] = len(chunks) * (size >> 20)
    out["torch_reserved_MiB"] = torch.cuda.memory_reserved() >> 20
    nv = nvml_numbers()
    acc = accounted()
    out["at_peak"] = {"accounted": acc, **nv}
    if acc is not None and nv["nvml_proc_used"] is not None:
        out["at_peak"]["nvml_minus_accounted_MiB"] = (nv["nvml_proc_used"] - acc) / 2**20
    print(json.dumps(out), flush=True)
    if hold:
        time.sleep(hold)


if __name__ == "__main__":
    main()

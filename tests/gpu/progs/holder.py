"""Child process of the GPU tests: allocates device memory on command and says what happened.

Owns: one CUDA context in this process and the allocations the parent asks for, through either
PyTorch (`--api torch`, the caching allocator chosen by PYTORCH_CUDA_ALLOC_CONF) or the driver API
via ctypes on `libcuda.so.1` (`--api driver`: dlopen+dlsym, the path a dlsym hook must catch).
Protocol: one JSON command per stdin line, one JSON reply per stdout line (first line: the
`ready` reply with pid and mem_get_info). Commands: alloc, fill, free, free_all, trim, work
(matmul + CUDA graph, torch only), graph_alloc (a captured graph that allocates, torch only),
info, exit.
Failure: a CUDA error is a reply (`ok: false`, `error: <name>`), never an exit; bad commands exit 2.
Runs on the device machine with only the stdlib and torch. Tests: tests/gpu/test_*.py
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from typing import Any

MiB = 1 << 20


class DriverError(Exception):
    """A CUDA driver call returned an error; the message is the CUresult name."""


class DriverApi:
    """The few driver calls the tests need, resolved by name from libcuda.so.1."""

    CU_MEM_ATTACH_GLOBAL = 1
    CU_AD_FORMAT_FLOAT = 0x20

    class _AllocProp(ctypes.Structure):
        _fields_ = [
            ("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
            ("location", ctypes.c_int * 2), ("win32HandleMetaData", ctypes.c_void_p),
            ("allocFlags", ctypes.c_ubyte * 8)]

    class _ArrayDesc(ctypes.Structure):
        _fields_ = [("Width", ctypes.c_size_t), ("Height", ctypes.c_size_t),
                    ("Format", ctypes.c_int), ("NumChannels", ctypes.c_uint)]

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check("cuInit", 0)
        self.dev = ctypes.c_int()
        self._check("cuDeviceGet", ctypes.byref(self.dev), 0)
        self.ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), self.dev)
        self._check("cuCtxSetCurrent", self.ctx)
        self.prop = self._AllocProp()
        self.prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
        self.prop.location[0] = 1  # CU_MEM_LOCATION_TYPE_DEVICE; [1] = device ordinal
        self.prop.location[1] = self.dev.value
        gran = ctypes.c_size_t()
        self._check("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(self.prop), 0)
        self.vmm_granularity = gran.value

    def _check(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(text))
            raise DriverError((text.value or b"CUDA_ERROR_%d" % rc).decode())

    def mem_get_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def alloc(self, kind: str, size: int, height: int) -> tuple[str, Any]:
        """Allocate through one path; returns (kind, handle) for free()."""
        if kind == "plain":
            ptr = ctypes.c_uint64()
            self._check("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(size))
            return kind, ptr.value
        if kind == "pitch":
            ptr, pitch = ctypes.c_uint64(), ctypes.c_size_t()
            self._check("cuMemAllocPitch_v2", ctypes.byref(ptr), ctypes.byref(pitch),
                        ctypes.c_size_t(size), ctypes.c_size_t(height), ctypes.c_uint(4))
            return kind, ptr.value
        if kind == "managed":
            ptr = ctypes.c_uint64()
            self._check("cuMemAllocManaged", ctypes.byref(ptr), ctypes.c_size_t(size),
                        ctypes.c_uint(self.CU_MEM_ATTACH_GLOBAL))
            return kind, ptr.value
        if kind == "vmm":
            rounded = -(-size // self.vmm_granularity) * self.vmm_granularity
            handle = ctypes.c_uint64()
            self._check("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(rounded),
                        ctypes.byref(self.prop), ctypes.c_ulonglong(0))
            return kind, handle.value
        if kind == "async":
            ptr = ctypes.c_uint64()
            self._check("cuMemAllocAsync", ctypes.byref(ptr), ctypes.c_size_t(size), None)
            self._check("cuStreamSynchronize", None)
            return kind, ptr.value
        if kind == "array":
            desc = self._ArrayDesc(size, height, self.CU_AD_FORMAT_FLOAT, 4)
            arr = ctypes.c_void_p()
            self._check("cuArrayCreate_v2", ctypes.byref(arr), ctypes.byref(desc))
            return kind, arr.value
        raise ValueError(f"kind={kind!r}: unknown allocation kind for --api driver; use one of "
                         "plain, pitch, managed, vmm, async, array")

    def free(self, kind: str, handle: Any) -> None:
        if kind in ("plain", "pitch", "managed"):
            self._check("cuMemFree_v2", ctypes.c_uint64(handle))
        elif kind == "vmm":
            self._check("cuMemRelease", ctypes.c_uint64(handle))
        elif kind == "async":
            self._check("cuMemFreeAsync", ctypes.c_uint64(handle), None)
            self._check("cuStreamSynchronize", None)
        elif kind == "array":
            self._check("cuArrayDestroy", ctypes.c_void_p(handle))

    def trim(self, keep: int) -> None:
        pool = ctypes.c_void_p()
        self._check("cuDeviceGetDefaultMemPool", ctypes.byref(pool), self.dev)
        self._check("cuMemPoolTrimTo", pool, ctypes.c_size_t(keep))


class Holder:
    """Keeps every allocation alive until the parent frees it; maps handles to ids."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.live: dict[int, tuple[str, Any, int]] = {}
        self.next_id = 0
        if api == "torch":
            import torch

            self.torch = torch
            torch.cuda.init()
            torch.empty(1, device="cuda")  # creates the context, as every PyTorch program does
            self.driver: DriverApi | None = None
        else:
            self.driver = DriverApi()

    def _failures(self) -> tuple[type[BaseException], ...]:
        """What a failed allocation raises: any CUDA error, so the parent sees which one."""
        return (RuntimeError,) if self.api == "torch" else (DriverError,)

    def _describe(self, exc: BaseException) -> str:
        """`OutOfMemoryError` for torch's OOM, the CUresult name for the driver API."""
        return type(exc).__name__ if self.api == "torch" else str(exc)

    def mem_get_info(self) -> tuple[int, int]:
        if self.driver is not None:
            return self.driver.mem_get_info()
        free, total = self.torch.cuda.mem_get_info()
        return int(free), int(total)

    def alloc_one(self, kind: str, size: int, height: int = 1) -> int:
        if self.driver is not None:
            kind, handle = self.driver.alloc(kind, size, height)
        else:
            handle = self.torch.empty(size, dtype=self.torch.uint8, device="cuda")
        self.live[self.next_id] = (kind, handle, size * height)
        self.next_id += 1
        return self.next_id - 1

    def free(self, ident: int) -> None:
        kind, handle, _ = self.live.pop(ident)
        if self.driver is not None:
            self.driver.free(kind, handle)

    def free_all(self) -> None:
        for ident in list(self.live):
            self.free(ident)
        if self.driver is None:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def fill(self, kind: str, chunks: list[int]) -> dict[str, Any]:
        """Allocate each chunk size until it fails, largest first: usable bytes at the cap."""
        allocated, error, count = 0, None, 0
        for chunk in chunks:
            while True:
                try:
                    self.alloc_one(kind, chunk)
                except self._failures() as exc:
                    error = self._describe(exc)
                    break
                allocated += chunk
                count += 1
        return {"allocated": allocated, "count": count, "error": error}

    def graph_alloc(self, size: int) -> int:
        """Capture a CUDA graph that allocates a `size`-byte tensor it keeps as its output, replay
        it, and hold both: under `backend:cudaMallocAsync` that tensor is graph memory (a memory
        node backed by the device's graph pool), under the other allocators a private pool."""
        if self.driver is not None:
            raise ValueError("op=graph_alloc needs --api torch")
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as graph capture requires
            torch.empty(MiB, dtype=torch.uint8, device="cuda").fill_(1)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = torch.empty(size, dtype=torch.uint8, device="cuda")
            out.fill_(7)
        graph.replay()
        torch.cuda.synchronize()
        if int(out[-1]) != 7:
            raise RuntimeError("graph replay did not write its output")
        # memory outside allocations is re-read at most every 100 ms at a synchronisation
        time.sleep(0.15)
        torch.cuda.synchronize()
        self.live[self.next_id] = ("graph", (graph, out), size)
        self.next_id += 1
        return self.next_id - 1

    def work(self, n: int, graph: bool) -> dict[str, Any]:
        """Real kernels under the library: an fp32 matmul (cuBLAS) checked against float64 on
        the CPU, and (graph=True) a CUDA graph captured and replayed (cuGraphLaunch). A CUDA
        error is returned as `error`, so the parent can tell it from a crash."""
        if self.driver is not None:
            raise ValueError("op=work needs --api torch")
        torch = self.torch
        try:
            a = torch.randn(n, n, device="cuda")
            b = torch.randn(n, n, device="cuda")
            ref = a.double().cpu() @ b.double().cpu()
            rel_err = float(((a @ b).double().cpu() - ref).norm() / ref.norm())
            if not graph:
                # Modules cuBLAS loaded lazily are driver memory outside any allocation: the
                # library re-reads NVML at most every 100 ms at a synchronisation (docs/shim.md).
                time.sleep(0.15)
                torch.cuda.synchronize()
                return {"rel_err": rel_err}
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm-up on a side stream, as graph capture requires
                    warm = a * 2 + b
            torch.cuda.current_stream().wait_stream(side)
            del warm
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                out = a * 2 + b
            a.copy_(torch.randn(n, n, device="cuda"))
            for _ in range(10):
                cuda_graph.replay()
            torch.cuda.synchronize()
            graph_err = float((out - (a * 2 + b)).abs().max())
        except RuntimeError as exc:
            return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
        return {"rel_err": rel_err, "graph_err": graph_err}

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"held": sum(n for _, _, n in self.live.values())}
        if self.driver is None:
            out["reserved"] = int(self.torch.cuda.memory_reserved())
            out["allocator_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        return out

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd.get("op")
        if op == "alloc":
            try:
                ident = self.alloc_one(cmd.get("kind", "plain"), int(cmd["bytes"]),
                                       int(cmd.get("height", 1)))
            except self._failures() as exc:
                return {"ok": False, "error": self._describe(exc),
                        "message": str(exc).splitlines()[0][:300]}
            return {"ok": True, "id": ident}
        if op == "fill":
            return {"ok": True, **self.fill(cmd.get("kind", "plain"), list(cmd["chunks"]))}
        if op == "free":
            self.free(int(cmd["id"]))
            return {"ok": True}
        if op == "free_all":
            self.free_all()
            return {"ok": True}
        if op == "trim":
            if self.driver is None:
                raise ValueError("op=trim needs --api driver")
            self.driver.trim(int(cmd.get("keep", 0)))
            return {"ok": True}
        if op == "graph_alloc":
            try:
                ident = self.graph_alloc(int(cmd["bytes"]))
            except RuntimeError as exc:
                return {"ok": False, "error": type(exc).__name__,
                        "message": str(exc).splitlines()[0][:300]}
            return {"ok": True, "id": ident}
        if op == "work":
            result = self.work(int(cmd.get("n", 1024)), bool(cmd.get("graph", True)))
            return {"ok": "error" not in result, **result}
        if op == "info":
            free, total = self.mem_get_info()
            return {"ok": True, "free": free, "total": total}
        raise ValueError(f"op={op!r}: unknown command; use alloc, fill, free, free_all, trim, "
                         "work, graph_alloc, info or exit")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", choices=["torch", "driver"], default="torch")
    args = parser.parse_args()
    holder = Holder(args.api)
    free, total = holder.mem_get_info()

    def reply(obj: dict[str, Any]) -> None:
        obj.update(holder.stats())
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    reply({"ok": True, "op": "ready", "pid": os.getpid(), "free": free, "total": total})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("op") == "exit":
            return 0
        try:
            reply(holder.handle(cmd))
        except (ValueError, KeyError) as exc:
            sys.stderr.write(f"holder: bad command {line.strip()}: {exc}\n")
            return 2
        except DriverError as exc:
            reply({"ok": False, "error": str(exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main())

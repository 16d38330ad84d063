"""Child of tests/gpu/test_multi_gpu.py: holder.py's protocol on several GPUs of one process.

Owns: one CUDA context per GPU named by --devices (CUDA ordinals as this process sees them,
opened in that order) through PyTorch (`--api torch`) or the driver API (`--api driver`, ctypes
on libcuda.so.1), and the allocations the parent asks for on each.
Protocol: holder.py's, one JSON line each way; every command may carry `device` (an ordinal of
--devices, default the first). The `ready` reply lists each device: ordinal, uuid, free, total.
Failure: as holder.py (a CUDA error is a reply; bad commands exit 2).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from typing import Any

import holder


class _DriverOn(holder.DriverApi):
    """holder.DriverApi on one ordinal (its __init__ takes device 0, whose context would be
    charged to a GPU this process may not use)."""

    def __init__(self, ordinal: int) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check("cuInit", 0)
        self.dev = ctypes.c_int()
        self._check("cuDeviceGet", ctypes.byref(self.dev), ordinal)
        self.ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), self.dev)
        self._check("cuCtxSetCurrent", self.ctx)
        self.prop = self._AllocProp()
        self.prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
        self.prop.location[0] = 1  # CU_MEM_LOCATION_TYPE_DEVICE
        self.prop.location[1] = self.dev.value
        gran = ctypes.c_size_t()
        self._check("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(self.prop), 0)
        self.vmm_granularity = gran.value

    def uuid(self) -> str:
        raw = (ctypes.c_ubyte * 16)()
        self._check("cuDeviceGetUuid_v2", raw, self.dev)
        h = bytes(raw).hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class _HolderOn(holder.Holder):
    """A holder.Holder bound to one ordinal; `select` makes it current before each command."""

    def __init__(self, api: str, ordinal: int) -> None:
        self.ordinal = ordinal
        if api == "torch":
            import torch

            torch.cuda.set_device(ordinal)  # Holder's context and tensors go to "cuda" = this one
            super().__init__(api)
        else:
            self.api, self.live, self.next_id = api, {}, 0
            self.driver = _DriverOn(ordinal)

    def select(self) -> None:
        if self.driver is None:
            self.torch.cuda.set_device(self.ordinal)
        else:
            self.driver._check("cuCtxSetCurrent", self.driver.ctx)

    def uuid(self) -> str:
        if isinstance(self.driver, _DriverOn):
            return self.driver.uuid()
        props = self.torch.cuda.get_device_properties(self.ordinal)
        return f"GPU-{getattr(props, 'uuid', 'unknown')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", choices=["torch", "driver"], default="torch")
    parser.add_argument("--devices", default="0", help="CUDA ordinals to open, e.g. 0,1")
    args = parser.parse_args()
    ordinals = [int(d) for d in args.devices.split(",")]
    holders = {d: _HolderOn(args.api, d) for d in ordinals}

    def reply(obj: dict[str, Any], h: _HolderOn) -> None:
        obj.update(h.stats(), device=h.ordinal)
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    devices = []
    for h in holders.values():
        h.select()
        free, total = h.mem_get_info()
        devices.append({"ordinal": h.ordinal, "uuid": h.uuid(), "free": free, "total": total})
    reply({"ok": True, "op": "ready", "pid": os.getpid(), "devices": devices},
          holders[ordinals[0]])
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("op") == "exit":
            return 0
        h = holders.get(int(cmd.pop("device", ordinals[0])))
        if h is None:
            sys.stderr.write(f"multi_gpu_holder: device not opened (--devices {args.devices}): "
                             f"{line.strip()}\n")
            return 2
        h.select()
        try:
            reply(h.handle(cmd), h)
        except (ValueError, KeyError) as exc:
            sys.stderr.write(f"multi_gpu_holder: bad command {line.strip()}: {exc}\n")
            return 2
        except holder.DriverError as exc:
            reply({"ok": False, "error": str(exc)}, h)
    return 0


if __name__ == "__main__":
    sys.exit(main())

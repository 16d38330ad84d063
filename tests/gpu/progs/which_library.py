"""Child of the GPU tests: which shared object serves each driver entry point the runtime would use.

Asks cuGetProcAddress_v2 (fetched by name from libcuda.so.1, as CUDA 12/13 runtimes do) for each
symbol on argv at CUDA version 13000 without flags, then finds the mapping in /proc/self/maps
that holds the returned address. Prints one JSON object {symbol: library path or error}.
Stdlib only. Tests: tests/gpu/test_hot_paths_pass_through_without_limits.py
"""

from __future__ import annotations

import ctypes
import json
import sys


def owner(address: int) -> str:
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5] if len(parts) > 5 else "[anonymous]"
    return "[unmapped]"


def main() -> int:
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    if rc != 0:
        print(json.dumps({"error": f"cuInit returned {rc}"}))
        return 1
    out: dict[str, str] = {}
    for name in sys.argv[1:]:
        fn, status = ctypes.c_void_p(), ctypes.c_int()
        rc = cuda.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), 13000, ctypes.c_uint64(0),
                                      ctypes.byref(status))
        ok = rc == 0 and fn.value
        out[name] = owner(fn.value) if ok else f"error rc={rc} status={status.value}"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

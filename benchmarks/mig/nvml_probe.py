"""What NVML says about MIG on this machine, read-only: mode, profiles, placements, instances.

Run:  python3 benchmarks/mig/nvml_probe.py --out DIR      (needs only nvidia-ml-py)
Writes DIR/nvml_probe.json and prints it. For every GPU: MIG mode current/pending, each NVML
GPU-instance profile index with nvmlDeviceGetGpuInstanceProfileInfo (v2, else v1), its possible
placements (nvmlDeviceGetGpuInstancePossiblePlacements), existing GPU instances, the MIG device
count and remaining capacity, and every error NVML returned, by name. With gpuslice importable it
also compares the profiles with gpuslice's default table for the board (mig.CATALOG).
It changes nothing: NVML is reached only through a proxy that refuses any call whose name says
it writes (Set, Create, Destroy, Reset, Clear, ...), so a mistake here fails instead of acting.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

_WRITES = re.compile(r"Set|Create|Destroy|Reset|Clear|Register|Enable|Disable|Inject|Freeze")


class ReadOnlyNvml:
    """The pynvml module, minus every function that could change the GPU."""

    def __init__(self, module: Any) -> None:
        self._m = module

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml") and _WRITES.search(name):
            raise PermissionError(f"{name}: nvml_probe.py is read-only")
        return getattr(self._m, name)


def _text(v: Any) -> Any:
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def _error(n: Any, exc: Exception) -> dict[str, Any]:
    value = getattr(exc, "value", None)
    names = [k for k in dir(n._m) if k.startswith("NVML_ERROR_") and getattr(n._m, k) == value]
    return {"error": names[0] if names else type(exc).__name__, "code": value, "text": str(exc)}


def _call(n: Any, fn: str, *args: Any) -> tuple[Any, dict[str, Any] | None]:
    try:
        return getattr(n, fn)(*args), None
    except PermissionError:
        raise
    except Exception as exc:  # NVMLError, or a function this driver does not export
        return None, _error(n, exc)


def _struct(info: Any) -> dict[str, Any]:
    return {name: _text(getattr(info, name)) for name, _ in info._fields_
            if not name.startswith("version")}


def _placements(n: Any, h: Any, profile_id: int) -> dict[str, Any]:
    count = ctypes.c_uint(0)
    _, err = _call(n, "nvmlDeviceGetGpuInstancePossiblePlacements", h, profile_id, None,
                   ctypes.byref(count))
    if err is not None:
        return {"count": None, **err}
    array = (n.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    _, err = _call(n, "nvmlDeviceGetGpuInstancePossiblePlacements", h, profile_id, array,
                   ctypes.byref(count))
    if err is not None:
        return {"count": count.value, **err}
    return {"count": count.value,
            "placements": [[array[i].start, array[i].size] for i in range(count.value)]}


def _instances(n: Any, h: Any, profile_id: int, most: int) -> dict[str, Any]:
    count = ctypes.c_uint(0)
    array = (n.c_nvmlGpuInstance_t * max(most, 1))()
    _, err = _call(n, "nvmlDeviceGetGpuInstances", h, profile_id, array, ctypes.byref(count))
    if err is not None:
        return err
    out = []
    for i in range(count.value):
        info, e = _call(n, "nvmlGpuInstanceGetInfo", array[i])
        out.append(e or {"id": info.id, "start": info.placement.start,
                         "size": info.placement.size})
    return {"instances": out}


def _profiles(n: Any, h: Any) -> list[dict[str, Any]]:
    out = []
    for index in range(getattr(n, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
        names = [k for k in dir(n._m) if k.startswith("NVML_GPU_INSTANCE_PROFILE_")
                 and k != "NVML_GPU_INSTANCE_PROFILE_COUNT" and getattr(n._m, k) == index]
        row: dict[str, Any] = {"index": index, "constant": names[0] if names else None}
        info, err = _call(n, "nvmlDeviceGetGpuInstanceProfileInfo", h, index)  # v2
        if err is not None:
            row["v2"] = err
            info, err1 = _call(n, "nvmlDeviceGetGpuInstanceProfileInfo", h, index, 1)
            if err1 is not None:
                row["v1"] = err1
        if info is not None:
            row["info"] = _struct(info)
            row["placements"] = _placements(n, h, info.id)
            row["existing"] = _instances(n, h, info.id, int(info.instanceCount))
            cap, err = _call(n, "nvmlDeviceGetGpuInstanceRemainingCapacity", h, info.id)
            row["remainingCapacity"] = cap if err is None else err
        out.append(row)
    return out


def _catalog_check(model: str, memory_mib: int, profiles: list[dict[str, Any]]
                   ) -> dict[str, Any] | None:
    """gpuslice's default table next to what NVML answered (None without gpuslice)."""
    src = str(Path(__file__).resolve().parents[2] / "src")  # a checkout, not installed
    if src not in sys.path:
        sys.path.append(src)
    try:
        from gpuslice import mig
    except Exception:  # gpuslice or its dependencies absent: no comparison
        return None
    table = {p.name: p for p in mig.catalog_for(model, memory_mib)}
    seen = {}
    for row in profiles:
        info = row.get("info")
        if not info:
            continue
        name = str(info.get("name", "")).removeprefix("MIG ").strip()
        places = row.get("placements", {}).get("placements") or []
        seen[name] = {"memoryMiB": info.get("memorySizeMB"), "compute": info.get("sliceCount"),
                      "starts": sorted(s for s, _ in places),
                      "size": places[0][1] if places else None}
    return {"catalogKey": mig.catalog_key(model, memory_mib), "profiles": {
        name: {"nvml": seen.get(name), "gpuslice": {
            "memoryMiB": p.memory_mib, "compute": p.compute, "starts": list(p.starts),
            "size": p.size},
            "memoryLowerBoundHolds": None if name not in seen or seen[name]["memoryMiB"] is None
            else p.memory_mib <= seen[name]["memoryMiB"],
            "placementsMatch": None if name not in seen or not seen[name]["starts"]
            else (seen[name]["starts"] == list(p.starts) and seen[name]["size"] == p.size)}
        for name, p in table.items()}, "nvmlOnly": sorted(set(seen) - set(table))}


def probe(module: Any) -> dict[str, Any]:
    n = ReadOnlyNvml(module)
    n.nvmlInit()
    try:
        report: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": platform.node(), "nvidiaMlPy": getattr(module, "__version__", None)}
        for key, fn in (("driver", "nvmlSystemGetDriverVersion"),
                        ("cudaDriver", "nvmlSystemGetCudaDriverVersion"),
                        ("nvmlVersion", "nvmlSystemGetNVMLVersion")):
            value, err = _call(n, fn)
            report[key] = _text(value) if err is None else err
        gpus = []
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            name = _text(n.nvmlDeviceGetName(h))
            mem = n.nvmlDeviceGetMemoryInfo(h).total
            g: dict[str, Any] = {"index": i, "name": name, "uuid": _text(n.nvmlDeviceGetUUID(h)),
                                 "memoryMiB": mem >> 20}
            mode, err = _call(n, "nvmlDeviceGetMigMode", h)
            g["migMode"] = {"current": mode[0], "pending": mode[1]} if err is None else err
            most, err = _call(n, "nvmlDeviceGetMaxMigDeviceCount", h)
            g["maxMigDeviceCount"] = most if err is None else err
            is_mig, err = _call(n, "nvmlDeviceIsMigDeviceHandle", h)
            g["isMigDeviceHandle"] = is_mig if err is None else err
            g["profiles"] = _profiles(n, h)
            g["catalogCheck"] = _catalog_check(name, mem >> 20, g["profiles"])
            gpus.append(g)
        report["gpus"] = gpus
        return report
    finally:
        n.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for nvml_probe.json")
    args = ap.parse_args(argv)
    try:
        import pynvml
    except ImportError:
        print("nvml_probe: error: nvidia-ml-py is not installed; pip install nvidia-ml-py",
              file=sys.stderr)
        return 3
    try:
        report = probe(pynvml)
    except pynvml.NVMLError as exc:
        print(f"nvml_probe: error: NVML: {exc}; is the NVIDIA driver loaded (nvidia-smi)?",
              file=sys.stderr)
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=1, default=str)
    (out / "nvml_probe.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

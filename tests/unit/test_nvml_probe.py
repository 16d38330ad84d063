"""benchmarks/mig/nvml_probe.py on a stub NVML (MIG disabled, as on the lent GPUs): what it
records, the errors by name, and that it cannot call anything that writes."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import types
from pathlib import Path

import pynvml
import pytest

PROBE = Path(__file__).resolve().parents[2] / "benchmarks" / "mig" / "nvml_probe.py"
spec = importlib.util.spec_from_file_location("nvml_probe", PROBE)
assert spec and spec.loader
nvml_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nvml_probe)


def stub_nvml(calls: list[str]) -> types.ModuleType:
    """pynvml's constants and ctypes types, with an H100 whose MIG mode is disabled: profile 0
    answers (as some drivers do with MIG off), the others Not Supported."""
    m = types.ModuleType("pynvml")
    for k in dir(pynvml):
        if k.startswith(("NVML_", "c_nvml")) or k == "NVMLError":
            setattr(m, k, getattr(pynvml, k))
    err = pynvml.NVMLError

    def record(name, fn):
        def wrapped(*a):
            calls.append(name)
            return fn(*a)
        setattr(m, name, wrapped)

    def profile_info(h, index, version=2):
        if index != 0:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount, info.memorySizeMB = 19, 1, 7, 9984
        info.name = b"MIG 1g.10gb"
        return info

    def placements(h, pid, array, count):
        ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents.value = 7
        if array is not None:
            for i in range(7):
                array[i].start, array[i].size = i, 1
        return 0

    def instances(h, pid, array, count):
        raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    for name, fn in {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: "580.95.05",
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlSystemGetNVMLVersion": lambda: "13.580.95.05",
        "nvmlDeviceGetCount": lambda: 1, "nvmlDeviceGetHandleByIndex": lambda i: "h0",
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda h: "GPU-1",
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(total=81559 << 20),
        "nvmlDeviceGetMigMode": lambda h: [0, 0],
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 0,
        "nvmlDeviceIsMigDeviceHandle": lambda h: 0,
        "nvmlDeviceGetGpuInstanceProfileInfo": profile_info,
        "nvmlDeviceGetGpuInstancePossiblePlacements": placements,
        "nvmlDeviceGetGpuInstances": instances,
        "nvmlDeviceGetGpuInstanceRemainingCapacity": lambda h, pid: 7,
    }.items():
        record(name, fn)
    for name in ("nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance",
                 "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceDestroy"):
        record(name, lambda *a: pytest.fail("the probe wrote to the GPU"))
    return m


def test_the_probe_records_mode_profiles_placements_and_named_errors():
    calls: list[str] = []
    report = nvml_probe.probe(stub_nvml(calls))
    (g,) = report["gpus"]
    assert report["driver"] == "580.95.05"
    assert g["migMode"] == {"current": 0, "pending": 0}
    first, second = g["profiles"][:2]
    assert first["info"]["name"] == "MIG 1g.10gb" and first["info"]["memorySizeMB"] == 9984
    assert first["placements"] == {"count": 7, "placements": [[i, 1] for i in range(7)]}
    assert first["existing"]["error"] == "NVML_ERROR_NOT_SUPPORTED"
    assert second["v2"]["error"] == second["v1"]["error"] == "NVML_ERROR_NOT_SUPPORTED"
    check = g["catalogCheck"]["profiles"]["1g.10gb"]
    assert check["placementsMatch"] is True and check["memoryLowerBoundHolds"] is True
    assert not [c for c in calls if nvml_probe._WRITES.search(c)]


def test_the_read_only_proxy_refuses_every_writing_call():
    n = nvml_probe.ReadOnlyNvml(pynvml)
    for name in ("nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstanceWithPlacement",
                 "nvmlGpuInstanceDestroy", "nvmlDeviceResetGpuLockedClocks",
                 "nvmlDeviceClearEccErrorCounts", "nvmlGpuInstanceCreateComputeInstance"):
        with pytest.raises(PermissionError, match="read-only"):
            getattr(n, name)
    assert n.nvmlDeviceGetMigMode is pynvml.nvmlDeviceGetMigMode


def test_main_writes_the_json_file(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", stub_nvml([]))
    assert nvml_probe.main(["--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "nvml_probe.json").read_text())["gpus"][0]["uuid"] \
        == "GPU-1"

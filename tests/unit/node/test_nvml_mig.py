"""NvmlBackend's MIG calls (node/nvml.py) against a stub driver speaking pynvml's interface:
ctypes arrays and counts, GPU-instance and compute-instance handles, NVML's error codes. The
real driver was never driven this way (the lent GPUs' MIG mode must not change): this checks the
calls' shapes and our logic, not the driver."""

from __future__ import annotations

import ctypes
import types

import pynvml
import pytest

from gpuslice.node import nvml
from gpuslice.node.nvml import MigBusy, MigError

# NVML profile index -> (profile id, name, compute slices, MiB, instances, starts, size)
PROFILES = {0: (19, "1g.10gb", 1, 9984, 7, range(7), 1), 9: (15, "1g.20gb", 1, 20096, 4,
            (0, 2, 4, 6), 2), 1: (14, "2g.20gb", 2, 20096, 3, (0, 2, 4), 2),
            2: (9, "3g.40gb", 3, 40448, 2, (0, 4), 4), 3: (5, "4g.40gb", 4, 40448, 1, (0,), 4),
            4: (0, "7g.80gb", 7, 81152, 1, (0,), 8), 7: (20, "1g.10gb+me", 1, 9984, 1,
                                                          range(7), 1)}
BY_ID = {v[0]: v for v in PROFILES.values()}


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _handle(kind: type, n: int) -> object:
    return ctypes.cast(ctypes.c_void_p(0x1000 + n), kind)


def _id(h: object) -> int:
    return ctypes.cast(h, ctypes.c_void_p).value - 0x1000


def _set_count(ref: object, value: int) -> None:
    ctypes.cast(ref, ctypes.POINTER(ctypes.c_uint)).contents.value = value


class Driver:
    """One H100 in MIG mode: GPU instances by id, each with at most one compute instance."""

    def __init__(self) -> None:
        self.gis: dict[int, dict] = {}  # id -> {profile, start, size, ci, pids}

    def profile_info(self, h, index, version=2):
        if index not in PROFILES:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, name, sl, mib, count, _, _ = PROFILES[index]
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.memorySizeMB, info.instanceCount = pid, sl, mib, count
        info.name = f"MIG {name}".encode()
        return info

    def placements(self, h, pid, array, count):
        starts, size = BY_ID[pid][5], BY_ID[pid][6]
        _set_count(count, len(starts))
        if array is not None:
            for i, s in enumerate(starts):
                array[i].start, array[i].size = s, size

    def create(self, h, pid, placement):
        s, size = placement.start, placement.size
        if any(s < g["start"] + g["size"] and g["start"] < s + size for g in self.gis.values()):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = min(set(range(1, 9)) - set(self.gis))
        self.gis[gi] = {"profile": pid, "start": s, "size": size, "ci": None, "pids": []}
        return _handle(pynvml.c_nvmlGpuInstance_t, gi)

    def instances(self, h, pid, array, count):
        ids = sorted(i for i, g in self.gis.items() if g["profile"] == pid)
        for k, i in enumerate(ids):
            array[k] = _handle(pynvml.c_nvmlGpuInstance_t, i)
        _set_count(count, len(ids))

    def gi_info(self, gi):
        g = self.gis[_id(gi)]
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = _id(gi), g["profile"]
        info.placement.start, info.placement.size = g["start"], g["size"]
        return info

    def ci_profile(self, gi, ci_profile, eng, version=2):
        slices = BY_ID[self.gis[_id(gi)]["profile"]][2]
        if f"NVML_COMPUTE_INSTANCE_PROFILE_{slices}_SLICE" != next(
                k for k in dir(pynvml) if k.startswith("NVML_COMPUTE_INSTANCE_PROFILE_")
                and k.endswith("_SLICE") and getattr(pynvml, k) == ci_profile):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id, info.sliceCount, info.instanceCount = 100 + slices, slices, 1
        return info

    def ci_create(self, gi, ci_id):
        self.gis[_id(gi)]["ci"] = ci_id
        return _handle(pynvml.c_nvmlComputeInstance_t, _id(gi))

    def ci_list(self, gi, ci_id, array, count):
        g = self.gis[_id(gi)]
        if g["ci"] == ci_id:
            array[0] = _handle(pynvml.c_nvmlComputeInstance_t, _id(gi))
        _set_count(count, int(g["ci"] == ci_id))

    def ci_destroy(self, ci):
        g = self.gis[_id(ci)]
        if g["pids"]:
            raise _err(pynvml.NVML_ERROR_IN_USE)
        g["ci"] = None

    def gi_destroy(self, gi):
        if self.gis[_id(gi)]["pids"]:
            raise _err(pynvml.NVML_ERROR_IN_USE)
        del self.gis[_id(gi)]

    def mig_devices(self) -> list[int]:
        return sorted(i for i, g in self.gis.items() if g["ci"] is not None)

    def mig_handle(self, h, index):
        devs = self.mig_devices()
        if index >= len(devs):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", devs[index])

    def uuid(self, h):
        return f"MIG-{h[1]:04d}" if isinstance(h, tuple) else "GPU-x"

    def procs(self, h):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=1) for p in self.gis[h[1]]["pids"]]


@pytest.fixture
def backend(monkeypatch):
    d = Driver()
    unsupported = lambda *_: (_ for _ in ()).throw(_err(pynvml.NVML_ERROR_NOT_SUPPORTED))  # noqa: E731
    mem = types.SimpleNamespace(total=80 << 30, used=0)
    fakes = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None, "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: "h0", "nvmlDeviceGetUUID": d.uuid,
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetAttributes": unsupported, "nvmlDeviceGetMemoryInfo": lambda h: mem,
        "nvmlDeviceGetNumaNodeId": unsupported, "nvmlDeviceGetNvLinkState": unsupported,
        "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(busId=b"0000:01:00.0"),
        "nvmlDeviceGetMinorNumber": unsupported, "nvmlSystemGetDriverVersion": unsupported,
        "nvmlSystemGetCudaDriverVersion": unsupported,
        "nvmlDeviceGetMigMode": lambda h: [1, 1],
        "nvmlDeviceGetGpuInstanceProfileInfo": d.profile_info,
        "nvmlDeviceGetGpuInstancePossiblePlacements": d.placements,
        "nvmlDeviceCreateGpuInstanceWithPlacement": d.create,
        "nvmlDeviceGetGpuInstances": d.instances, "nvmlGpuInstanceGetInfo": d.gi_info,
        "nvmlGpuInstanceGetComputeInstanceProfileInfo": d.ci_profile,
        "nvmlGpuInstanceCreateComputeInstance": d.ci_create,
        "nvmlGpuInstanceGetComputeInstances": d.ci_list,
        "nvmlComputeInstanceDestroy": d.ci_destroy, "nvmlGpuInstanceDestroy": d.gi_destroy,
        "nvmlDeviceGetGpuInstanceById": lambda h, i: _handle(pynvml.c_nvmlGpuInstance_t, i),
        "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
        "nvmlDeviceGetMigDeviceHandleByIndex": d.mig_handle,
        "nvmlDeviceGetGpuInstanceId": lambda h: h[1],
        "nvmlDeviceGetComputeRunningProcesses": d.procs,
    }
    for name, fn in fakes.items():
        monkeypatch.setattr(pynvml, name, fn)
    b = nvml.NvmlBackend()
    b.driver = d  # type: ignore[attr-defined]
    return b


def test_profiles_come_from_nvml_with_exact_memory_and_placements_and_no_me(backend):
    got = {p.name: (p.compute, p.memory_mib, p.size, p.starts)
           for p in backend.mig_profiles("GPU-x")}
    assert got == {"1g.10gb": (1, 9984, 1, tuple(range(7))), "2g.20gb": (2, 20096, 2, (0, 2, 4)),
                   "3g.40gb": (3, 40448, 4, (0, 4)), "4g.40gb": (4, 40448, 4, (0,)),
                   "7g.80gb": (7, 81152, 8, (0,)), "1g.20gb": (1, 20096, 2, (0, 2, 4, 6))}
    assert backend.mig_mode("GPU-x") == nvml.MigMode(current=True, pending=True)


def test_create_makes_a_gpu_and_compute_instance_and_lists_it_with_its_mig_uuid(backend):
    made = backend.mig_create("GPU-x", "3g.40gb", 4)
    assert (made.profile, made.start, made.size, made.uuid) == ("3g.40gb", 4, 4, "MIG-0001")
    g = backend.driver.gis[made.gi_id]
    assert g["ci"] == 103, "a compute instance of the GPU instance's 3 slices"
    (d,) = backend.mig_devices("GPU-x")
    assert d == made


def test_create_refuses_bad_starts_and_reports_overlaps_with_nvmls_words(backend):
    with pytest.raises(MigError, match="may not start at memory slice 4"):
        backend.mig_create("GPU-x", "4g.40gb", 4)
    with pytest.raises(MigError, match=r"offers no MIG profile 9g\.90gb"):
        backend.mig_create("GPU-x", "9g.90gb", 0)
    backend.mig_create("GPU-x", "3g.40gb", 0)
    with pytest.raises(MigError, match=r"nvmlDeviceCreateGpuInstanceWithPlacement on GPU GPU-x"):
        backend.mig_create("GPU-x", "2g.20gb", 2)


def test_a_failed_compute_instance_leaves_no_gpu_instance(backend, monkeypatch):
    def refuse(gi, ci):
        raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    monkeypatch.setattr(pynvml, "nvmlGpuInstanceCreateComputeInstance", refuse)
    with pytest.raises(MigError, match="nvmlGpuInstanceCreateComputeInstance"):
        backend.mig_create("GPU-x", "1g.10gb", 3)
    assert backend.driver.gis == {}


def test_destroy_removes_both_and_in_use_is_migbusy(backend):
    a = backend.mig_create("GPU-x", "1g.10gb", 0)
    b = backend.mig_create("GPU-x", "1g.10gb", 1)
    backend.driver.gis[b.gi_id]["pids"] = [99]
    assert backend.mig_processes("GPU-x", b.gi_id) == (99,)
    assert backend.mig_processes("GPU-x", a.gi_id) == ()
    with pytest.raises(MigBusy, match="nvmlComputeInstanceDestroy"):
        backend.mig_destroy("GPU-x", b.gi_id)
    backend.mig_destroy("GPU-x", a.gi_id)
    assert [d.start for d in backend.mig_devices("GPU-x")] == [1]


def test_a_gpu_without_mig_reads_as_none(backend, monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode",
                        lambda h: (_ for _ in ()).throw(_err(pynvml.NVML_ERROR_NOT_SUPPORTED)))
    assert backend.mig_mode("GPU-x") is None

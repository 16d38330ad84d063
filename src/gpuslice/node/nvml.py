"""What the node agent asks of the GPUs: a small Protocol, NVML behind it, and a fake for tests.

Owns: `GPUBackend` (devices, per-GPU stats, per-process used memory, health events),
`MigBackend` (MIG mode, profiles, GPU + compute instances: read, create, destroy),
`NvmlBackend` (nvidia-ml-py) and `FakeBackend` (`fake:N` or `fake:/path.yaml`, injectable at
run time: XIDs, lost GPUs, processes; MIG modelled with the MIG guide's placement rules and
its instances kept in a file beside the YAML, so they outlive an agent killed mid-way, as on
a real GPU), and `open_backend(spec)`. Nothing here changes a GPU's MIG mode.
Does not: decide health (health.py), publish anything or keep state between calls.
Failure: no driver / no GPU / NVML init error -> EnvironmentProblem (exit 3) saying what to
check; a query a platform does not support (NUMA id in a VM, power on some boards) gives None,
never an exception. A GPU that stops answering raises GPULost from stats()/processes().
Tests: tests/unit/node/test_nvml.py, tests/gpu/test_node_agent_on_gpu.py
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid as uuid_mod
from dataclasses import dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any, Protocol

import msgspec
import yaml

from gpuslice import mig
from gpuslice.errors import ConfigError, EnvironmentProblem

__all__ = ["DeviceInfo", "DeviceStats", "FakeBackend", "GPUBackend", "GPULost", "HealthEvent",
           "MigBackend", "MigBusy", "MigDevice", "MigError", "MigMode", "NvmlBackend",
           "ProcessUsage", "open_backend"]

MiB = 1 << 20

# XIDs caused by applications, not by the GPU (the NVIDIA device plugin skips the same ones).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

# SMs by model, for drivers where nvmlDeviceGetAttributes is Not Supported (longest match wins).
SM_COUNTS = {"H200": 132, "H100 PCIe": 114, "H100 NVL": 132, "H100": 132, "H800": 132,
             "GH200": 132, "B200": 148, "A100": 108, "A800": 108, "A30": 56, "A10": 72,
             "A40": 84, "L40S": 142, "L40": 142, "L4": 58, "T4": 40, "V100": 80}


class GPULost(Exception):
    """The GPU no longer answers NVML (fallen off the bus, driver reset)."""


@dataclass(frozen=True)
class DeviceInfo:
    """A GPU as discovered at start: fixed facts only."""

    index: int
    uuid: str
    model: str
    memory_bytes: int
    sm_count: int
    numa_node: int | None = None
    nvlink_peers: tuple[str, ...] = ()
    minor: int | None = None  # /dev/nvidia<minor>
    driver_version: str | None = None  # the node's, e.g. "580.159.04"
    cuda_driver_version: int | None = None  # e.g. 13000 for CUDA 13.0


@dataclass(frozen=True)
class DeviceStats:
    """A GPU now; None where the platform does not report the value."""

    memory_used: int
    memory_total: int
    utilisation: int | None = None  # percent
    temperature: int | None = None  # degrees C
    power_watts: float | None = None


@dataclass(frozen=True)
class ProcessUsage:
    pid: int  # as NVML lists it (host pid namespace)
    used_bytes: int


@dataclass(frozen=True)
class HealthEvent:
    """A critical event on one GPU (an XID the GPU caused)."""

    uuid: str
    xid: int


class MigError(Exception):
    """A MIG call failed (the message says which call, on which GPU, and NVML's answer)."""


class MigBusy(MigError):
    """The instance runs processes (NVML_ERROR_IN_USE): it must not be destroyed now."""


@dataclass(frozen=True)
class MigMode:
    current: bool
    pending: bool


@dataclass(frozen=True)
class MigDevice:
    """A GPU instance with its compute instance, as the node agent hands it to a container."""

    gpu: str  # parent GPU UUID
    gi_id: int  # GPU instance id (per parent GPU)
    profile: str  # e.g. "3g.40gb"
    start: int
    size: int
    uuid: str  # MIG-... (the compute instance's device); "" when it has no compute instance


class MigBackend(Protocol):
    def mig_mode(self, uuid: str) -> MigMode | None:
        """None when the GPU does not support MIG."""
        ...

    def mig_profiles(self, uuid: str) -> tuple[mig.Profile, ...]: ...

    def mig_devices(self, uuid: str) -> tuple[MigDevice, ...]: ...

    def mig_create(self, uuid: str, profile: str, start: int) -> MigDevice:
        """A GPU instance of `profile` at `start` and a compute instance spanning it."""
        ...

    def mig_destroy(self, uuid: str, gi_id: int) -> None:
        """Its compute instances, then itself; MigBusy while processes run on it."""
        ...

    def mig_processes(self, uuid: str, gi_id: int) -> tuple[int, ...]: ...


class GPUBackend(Protocol):
    def devices(self) -> tuple[DeviceInfo, ...]: ...

    def stats(self, uuid: str) -> DeviceStats: ...

    def processes(self, uuid: str) -> tuple[ProcessUsage, ...]: ...

    def wait_events(self, timeout_s: float) -> list[HealthEvent]:
        """Critical events since the last call, waiting up to timeout_s (blocking: run it in a
        thread)."""
        ...

    def close(self) -> None: ...


def open_backend(spec: str) -> GPUBackend:
    """`nvml`, `fake:N` or `fake:/path.yaml` (the --gpu-backend flag)."""
    if spec == "nvml":
        return NvmlBackend()
    if spec.startswith("fake:"):
        arg = spec[5:]
        if arg.isdigit():
            return FakeBackend.with_count(int(arg))
        return FakeBackend.from_file(arg)
    raise ConfigError(f"--gpu-backend {spec!r}: unknown backend; use nvml, fake:N (N GPUs) or "
                      "fake:/path/to/gpus.yaml")


# ---------------------------------------------------------------- NVML

def _optional(call: Any, *args: Any) -> Any:
    """The value, or None when this platform does not support the query."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError as exc:
        if exc.value in (pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNINITIALIZED):
            raise GPULost(str(exc)) from None
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


# compute instance profile spanning a whole GPU instance of that many compute slices
_CI_PROFILES = {n: f"NVML_COMPUTE_INSTANCE_PROFILE_{n}_SLICE" for n in (1, 2, 3, 4, 6, 7, 8)}


def _sm_count_from_model(name: str) -> int:
    best = max((k for k in SM_COUNTS if k in name), key=len, default=None)
    return SM_COUNTS[best] if best else 0


class NvmlBackend:
    """The real GPUs through nvidia-ml-py (pynvml)."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise EnvironmentProblem("nvidia-ml-py (pynvml) is not installed; reinstall gpuslice "
                                     "with its dependencies") from None
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise EnvironmentProblem(
                f"NVML cannot start: {exc}; check that the NVIDIA driver is installed on this node "
                "(nvidia-smi works), that the agent's container gets libnvidia-ml.so.1 (NVIDIA "
                "container runtime, or mount the driver), and that this is a GPU node (else keep "
                "the DaemonSet off it with a nodeSelector)") from None
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            pynvml.nvmlShutdown()
            raise EnvironmentProblem("NVML sees no GPU on this node; check `nvidia-smi -L` and "
                                     "that the agent's container is given the GPUs "
                                     "(privileged or NVIDIA_VISIBLE_DEVICES=all)")
        self._handles: dict[str, Any] = {}
        version = _optional(pynvml.nvmlSystemGetDriverVersion)
        self._driver_version = _text(version) if version is not None else None
        self._cuda_version = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        self._devices = tuple(self._discover(i) for i in range(count))
        self._events: Any = None
        self._closed = False
        self._lock = threading.Lock()

    def _discover(self, index: int) -> DeviceInfo:
        n = self._nvml
        h = n.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(n.nvmlDeviceGetUUID(h))
        self._handles[uuid] = h
        model = _text(n.nvmlDeviceGetName(h))
        attrs = _optional(n.nvmlDeviceGetAttributes, h)
        sms = getattr(attrs, "multiprocessorCount", 0) or _sm_count_from_model(model)
        return DeviceInfo(index=index, uuid=uuid, model=model,
                          memory_bytes=n.nvmlDeviceGetMemoryInfo(h).total, sm_count=int(sms),
                          numa_node=_optional(n.nvmlDeviceGetNumaNodeId, h),
                          nvlink_peers=self._peers(h),
                          minor=_optional(n.nvmlDeviceGetMinorNumber, h),
                          driver_version=self._driver_version,
                          cuda_driver_version=self._cuda_version)

    def _peers(self, h: Any) -> tuple[str, ...]:
        """Bus ids of active NVLink peers (resolved to UUIDs once all GPUs are known)."""
        n = self._nvml
        buses = []
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            if _optional(n.nvmlDeviceGetNvLinkState, h, link) != 1:
                continue
            pci = _optional(n.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            if pci is not None:
                buses.append(_text(pci.busId).lower())
        return tuple(dict.fromkeys(buses))

    def _nvlink_p2p(self) -> dict[str, list[str]]:
        """uuid -> the GPUs NVML says it reaches over NVLink. Needed on NVSwitch boards (HGX,
        DGX), where every link's remote end is a switch, not a GPU."""
        n = self._nvml
        out: dict[str, list[str]] = {u: [] for u in self._handles}
        for a, b in combinations(self._handles, 2):
            status = _optional(n.nvmlDeviceGetP2PStatus, self._handles[a], self._handles[b],
                               n.NVML_P2P_CAPS_INDEX_NVLINK)
            if status == n.NVML_P2P_STATUS_OK:
                out[a].append(b)
                out[b].append(a)
        return out

    def devices(self) -> tuple[DeviceInfo, ...]:
        n = self._nvml
        by_bus = {_text(n.nvmlDeviceGetPciInfo(h).busId).lower(): u
                  for u, h in self._handles.items()}
        p2p = self._nvlink_p2p()
        return tuple(replace(d, nvlink_peers=tuple(dict.fromkeys(
            [by_bus[b] for b in d.nvlink_peers if b in by_bus and by_bus[b] != d.uuid]
            + p2p[d.uuid])))
            for d in self._devices)

    def _handle(self, uuid: str) -> Any:
        try:
            return self._handles[uuid]
        except KeyError:
            raise GPULost(f"{uuid}: not a GPU of this node") from None

    def stats(self, uuid: str) -> DeviceStats:
        n, h = self._nvml, self._handle(uuid)
        mem = _optional(n.nvmlDeviceGetMemoryInfo, h)
        if mem is None:
            raise GPULost(f"{uuid}: memory info unavailable")
        util = _optional(n.nvmlDeviceGetUtilizationRates, h)
        power = _optional(n.nvmlDeviceGetPowerUsage, h)
        return DeviceStats(
            memory_used=mem.used, memory_total=mem.total,
            utilisation=util.gpu if util is not None else None,
            temperature=_optional(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
            power_watts=power / 1000 if power is not None else None)

    def processes(self, uuid: str) -> tuple[ProcessUsage, ...]:
        n, h = self._nvml, self._handle(uuid)
        procs = _optional(n.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is None:
            raise GPULost(f"{uuid}: process list unavailable")
        return tuple(ProcessUsage(pid=p.pid, used_bytes=p.usedGpuMemory or 0) for p in procs)

    def wait_events(self, timeout_s: float) -> list[HealthEvent]:
        n = self._nvml
        with self._lock:  # close() waits for a wait in progress: never free a set in use
            if self._closed:
                return []
            if self._events is None:
                self._events = n.nvmlEventSetCreate()
                for h in self._handles.values():  # not every GPU supports events: skip those
                    _optional(n.nvmlDeviceRegisterEvents, h, n.nvmlEventTypeXidCriticalError,
                              self._events)
            try:
                data = n.nvmlEventSetWait_v2(self._events, int(timeout_s * 1000))
            except n.NVMLError as exc:
                if exc.value != n.NVML_ERROR_TIMEOUT:
                    time.sleep(timeout_s)  # events unsupported: health falls back to polling
                return []
            xid = int(data.eventData)
            uuid = _text(_optional(n.nvmlDeviceGetUUID, data.device) or "")
        if xid in APPLICATION_XIDS or uuid not in self._handles:
            return []
        return [HealthEvent(uuid=uuid, xid=xid)]

    # -- MIG (docs/mig.md); every call names the GPU and NVML's answer when it fails
    def _mig_call(self, what: str, uuid: str, call: Any, *args: Any) -> Any:
        n = self._nvml
        try:
            return call(*args)
        except n.NVMLError as exc:
            kind = MigBusy if exc.value == n.NVML_ERROR_IN_USE else MigError
            raise kind(f"{what} on GPU {uuid}: {exc}") from None

    def mig_mode(self, uuid: str) -> MigMode | None:
        n = self._nvml
        try:
            current, pending = n.nvmlDeviceGetMigMode(self._handle(uuid))
        except n.NVMLError as exc:
            if exc.value == n.NVML_ERROR_NOT_SUPPORTED:
                return None
            raise MigError(f"nvmlDeviceGetMigMode on GPU {uuid}: {exc}") from None
        return MigMode(current=current == n.NVML_DEVICE_MIG_ENABLE,
                       pending=pending == n.NVML_DEVICE_MIG_ENABLE)

    def _profile_infos(self, uuid: str) -> list[tuple[str, Any]]:
        """(name, nvmlGpuInstanceProfileInfo_v2) of every profile the GPU answers for."""
        n, h = self._nvml, self._handle(uuid)
        out = []
        for index in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            except n.NVMLError:
                continue  # this profile does not exist on this board
            name = _text(info.name).removeprefix("MIG ").strip()
            if name and all(name != seen for seen, _ in out):
                out.append((name, info))
        return out

    def _placements(self, uuid: str, profile_id: int) -> list[tuple[int, int]]:
        import ctypes

        n, h = self._nvml, self._handle(uuid)
        count = ctypes.c_uint(0)
        self._mig_call("nvmlDeviceGetGpuInstancePossiblePlacements", uuid,
                       n.nvmlDeviceGetGpuInstancePossiblePlacements, h, profile_id, None,
                       ctypes.byref(count))
        array = (n.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        self._mig_call("nvmlDeviceGetGpuInstancePossiblePlacements", uuid,
                       n.nvmlDeviceGetGpuInstancePossiblePlacements, h, profile_id, array,
                       ctypes.byref(count))
        return [(array[i].start, array[i].size) for i in range(count.value)]

    def mig_profiles(self, uuid: str) -> tuple[mig.Profile, ...]:
        out = []
        for name, info in self._profile_infos(uuid):
            places = self._placements(uuid, info.id)
            if not places or "+" in name:  # media-extension profiles: one per GPU, not offered
                continue
            out.append(mig.Profile(name=name, compute=int(info.sliceCount),
                                   memory_mib=int(info.memorySizeMB), size=places[0][1],
                                   starts=tuple(sorted(s for s, _ in places))))
        return tuple(out)

    def _mig_uuids(self, uuid: str) -> dict[int, str]:
        """GPU instance id -> MIG-... UUID of its (first) compute instance's device."""
        n, h = self._nvml, self._handle(uuid)
        out: dict[int, str] = {}
        most = self._mig_call("nvmlDeviceGetMaxMigDeviceCount", uuid,
                              n.nvmlDeviceGetMaxMigDeviceCount, h)
        for i in range(int(most)):
            try:
                dev = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except n.NVMLError:
                continue  # no MIG device at this index
            gi = self._mig_call("nvmlDeviceGetGpuInstanceId", uuid, n.nvmlDeviceGetGpuInstanceId,
                                dev)
            out.setdefault(int(gi), _text(n.nvmlDeviceGetUUID(dev)))
        return out

    def _gpu_instances(self, uuid: str) -> list[tuple[str, Any]]:
        import ctypes

        n, h = self._nvml, self._handle(uuid)
        out = []
        for name, info in self._profile_infos(uuid):
            count = ctypes.c_uint(0)
            array = (n.c_nvmlGpuInstance_t * max(int(info.instanceCount), 1))()
            self._mig_call("nvmlDeviceGetGpuInstances", uuid, n.nvmlDeviceGetGpuInstances, h,
                           info.id, array, ctypes.byref(count))
            out.extend((name, array[i]) for i in range(count.value))
        return out

    def mig_devices(self, uuid: str) -> tuple[MigDevice, ...]:
        n = self._nvml
        uuids = self._mig_uuids(uuid)
        out = []
        for name, gi in self._gpu_instances(uuid):
            info = self._mig_call("nvmlGpuInstanceGetInfo", uuid, n.nvmlGpuInstanceGetInfo, gi)
            out.append(MigDevice(gpu=uuid, gi_id=int(info.id), profile=name,
                                 start=int(info.placement.start), size=int(info.placement.size),
                                 uuid=uuids.get(int(info.id), "")))
        return tuple(sorted(out, key=lambda d: d.start))

    def mig_create(self, uuid: str, profile: str, start: int) -> MigDevice:
        n, h = self._nvml, self._handle(uuid)
        info = dict(self._profile_infos(uuid)).get(profile)
        if info is None:
            raise MigError(f"GPU {uuid} offers no MIG profile {profile}")
        size = next((sz for st, sz in self._placements(uuid, info.id) if st == start), None)
        if size is None:
            raise MigError(f"GPU {uuid}: {profile} may not start at memory slice {start}")
        placement = n.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        gi = self._mig_call("nvmlDeviceCreateGpuInstanceWithPlacement", uuid,
                            n.nvmlDeviceCreateGpuInstanceWithPlacement, h, info.id, placement)
        try:
            ci_profile = _CI_PROFILES.get(int(info.sliceCount))
            if ci_profile is None:
                raise MigError(f"GPU {uuid}: no compute instance profile for "
                               f"{info.sliceCount} slices")
            ci = self._mig_call("nvmlGpuInstanceGetComputeInstanceProfileInfo", uuid,
                                n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi,
                                getattr(n, ci_profile),
                                n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            self._mig_call("nvmlGpuInstanceCreateComputeInstance", uuid,
                           n.nvmlGpuInstanceCreateComputeInstance, gi, ci.id)
        except MigError:
            _optional(n.nvmlGpuInstanceDestroy, gi)  # no half-made instance left behind
            raise
        gi_id = int(self._mig_call("nvmlGpuInstanceGetInfo", uuid, n.nvmlGpuInstanceGetInfo,
                                   gi).id)
        return MigDevice(gpu=uuid, gi_id=gi_id, profile=profile, start=start, size=size,
                         uuid=self._mig_uuids(uuid).get(gi_id, ""))

    def _compute_instances(self, uuid: str, gi: Any) -> list[Any]:
        import ctypes

        n = self._nvml
        out = []
        for name in _CI_PROFILES.values():
            try:
                info = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi, getattr(n, name), n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            except n.NVMLError:
                continue
            count = ctypes.c_uint(0)
            array = (n.c_nvmlComputeInstance_t * max(int(info.instanceCount), 1))()
            self._mig_call("nvmlGpuInstanceGetComputeInstances", uuid,
                           n.nvmlGpuInstanceGetComputeInstances, gi, info.id, array,
                           ctypes.byref(count))
            out.extend(array[i] for i in range(count.value))
        return out

    def mig_destroy(self, uuid: str, gi_id: int) -> None:
        n, h = self._nvml, self._handle(uuid)
        gi = self._mig_call("nvmlDeviceGetGpuInstanceById", uuid, n.nvmlDeviceGetGpuInstanceById,
                            h, gi_id)
        for ci in self._compute_instances(uuid, gi):
            self._mig_call("nvmlComputeInstanceDestroy", uuid, n.nvmlComputeInstanceDestroy, ci)
        self._mig_call("nvmlGpuInstanceDestroy", uuid, n.nvmlGpuInstanceDestroy, gi)

    def mig_processes(self, uuid: str, gi_id: int) -> tuple[int, ...]:
        n, h = self._nvml, self._handle(uuid)
        most = int(self._mig_call("nvmlDeviceGetMaxMigDeviceCount", uuid,
                                  n.nvmlDeviceGetMaxMigDeviceCount, h))
        pids: list[int] = []
        for i in range(most):
            try:
                dev = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                if int(n.nvmlDeviceGetGpuInstanceId(dev)) != gi_id:
                    continue
            except n.NVMLError:
                continue
            procs = self._mig_call("nvmlDeviceGetComputeRunningProcesses", uuid,
                                   n.nvmlDeviceGetComputeRunningProcesses, dev)
            pids.extend(int(p.pid) for p in procs)
        return tuple(pids)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._events is not None:
                _optional(self._nvml.nvmlEventSetFree, self._events)
            self._nvml.nvmlShutdown()


# ---------------------------------------------------------------- fake

class _FakeProcess(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pid: int
    used_mib: int = msgspec.field(name="usedMiB", default=0)


class _FakeMig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A fake GPU's MIG support: profiles from mig.CATALOG by model and memory."""

    capable: bool = True  # False: NVML answers Not Supported (an L4, a T4)
    enabled: bool = True  # current MIG mode
    pending: bool | None = None  # pending mode (None: same as current)


class _FakeGPU(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    uuid: str
    model: str = "NVIDIA Fake GPU"
    memory_mib: int = msgspec.field(name="memoryMiB", default=16384)
    sm_count: int = msgspec.field(name="smCount", default=80)
    numa_node: int | None = msgspec.field(name="numaNode", default=None)
    nvlink_peers: list[str] = msgspec.field(name="nvlinkPeers", default_factory=list)
    minor: int | None = None
    utilisation: int = 0
    temperature: int = 40
    power_watts: float = msgspec.field(name="powerWatts", default=60.0)
    lost: bool = False
    processes: list[_FakeProcess] = msgspec.field(default_factory=list)
    mig: _FakeMig | None = None  # None: MIG not supported


class _FakeXid(msgspec.Struct, forbid_unknown_fields=True):
    uuid: str
    xid: int


class _FakeFile(msgspec.Struct, forbid_unknown_fields=True):
    gpus: list[_FakeGPU]
    xids: list[_FakeXid] = msgspec.field(default_factory=list)
    # fault injection: SIGKILL the process right after a MIG instance is made (tests of an
    # agent killed between create and its Allocate answer)
    kill_after_mig_create: bool = msgspec.field(name="killAfterMigCreate", default=False)


def fake_uuid(i: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{i:012d}"


class _FakeInstance(msgspec.Struct, kw_only=True):
    gi_id: int
    profile: str
    start: int
    size: int
    uuid: str
    pids: list[int] = msgspec.field(default_factory=list)


class _FakeMigState(msgspec.Struct, kw_only=True):
    """What a real GPU keeps across agent restarts: its instances (gpu uuid -> instances)."""

    created: int = 0  # instances ever created (new UUIDs, as real MIG UUIDs are new each time)
    gpus: dict[str, list[_FakeInstance]] = msgspec.field(default_factory=dict)


class _FakeMigMixin:
    """MIG on the fake GPUs: the placement rules of mig.py, create/destroy, UUIDs, in-use."""

    gpus: list[_FakeGPU]
    path: Path | None
    _mig_memory: _FakeMigState | None
    _kill_after_mig_create: bool

    def _gpu(self, uuid: str) -> _FakeGPU: ...  # type: ignore[empty-body]

    def _mig_file(self) -> Path | None:
        return None if self.path is None else self.path.with_name(self.path.name + ".mig.json")

    def _mig_load(self) -> _FakeMigState:
        f = self._mig_file()
        if f is None:
            if self._mig_memory is None:
                self._mig_memory = _FakeMigState()
            return self._mig_memory
        try:
            return msgspec.json.decode(f.read_bytes(), type=_FakeMigState)
        except FileNotFoundError:
            return _FakeMigState()

    def _mig_save(self, state: _FakeMigState) -> None:
        f = self._mig_file()
        if f is None:
            self._mig_memory = state
            return
        tmp = f.with_name(f.name + ".tmp")
        tmp.write_bytes(msgspec.json.encode(state))
        os.replace(tmp, f)  # the real GPU's state never half-written

    def _mig_gpu(self, uuid: str, *, enabled: bool = True) -> _FakeGPU:
        g = self._gpu(uuid)
        if g.mig is None or not g.mig.capable:
            raise MigError(f"GPU {uuid}: Not Supported (this GPU has no MIG)")
        if enabled and not g.mig.enabled:
            raise MigError(f"GPU {uuid}: Not Supported (MIG mode is disabled)")
        return g

    def mig_mode(self, uuid: str) -> MigMode | None:
        g = self._gpu(uuid)
        if g.mig is None or not g.mig.capable:
            return None
        pending = g.mig.enabled if g.mig.pending is None else g.mig.pending
        return MigMode(current=g.mig.enabled, pending=pending)

    def mig_profiles(self, uuid: str) -> tuple[mig.Profile, ...]:
        g = self._mig_gpu(uuid)
        return mig.catalog_for(g.model, g.memory_mib)

    def mig_devices(self, uuid: str) -> tuple[MigDevice, ...]:
        self._mig_gpu(uuid)
        return tuple(MigDevice(gpu=uuid, gi_id=i.gi_id, profile=i.profile, start=i.start,
                               size=i.size, uuid=i.uuid)
                     for i in sorted(self._mig_load().gpus.get(uuid, []), key=lambda i: i.start))

    def mig_create(self, uuid: str, profile: str, start: int) -> MigDevice:
        g = self._mig_gpu(uuid)
        p = next((q for q in mig.catalog_for(g.model, g.memory_mib) if q.name == profile), None)
        if p is None:
            raise MigError(f"GPU {uuid} offers no MIG profile {profile}")
        if start not in p.starts:
            raise MigError(f"nvmlDeviceCreateGpuInstanceWithPlacement on GPU {uuid}: "
                           f"Invalid Argument ({profile} at slice {start})")
        state = self._mig_load()
        have = state.gpus.setdefault(uuid, [])
        if any(mig.overlaps(start, p.size, i.start, i.size) for i in have):
            raise MigError(f"nvmlDeviceCreateGpuInstanceWithPlacement on GPU {uuid}: "
                           f"Insufficient Resources ({profile} at slice {start} overlaps)")
        gi_id = min(set(range(1, len(have) + 2)) - {i.gi_id for i in have})
        state.created += 1
        mig_uuid = "MIG-" + str(uuid_mod.uuid5(uuid_mod.NAMESPACE_OID,
                                               f"{uuid}/{gi_id}/{state.created}"))
        have.append(_FakeInstance(gi_id=gi_id, profile=profile, start=start, size=p.size,
                                  uuid=mig_uuid))
        self._mig_save(state)
        if self._kill_after_mig_create:
            os.kill(os.getpid(), signal.SIGKILL)
        return MigDevice(gpu=uuid, gi_id=gi_id, profile=profile, start=start, size=p.size,
                         uuid=mig_uuid)

    def mig_destroy(self, uuid: str, gi_id: int) -> None:
        self._mig_gpu(uuid)
        state = self._mig_load()
        have = state.gpus.get(uuid, [])
        inst = next((i for i in have if i.gi_id == gi_id), None)
        if inst is None:
            raise MigError(f"nvmlDeviceGetGpuInstanceById on GPU {uuid}: Not Found ({gi_id})")
        if inst.pids:
            raise MigBusy(f"nvmlGpuInstanceDestroy on GPU {uuid}: In use by another client "
                          f"(pids {inst.pids})")
        have.remove(inst)
        self._mig_save(state)

    def mig_processes(self, uuid: str, gi_id: int) -> tuple[int, ...]:
        self._mig_gpu(uuid)
        inst = next((i for i in self._mig_load().gpus.get(uuid, []) if i.gi_id == gi_id), None)
        return tuple(inst.pids) if inst else ()

    # -- run-time injection for tests
    def set_mig_processes(self, uuid: str, gi_id: int, pids: list[int]) -> None:
        state = self._mig_load()
        for i in state.gpus.get(uuid, []):
            if i.gi_id == gi_id:
                i.pids = list(pids)
        self._mig_save(state)


@dataclass
class FakeBackend(_FakeMigMixin):
    """GPUs from a list (tests) or a YAML file re-read when it changes (XIDs appended to the
    file's `xids:` list are delivered once each), so a test can inject faults into a running
    agent, in-process (inject_xid, set_lost, set_processes) or from outside (edit the file)."""

    gpus: list[_FakeGPU]
    path: Path | None = None
    _mtime: float = 0.0
    _xids_seen: int = 0
    _queue: list[HealthEvent] = field(default_factory=list)
    _wake: threading.Event = field(default_factory=threading.Event)
    _mig_memory: _FakeMigState | None = None
    _kill_after_mig_create: bool = False

    @classmethod
    def with_count(cls, count: int, *, memory_mib: int = 16384) -> FakeBackend:
        if not 1 <= count <= 64:
            raise ConfigError(f"--gpu-backend fake:{count}: use 1..64 GPUs")
        return cls.with_uuids([fake_uuid(i) for i in range(count)], memory_mib=memory_mib)

    @classmethod
    def with_uuids(cls, uuids: list[str], *, memory_mib: int = 16384) -> FakeBackend:
        return cls([_FakeGPU(uuid=u, memory_mib=memory_mib) for u in uuids])

    @classmethod
    def from_file(cls, path: str) -> FakeBackend:
        fake = cls([], path=Path(path))
        fake._reload(force=True)
        fake._xids_seen = 0
        return fake

    def _reload(self, force: bool = False) -> None:
        if self.path is None:
            return
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if not force and mtime == self._mtime:
                return
            data = yaml.safe_load(self.path.read_text())
            parsed = msgspec.convert(data, _FakeFile)
        except (OSError, yaml.YAMLError, msgspec.ValidationError) as exc:
            if force:
                raise ConfigError(f"--gpu-backend fake:{self.path}: {exc}; fix the file (keys: "
                                  "gpus[].uuid/model/memoryMiB/smCount/numaNode/nvlinkPeers/minor/"
                                  "utilisation/temperature/powerWatts/lost/processes/"
                                  "mig{capable,enabled,pending}, killAfterMigCreate, "
                                  "xids[].uuid/xid)") from None
            return  # a half-written file during a test's edit: keep the last good state
        if not parsed.gpus:
            raise ConfigError(f"--gpu-backend fake:{self.path}: no gpus listed")
        self._mtime = mtime
        if self.gpus and [g.uuid for g in self.gpus] != [g.uuid for g in parsed.gpus]:
            return  # GPUs do not come and go while running; only their state changes
        self.gpus = parsed.gpus
        self._kill_after_mig_create = parsed.kill_after_mig_create
        for x in parsed.xids[self._xids_seen:]:
            self._queue.append(HealthEvent(uuid=x.uuid, xid=x.xid))
        self._xids_seen = max(self._xids_seen, len(parsed.xids))

    def _gpu(self, uuid: str) -> _FakeGPU:
        self._reload()
        for g in self.gpus:
            if g.uuid == uuid:
                if g.lost:
                    raise GPULost(f"{uuid}: GPU is lost")
                return g
        raise GPULost(f"{uuid}: not a GPU of this node")

    def devices(self) -> tuple[DeviceInfo, ...]:
        return tuple(DeviceInfo(index=i, uuid=g.uuid, model=g.model,
                                memory_bytes=g.memory_mib * MiB, sm_count=g.sm_count,
                                numa_node=g.numa_node, nvlink_peers=tuple(g.nvlink_peers),
                                minor=g.minor)
                     for i, g in enumerate(self.gpus))

    def stats(self, uuid: str) -> DeviceStats:
        g = self._gpu(uuid)
        return DeviceStats(memory_used=sum(p.used_mib for p in g.processes) * MiB,
                           memory_total=g.memory_mib * MiB, utilisation=g.utilisation,
                           temperature=g.temperature, power_watts=g.power_watts)

    def processes(self, uuid: str) -> tuple[ProcessUsage, ...]:
        return tuple(ProcessUsage(pid=p.pid, used_bytes=p.used_mib * MiB)
                     for p in self._gpu(uuid).processes)

    def wait_events(self, timeout_s: float) -> list[HealthEvent]:
        self._reload()
        if not self._queue:
            self._wake.wait(timeout_s)
            self._wake.clear()
            self._reload()
        out, self._queue = self._queue, []
        return [e for e in out if e.xid not in APPLICATION_XIDS]

    # -- run-time injection for in-process tests
    def inject_xid(self, uuid: str, xid: int) -> None:
        self._queue.append(HealthEvent(uuid=uuid, xid=xid))
        self._wake.set()

    def set_lost(self, uuid: str, lost: bool) -> None:
        self.gpus = [replace_struct(g, lost=lost) if g.uuid == uuid else g for g in self.gpus]
        self._wake.set()

    def set_processes(self, uuid: str, procs: dict[int, int]) -> None:
        """pid -> used bytes on that GPU (rounded down to MiB)."""
        new = [_FakeProcess(pid=p, used_mib=b // MiB) for p, b in procs.items()]
        self.gpus = [replace_struct(g, processes=new) if g.uuid == uuid else g for g in self.gpus]

    def close(self) -> None:
        self._wake.set()


def replace_struct(s: Any, **changes: Any) -> Any:
    return msgspec.structs.replace(s, **changes)

"""NVLink peers as the agent's NVML backend reads them, the input of the `topology` policy:
GPUs linked directly, and GPUs linked through NVSwitches (HGX/DGX boards), where each link's
remote end is a switch, not a GPU. pynvml is replaced by a small fake of the calls
NvmlBackend makes. Measured on a real machine by benchmarks/multi_gpu/inventory.py."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from gpuslice.node.nvml import NvmlBackend

NOT_SUPPORTED, STATUS_OK, P2P_NVLINK, SWITCH = 3, 0, 2, 2
BUS = {"GPU-a": "00000000:18:00.0", "GPU-b": "00000000:2A:00.0"}


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _fake_pynvml(remote_bus: dict[str, str], remote_type: int) -> types.ModuleType:
    """Two H200s with 4 active links each; link i of GPU g ends at remote_bus[g] (+ i for a
    switch, one per link); NVML says NVLink P2P is OK between them either way."""
    uuids = list(BUS)

    def unsupported(*_: Any) -> Any:
        raise _NVMLError(NOT_SUPPORTED)

    def remote_pci(h: int, link: int) -> Any:
        bus = remote_bus[uuids[h]]
        return types.SimpleNamespace(busId=bus.replace(":00.0", f":0{link}.0")
                                     if remote_type == SWITCH else bus)

    m = types.ModuleType("pynvml")
    m.__dict__.update(
        NVMLError=_NVMLError, NVML_ERROR_GPU_IS_LOST=15, NVML_ERROR_UNINITIALIZED=1,
        NVML_NVLINK_MAX_LINKS=4, NVML_P2P_CAPS_INDEX_NVLINK=P2P_NVLINK,
        NVML_P2P_STATUS_OK=STATUS_OK,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda h: uuids[h],
        nvmlDeviceGetName=lambda h: "NVIDIA H200", nvmlDeviceGetAttributes=unsupported,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=143771 << 20),
        nvmlDeviceGetNumaNodeId=unsupported, nvmlDeviceGetNvLinkState=lambda h, link: 1,
        nvmlDeviceGetNvLinkRemotePciInfo=remote_pci,
        nvmlDeviceGetNvLinkRemoteDeviceType=lambda h, link: remote_type,
        nvmlDeviceGetP2PStatus=lambda a, b, index: STATUS_OK,
        nvmlDeviceGetMinorNumber=lambda h: h, nvmlSystemGetDriverVersion=lambda: "580.159.04",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=BUS[uuids[h]]))
    return m


def _peers(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType) -> dict[str, tuple[str, ...]]:
    monkeypatch.setitem(sys.modules, "pynvml", module)
    backend = NvmlBackend()
    try:
        return {d.uuid: d.nvlink_peers for d in backend.devices()}
    finally:
        backend.close()


def test_gpus_linked_directly_are_each_others_nvlink_peers(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    direct = _fake_pynvml({"GPU-a": BUS["GPU-b"], "GPU-b": BUS["GPU-a"]}, remote_type=0)
    assert _peers(monkeypatch, direct) == {"GPU-a": ("GPU-b",), "GPU-b": ("GPU-a",)}


def test_gpus_linked_through_nvswitches_are_each_others_nvlink_peers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    switched = _fake_pynvml({"GPU-a": "00000000:C0:00.0", "GPU-b": "00000000:C4:00.0"},
                            remote_type=SWITCH)
    assert _peers(monkeypatch, switched) == {"GPU-a": ("GPU-b",), "GPU-b": ("GPU-a",)}

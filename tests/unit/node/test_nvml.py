"""The GPU backends: the fake's faults, and NVML's failures turned into clear messages."""

from __future__ import annotations

import types

import pynvml
import pytest
import yaml

from gpuslice.errors import ConfigError, EnvironmentProblem
from gpuslice.node import nvml
from gpuslice.node.health import Health
from gpuslice.node.nvml import FakeBackend, GPULost, HealthEvent, open_backend


def test_fake_count_gives_that_many_distinct_gpus():
    b = open_backend("fake:3")
    uuids = [d.uuid for d in b.devices()]
    assert len(set(uuids)) == 3 and all(u.startswith("GPU-") for u in uuids)


@pytest.mark.parametrize("spec", ["fake:0", "fake:x", "cuda", "fake:/no/such.yaml"])
def test_a_bad_backend_spec_is_a_config_error_that_names_it(spec):
    with pytest.raises(ConfigError, match="gpu-backend"):
        open_backend(spec)


def _write(path, doc):
    path.write_text(yaml.safe_dump(doc))


def test_fake_file_carries_models_numa_nvlink_and_processes(tmp_path):
    f = tmp_path / "gpus.yaml"
    _write(f, {"gpus": [
        {"uuid": "GPU-a", "model": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559, "smCount": 132,
         "numaNode": 1, "nvlinkPeers": ["GPU-b"], "processes": [{"pid": 7, "usedMiB": 100}]},
        {"uuid": "GPU-b", "numaNode": None}]})
    b = open_backend(f"fake:{f}")
    a, bb = b.devices()
    assert (a.model, a.memory_bytes, a.sm_count, a.numa_node, a.nvlink_peers) == (
        "NVIDIA H100 80GB HBM3", 81559 << 20, 132, 1, ("GPU-b",))
    assert bb.numa_node is None, "Not Supported NUMA stays None, never 0"
    assert b.processes("GPU-a")[0].used_bytes == 100 << 20
    assert b.stats("GPU-a").memory_used == 100 << 20


def test_xids_appended_to_the_fake_file_are_delivered_once_each(tmp_path):
    f = tmp_path / "gpus.yaml"
    doc = {"gpus": [{"uuid": "GPU-a"}], "xids": []}
    _write(f, doc)
    b = FakeBackend.from_file(str(f))
    assert b.wait_events(0.01) == []
    doc["xids"] = [{"uuid": "GPU-a", "xid": 79}, {"uuid": "GPU-a", "xid": 13}]
    _write(f, doc)
    b._mtime = 0  # same-second rewrite on coarse-mtime filesystems
    assert b.wait_events(0.01) == [HealthEvent("GPU-a", 79)], "XID 13 is the application's"
    assert b.wait_events(0.01) == []


def test_a_lost_fake_gpu_raises_gpulost():
    b = FakeBackend.with_count(1)
    u = b.devices()[0].uuid
    b.set_lost(u, True)
    with pytest.raises(GPULost):
        b.stats(u)


def test_health_marks_an_xid_gpu_unhealthy_then_recovers_after_the_window():
    now = [100.0]
    b = FakeBackend.with_count(2)
    u0, u1 = (d.uuid for d in b.devices())
    h = Health(b, [u0, u1], recovery_s=60, clock=lambda: now[0])
    assert h.on_events([HealthEvent(u0, 79)]) is True
    assert set(h.unhealthy) == {u0}
    now[0] += 59
    assert h.poll() is False and set(h.unhealthy) == {u0}
    now[0] += 1
    assert h.poll() is True and h.unhealthy == {}


def test_health_follows_a_gpu_that_stops_and_resumes_answering():
    b = FakeBackend.with_count(1)
    u = b.devices()[0].uuid
    h = Health(b, [u], recovery_s=60)
    b.set_lost(u, True)
    assert h.poll() is True and "NVML" in h.unhealthy[u]
    b.set_lost(u, False)
    assert h.poll() is True and h.unhealthy == {}


def _error(code):
    return pynvml.NVMLError(code)


def test_no_driver_is_an_environment_problem_that_says_what_to_check(monkeypatch):
    def fail():
        raise _error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(EnvironmentProblem, match="NVIDIA driver is installed") as exc:
        nvml.NvmlBackend()
    assert exc.value.exit_code == 3


def test_no_gpu_is_an_environment_problem(monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    with pytest.raises(EnvironmentProblem, match="no GPU"):
        nvml.NvmlBackend()


def _unsupported(*_):
    raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)


def _fake_nvml(monkeypatch, **more):
    """pynvml answering for one H100 PCIe that supports none of the optional queries."""
    unsupported = _unsupported
    mem = types.SimpleNamespace(total=80 << 30, used=1 << 30)
    fakes = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None, "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: "h0", "nvmlDeviceGetUUID": lambda h: "GPU-x",
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 PCIe", "nvmlDeviceGetAttributes": unsupported,
        "nvmlDeviceGetMemoryInfo": lambda h: mem, "nvmlDeviceGetNumaNodeId": unsupported,
        "nvmlDeviceGetNvLinkState": unsupported, "nvmlDeviceGetUtilizationRates": unsupported,
        "nvmlDeviceGetPowerUsage": unsupported, "nvmlDeviceGetTemperature": unsupported,
        "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(busId=b"0000:01:00.0"),
        "nvmlDeviceGetMinorNumber": unsupported, "nvmlSystemGetDriverVersion": unsupported,
        "nvmlSystemGetCudaDriverVersion": unsupported,
    }
    for name, fn in {**fakes, **more}.items():
        monkeypatch.setattr(pynvml, name, fn)
    return nvml.NvmlBackend()


def test_unsupported_queries_give_none_and_the_model_table_fills_in_sms(monkeypatch):
    b = _fake_nvml(monkeypatch)
    (d,) = b.devices()
    assert (d.sm_count, d.numa_node, d.nvlink_peers, d.minor, d.driver_version) == (
        114, None, (), None, None)
    s = b.stats("GPU-x")
    assert (s.utilisation, s.temperature, s.power_watts) == (None, None, None)
    assert s.memory_used == 1 << 30


def test_critical_xids_become_health_events_and_application_xids_do_not(monkeypatch):
    xids = [79, 13]

    def wait(_set, _ms):
        return types.SimpleNamespace(eventData=xids.pop(0), device="h0")

    b = _fake_nvml(monkeypatch, nvmlEventSetCreate=lambda: "set",
                   nvmlDeviceRegisterEvents=lambda *_: None, nvmlEventSetWait_v2=wait,
                   nvmlEventSetFree=lambda _s: None)
    assert b.wait_events(0.01) == [HealthEvent("GPU-x", 79)]
    assert b.wait_events(0.01) == [], "XID 13 is an application's fault, not the GPU's"
    b.close()
    assert b.wait_events(0.01) == [], "a closed backend waits for nothing"


def test_device_node_minor_and_driver_versions_come_from_nvml(monkeypatch):
    b = _fake_nvml(monkeypatch, nvmlDeviceGetMinorNumber=lambda h: 3,
                   nvmlSystemGetDriverVersion=lambda: b"580.159.04",
                   nvmlSystemGetCudaDriverVersion=lambda: 13000)
    (d,) = b.devices()
    assert (d.minor, d.driver_version, d.cuda_driver_version) == (3, "580.159.04", 13000)

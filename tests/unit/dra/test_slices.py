"""The ResourceSlice a node publishes from its inventory (node/inventory.py: hideGPUs,
memoryScaling, health): the contract's shape, the field names a real v1.36 server took
(dra-samples input/02 and 09), memory steps, health and hiding."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpuslice import model
from gpuslice.dra import DRIVER
from gpuslice.dra.slices import build_slice, cuda_semver, driver_semver, same_devices
from gpuslice.errors import ConfigError
from gpuslice.node.inventory import node_gpus
from gpuslice.node.nvml import DeviceInfo
from gpuslice.node.settings import load
from gpuslice.quantity import parse_quantity
from kubeapi import dra_samples

GiB = 1 << 30
H100 = 81559 * (1 << 20)  # what NVML reports for an H100 80GB HBM3: 81559 MiB


def gpu(index: int, memory: int = H100, numa: int | None = 0) -> DeviceInfo:
    return DeviceInfo(index=index, uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
                      model="NVIDIA H100 80GB HBM3", memory_bytes=memory, sm_count=132,
                      numa_node=numa)


def inventory(*devices: DeviceInfo, scaling: float = 1.0, hidden: tuple[str, ...] = (),
              unhealthy: dict[str, str] | None = None) -> tuple[model.GPU, ...]:
    """The node agent's GPUs for `devices`, as the publisher is given them."""
    cfg = load(None, {"nodeName": "n", "memoryScaling": scaling, "hideGPUs": list(hidden)},
               environ={})
    return node_gpus(devices, cfg, unhealthy or {})


def keys(value: object) -> set[str]:
    """Every dict key path in `value`, list items merged: what names the schema must know."""
    found: set[str] = set()

    def walk(v: object, path: str) -> None:
        if isinstance(v, dict):
            for k, sub in v.items():
                found.add(f"{path}.{k}")
                walk(sub, f"{path}.{k}")
        elif isinstance(v, list):
            for sub in v:
                walk(sub, f"{path}[]")
    walk(value, "")
    return found


def test_a_two_gpu_node_publishes_the_contracts_slice():
    s = build_slice("node-1", inventory(gpu(1), gpu(0)), driver_version="580.159.04",
                    cuda_driver_version=13000)
    assert s["metadata"]["name"] == "node-1-gpu.gpuslice.io"
    assert s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] == "node-1"
    assert s["spec"]["pool"] == {"name": "node-1", "generation": 1, "resourceSliceCount": 1}
    first = s["spec"]["devices"][0]
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0", "gpu-1"], "ordered by index"
    assert first["allowMultipleAllocations"] is True
    assert first["attributes"] == {
        "uuid": {"string": "GPU-00000000-0000-0000-0000-000000000000"},
        "model": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": 0},
        "numaNode": {"int": 0}, "driverVersion": {"version": "580.159.4"},
        "cudaDriverVersion": {"version": "13.0.0"}}
    assert first["capacity"]["memory"] == {"value": "81408Mi", "requestPolicy": {
        "default": "81408Mi", "validRange": {"min": "256Mi", "max": "81408Mi", "step": "256Mi"}}}
    assert first["capacity"]["cores"] == {"value": "100", "requestPolicy": {
        "default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}}


def test_every_field_name_is_one_the_real_server_took():
    """The samples (a real v1.36 server accepted them) use every name we write, except the
    versions and NUMA attributes, whose names we choose (attributes are free-form)."""
    sent = set()
    for _, obj in dra_samples.load("input", ("ResourceSlice",)):
        sent |= keys(obj)
    ours = keys(build_slice("n", inventory(gpu(0))))
    assert ours - sent == {".spec.devices[].attributes.numaNode",
                           ".spec.devices[].attributes.numaNode.int"}


@pytest.mark.parametrize(("scaling", "step", "expected"), [
    (1.0, 256, "81408Mi"), (1.0, 1, "81559Mi"), (0.5, 256, "40704Mi"), (2.0, 1024, "162816Mi")])
def test_memory_is_scaled_then_rounded_down_to_the_step(scaling, step, expected):
    device = build_slice("n", inventory(gpu(0), scaling=scaling),
                         step_mib=step)["spec"]["devices"][0]
    memory = device["capacity"]["memory"]
    assert memory["value"] == expected == memory["requestPolicy"]["default"]
    value, step_q = parse_quantity(expected), parse_quantity(f"{step}Mi")
    assert value % step_q == 0, "the default must lie on min + n*step or the server rejects it"


def test_unhealthy_and_hidden_gpus_are_left_out():
    devices = [gpu(0), gpu(1), gpu(2), gpu(3)]
    s = build_slice("n", inventory(*devices, unhealthy={devices[1].uuid: "XID 79"},
                                   hidden=(devices[2].uuid, "3")))
    assert [d["name"] for d in s["spec"]["devices"]] == ["gpu-0"]


def test_a_node_whose_gpus_are_all_unhealthy_publishes_an_empty_pool():
    s = build_slice("n", inventory(gpu(0), unhealthy={gpu(0).uuid: "lost"}))
    assert s["spec"]["devices"] == [] and s["spec"]["pool"]["name"] == "n"


def test_unknown_numa_and_versions_are_omitted_not_guessed():
    attributes = build_slice("n", inventory(gpu(0, numa=None)), driver_version="garbage",
                             cuda_driver_version=None)["spec"]["devices"][0]["attributes"]
    assert set(attributes) == {"uuid", "model", "index"}


def test_a_gpu_smaller_than_one_step_is_a_config_error_that_names_the_fix():
    with pytest.raises(ConfigError, match=r"GPU 0 .*dra.memoryStepMiB"):
        build_slice("n", inventory(gpu(0, memory=200 * (1 << 20))))
    with pytest.raises(ConfigError, match="memoryStepMiB=0"):
        build_slice("n", inventory(gpu(0)), step_mib=0)


@pytest.mark.parametrize(("text", "expected"), [
    ("580.159.04", "580.159.4"), ("535.104.05", "535.104.5"), ("580.65", "580.65.0"),
    ("580", None), ("580.x.1", None), ("", None), (None, None), ("1.2.3.4", None)])
def test_driver_versions_are_semver_ised(text, expected):
    assert driver_semver(text) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (13000, "13.0.0"), (12080, "12.8.0"), ("12.8", "12.8.0"), (0, None), (True, None)])
def test_cuda_versions_are_semver_ised(value, expected):
    assert cuda_semver(value) == expected


def test_slices_compare_by_quantity_value_not_spelling():
    ours = build_slice("n", inventory(gpu(0, memory=80 * GiB)))
    stored = build_slice("n", inventory(gpu(0, memory=80 * GiB)), generation=7)
    stored["spec"]["devices"][0]["capacity"]["memory"]["value"] = "80Gi"  # server's spelling
    assert parse_quantity("81920Mi") == Fraction(80 * GiB)
    assert same_devices(ours, stored), "same devices though generation and spelling differ"
    stored["spec"]["devices"][0].pop("allowMultipleAllocations")
    assert not same_devices(ours, stored)
    assert not same_devices(ours, None)


def test_what_a_real_server_stored_compares_equal_to_what_was_sent_unless_the_gate_is_off():
    """Read-back must not see a change where the server only respelled (dra-samples final-*),
    and must see the gate-off drop (e1)."""
    sent = {o["metadata"]["name"]: o for _, o in dra_samples.load("input", ("ResourceSlice",))}
    stored = dra_samples.load("returned", ("ResourceSlice",))
    assert len(stored) == 4
    for name, obj in stored:
        assert same_devices(sent[obj["metadata"]["name"]], obj) == (not name.startswith("e1-"))


def test_a_built_slice_is_the_callers_to_change():
    first = build_slice("n", inventory(gpu(0)))
    first["spec"]["devices"][0]["capacity"]["cores"].pop("requestPolicy")  # as the gate-off drop
    again = build_slice("n", inventory(gpu(0)))
    assert "requestPolicy" in again["spec"]["devices"][0]["capacity"]["cores"]

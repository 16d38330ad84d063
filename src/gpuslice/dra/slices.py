"""PURE: a node's GPUs -> its ResourceSlice (resource.k8s.io/v1), one slice per node and pool.
Owns: the slice's shape (name `<node>-<driver>`, pool = the node, one device `gpu-<index>` per
healthy GPU with attributes and consumable capacity `memory` in MiB steps and `cores` in
percent, `allowMultipleAllocations: true`), `published_mib()` (the plugin sizes devices with
it too), semver-ising NVML's version strings, and `same_devices()`: whether two slices publish
the same devices (quantities compared by value, as the API server rewrites "81920Mi" as "80Gi").
Invariants: requestPolicy.default of memory = the whole capacity, so a claim that names no
capacity takes a whole GPU; unhealthy GPUs are left out; devices ordered by NVML index.
Does not: talk to the API (publisher.py), read NVML (node/nvml.py), or hide GPUs and scale
their memory (node/inventory.py: the GPUs it is given are the inventory's).
On a GPU smaller than one memory step after memoryScaling: ConfigError naming both.
Tests: tests/unit/dra/test_slices*.py"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpuslice import model
from gpuslice.dra import DRIVER
from gpuslice.errors import ConfigError
from gpuslice.quantity import parse_quantity

__all__ = ["API_VERSION", "DEFAULT_STEP_MIB", "build_slice", "cuda_semver", "device_name",
           "driver_semver", "published_mib", "same_devices", "slice_name"]

API_VERSION = "resource.k8s.io/v1"
DEFAULT_STEP_MIB = 256
# A claim that names no cores consumes none and runs without a compute limit (as a slice
# without gpucores does on the device-plugin path); memory's default is the whole GPU, so a claim
# that names nothing still takes the whole GPU.
CORES = {"value": "100", "requestPolicy": {
    "default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}}


def slice_name(node: str, driver: str = DRIVER) -> str:
    return f"{node}-{driver}"


def device_name(index: int) -> str:
    return f"gpu-{index}"


def driver_semver(text: str | None) -> str | None:
    """NVML's driver version as semver: "580.159.04" -> "580.159.4", "580.65" -> "580.65.0";
    None when it is not two or three dot-separated numbers."""
    parts = (text or "").strip().split(".")
    if not 2 <= len(parts) <= 3 or not all(re.fullmatch(r"\d+", p) for p in parts):
        return None
    numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
    return ".".join(map(str, numbers))


def cuda_semver(version: int | str | None) -> str | None:
    """CUDA driver version as semver: NVML's 13000 -> "13.0.0", "12.8" -> "12.8.0"."""
    if isinstance(version, int) and not isinstance(version, bool) and version > 0:
        return f"{version // 1000}.{version % 1000 // 10}.0"
    return driver_semver(version) if isinstance(version, str) else None


def published_mib(memory_mib: int, step_mib: int) -> int:
    """A GPU's `memory` capacity: its MiB (after memoryScaling) rounded down to the step."""
    return memory_mib // step_mib * step_mib


def _device(g: model.GPU, step_mib: int, versions: Mapping[str, str | None]) -> dict[str, Any]:
    memory_mib = published_mib(g.memory_mib, step_mib)
    if memory_mib < step_mib:
        raise ConfigError(
            f"GPU {g.index} ({g.uuid}) has {g.memory_mib} MiB after memoryScaling: less than "
            f"one DRA memory step ({step_mib} MiB): lower dra.memoryStepMiB or raise "
            "memoryScaling in the node config")
    attributes: dict[str, Any] = {"uuid": {"string": g.uuid}, "model": {"string": g.model},
                                  "index": {"int": g.index}}
    if g.numa_node is not None and g.numa_node >= 0:
        attributes["numaNode"] = {"int": g.numa_node}
    attributes.update({k: {"version": v} for k, v in versions.items() if v})
    memory = f"{memory_mib}Mi"
    return {
        "name": device_name(g.index),
        "allowMultipleAllocations": True,
        "attributes": attributes,
        "capacity": {
            "memory": {"value": memory, "requestPolicy": {
                "default": memory,
                "validRange": {"min": f"{step_mib}Mi", "max": memory, "step": f"{step_mib}Mi"}}},
            "cores": copy.deepcopy(CORES),  # the caller's to change
        },
    }


def build_slice(node: str, gpus: Sequence[model.GPU], *, step_mib: int = DEFAULT_STEP_MIB,
                driver: str = DRIVER, generation: int = 1, driver_version: str | None = None,
                cuda_driver_version: int | str | None = None) -> dict[str, Any]:
    """The ResourceSlice for `node`: every healthy GPU of `gpus` (the node's inventory)."""
    if step_mib < 1:
        raise ConfigError(f"dra.memoryStepMiB={step_mib}: use a whole number of MiB >= 1 "
                          f"(default {DEFAULT_STEP_MIB})")
    versions = {"driverVersion": driver_semver(driver_version),
                "cudaDriverVersion": cuda_semver(cuda_driver_version)}
    shown = sorted((g for g in gpus if g.healthy), key=lambda g: g.index)
    return {
        "apiVersion": API_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node, driver)},
        "spec": {
            "driver": driver, "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [_device(g, step_mib, versions) for g in shown],
        },
    }


def _canonical(value: Any) -> Any:
    """Quantities as numbers: the server stores "81920Mi" as "80Gi" and "100" as "100"."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, str):
        try:
            return parse_quantity(value)
        except ValueError:
            return value
    return value


def same_devices(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two slices publish the same devices (driver, node and devices; not the pool's
    generation). Strings that parse as quantities compare by value."""
    def key(s: Mapping[str, Any] | None) -> Any:
        spec = (s or {}).get("spec") or {}
        return _canonical({k: spec.get(k) for k in ("driver", "nodeName", "devices")})
    return a is not None and b is not None and key(a) == key(b)

"""The vocabulary every part of gpuslice shares: GPUs, nodes, slice requests, assignments.

Owns: immutable value types (msgspec Structs, frozen) and their simple derived facts.
Does not: parse user input (dialects.py), encode annotations (codec.py), or place (allocator/).
Invariants: every value is already validated when built by the boundary modules; a
SliceRequest always has exactly one of memory_mib / memory_percent set (defaults are
resolved at the boundary, never here); cores is a percent of one GPU, 100 = exclusive.
Tests: tests/unit/test_model.py
"""

from __future__ import annotations

import enum

import msgspec

from gpuslice.mig import MigGPU, MigSlice

__all__ = [
    "EXCLUSIVE_CORES",
    "GPU",
    "GPU_POLICIES",
    "NODE_POLICIES",
    "ContainerAssignment",
    "ContainerKind",
    "GPUFilter",
    "GPUSlice",
    "NodeInventory",
    "PodAssignment",
    "PodRequest",
    "Priority",
    "SliceRequest",
]

EXCLUSIVE_CORES = 100
"""A slice asking for 100 % of the cores owns the GPU alone (HAMi's `gpucores: 100`)."""

NODE_POLICIES = ("binpack", "spread")
"""Names of node-level policies (allocator/policies registers one implementation each)."""

GPU_POLICIES = ("binpack", "spread", "topology")
"""Names of GPU-level policies; `topology` prefers same-NUMA / NVLink sets for multi-GPU."""


class Priority(enum.IntEnum):
    """HAMi's `nvidia.com/priority`: 0 is high (never throttled by low), 1 is low."""

    HIGH = 0
    LOW = 1


class ContainerKind(enum.StrEnum):
    """Where a container sits in the pod's lifecycle; decides whose slices overlap in time."""

    INIT = "init"  # runs to completion, one at a time, before the app containers
    SIDECAR = "sidecar"  # init container with restartPolicy: Always; lives as long as the pod
    APP = "app"


class GPU(msgspec.Struct, frozen=True, kw_only=True):
    """One physical GPU as the node agent reports it in the node inventory."""

    uuid: str
    model: str  # NVML product name, e.g. "NVIDIA H100 80GB HBM3"
    memory_mib: int
    index: int = 0  # NVML index on its node
    sm_count: int = 0
    numa_node: int | None = None  # None: not reported (e.g. VMs answer Not Supported)
    nvlink_peers: tuple[str, ...] = ()  # UUIDs reachable over NVLink
    healthy: bool = True
    split_count: int = 10  # most slices that may share this GPU at once
    mig: MigGPU | None = None  # None: shared through the library (shim); else MIG mode

    @property
    def mode(self) -> str:
        return "shim" if self.mig is None else "mig"


class NodeInventory(msgspec.Struct, frozen=True, kw_only=True):
    """A GPU node: its name and its GPUs, in NVML index order."""

    node: str
    gpus: tuple[GPU, ...]


class GPUFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Pod-level include/exclude lists (HAMi's use-/nouse-gputype and -gpuuuid annotations).

    Type entries match a GPU whose model contains the entry, case-insensitively
    ("A100" matches "NVIDIA A100-SXM4-80GB"). Empty include lists mean "any".
    """

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()


class SliceRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What one container asks for: `count` GPUs, each with this memory and core share."""

    container: str
    kind: ContainerKind = ContainerKind.APP
    count: int = 1
    memory_mib: int | None = None  # absolute MiB per GPU ...
    memory_percent: int | None = None  # ... or percent of each chosen GPU's memory
    cores: int = 0  # percent of one GPU's compute; 0 = best effort, 100 = exclusive
    priority: Priority = Priority.HIGH

    @property
    def exclusive(self) -> bool:
        return self.cores >= EXCLUSIVE_CORES

    def memory_on(self, gpu: GPU) -> int:
        """MiB this request takes on `gpu` (percent requests scale with the GPU's size)."""
        if self.memory_mib is not None:
            return self.memory_mib
        assert self.memory_percent is not None, "boundary must resolve memory defaults"
        return gpu.memory_mib * self.memory_percent // 100


class PodRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the scheduler needs to place one pod: its slices and pod-level options."""

    namespace: str
    name: str
    uid: str = ""
    slices: tuple[SliceRequest, ...] = ()  # only containers that ask for GPUs
    filter: GPUFilter = GPUFilter()
    node_policy: str | None = None  # per-pod override of the node policy (by registry name)
    gpu_policy: str | None = None  # per-pod override of the GPU policy
    mig: bool = False  # every slice wants a MIG instance (docs/mig.md), not a library share

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class GPUSlice(msgspec.Struct, frozen=True, kw_only=True):
    """One share of one GPU given to one container."""

    uuid: str
    memory_mib: int
    cores: int
    mig: MigSlice | None = None  # a MIG instance of the GPU (memory_mib is the profile's)


class ContainerAssignment(msgspec.Struct, frozen=True, kw_only=True):
    """The slices one container (by name) received, one per requested GPU.

    `kind` travels with it so that a pod's footprint on a GPU can be rebuilt from the
    annotation alone (init containers do not overlap in time with app containers).
    """

    container: str
    slices: tuple[GPUSlice, ...]
    kind: ContainerKind = ContainerKind.APP


class PodAssignment(msgspec.Struct, frozen=True, kw_only=True):
    """Where a pod's slices went: its node and, per container, which GPUs and how much."""

    node: str
    containers: tuple[ContainerAssignment, ...]

    def slices(self) -> tuple[GPUSlice, ...]:
        return tuple(s for c in self.containers for s in c.slices)

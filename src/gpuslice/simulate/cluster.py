"""Cluster file (YAML) -> NodeInventory list: the simulated cluster, node groups x GPU models.

Owns: the cluster file schema (version 1), its strict validation and the expansion of each
node group into named nodes (`<name>-000`, ...) with deterministic GPU UUIDs, NUMA and NVLink.
Does not: place anything (allocator/) or read traces (trace.py).
Invariants: same file -> same inventories, byte for byte (UUIDs are uuid5 of node/index);
NUMA nodes split a node's GPUs evenly in index order; nvlink: true makes all GPUs of a node peers.
Failure: any problem -> errors.InputFileError naming the file, the entry
(`nodeGroups[1].gpu.memoryMiB`), what is wrong and the fix. Never a traceback.
Tests: tests/unit/simulate/test_cluster_file.py
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from gpuslice import mig
from gpuslice.errors import InputFileError
from gpuslice.model import GPU, NodeInventory
from gpuslice.simulate._validate import explain
from gpuslice.simulate._yaml import load_yaml

__all__ = ["ClusterSpec", "GPUSpec", "NodeGroup", "load_cluster", "parse_cluster"]

_UUID_NS = uuid.UUID("6b1d3c52-6f1e-4d1a-9a59-0d7f2c5e8a11")  # fixed: UUIDs stable across runs
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$")
MAX_NODES = 100_000
MAX_GPUS_PER_NODE = 64

_HINTS = {
    "version": "write `version: 1`",
    "nodeGroups": "list node groups, e.g. `- {name: h100, count: 10, gpu: {...}}`",
    "name": "use a lower-case name such as `h100` (nodes become h100-000, h100-001, ...)",
    "count": "give a whole number >= 1",
    "gpu": "describe the GPU: {model, count, memoryMiB} (+ smCount, splitCount, numaNodes, nvlink)",
    "model": 'quote the NVML product name, e.g. "NVIDIA H100 80GB HBM3"',
    "memoryMiB": "give each GPU's memory in MiB as a whole number, e.g. 81559 for an H100 80GB",
    "smCount": "give the number of SMs as a whole number >= 0, e.g. 132",
    "splitCount": "give the most slices per GPU as a whole number >= 1 (default 10)",
    "numaNodes": "give how many NUMA nodes the GPUs are split over (1..GPU count), or leave it out",
    "nvlink": "write true (all GPUs of a node are NVLink peers) or false",
    "mode": "write shim (shared slices, the default) or mig (MIG instances, docs/mig.md)",
    "migProfiles": 'list the MIG profiles pods may get, e.g. ["1g.10gb", "3g.40gb"]',
}


class GPUSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The GPUs of every node in a group: all alike."""

    model: str
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS_PER_NODE)]
    memory_mib: Annotated[int, msgspec.Meta(gt=0)] = msgspec.field(name="memoryMiB")
    sm_count: Annotated[int, msgspec.Meta(ge=0)] = msgspec.field(default=0, name="smCount")
    split_count: Annotated[int, msgspec.Meta(ge=1)] = msgspec.field(default=10, name="splitCount")
    numa_nodes: Annotated[int, msgspec.Meta(ge=1)] | None = msgspec.field(
        default=None, name="numaNodes")
    nvlink: bool = False
    mode: Literal["shim", "mig"] = "shim"
    mig_profiles: list[str] | None = msgspec.field(default=None, name="migProfiles")


class NodeGroup(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`count` identical nodes named `<name>-000` ... ."""

    name: str
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_NODES)]
    gpu: GPUSpec


class ClusterSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The whole cluster file."""

    version: int
    node_groups: Annotated[list[NodeGroup], msgspec.Meta(min_length=1)] = msgspec.field(
        name="nodeGroups")


def _known_keys(path: str) -> str:
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    struct: Any = (GPUSpec if parent.endswith(".gpu") else NodeGroup if parent else ClusterSpec)
    return ", ".join(f.encode_name for f in msgspec.structs.fields(struct))


def _fail(file: str, path: str, what: str) -> InputFileError:
    key = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1]) if path else ""
    if what == "unknown key":
        hint = f"remove it or fix its spelling (known keys here: {_known_keys(path)})"
    else:
        hint = _HINTS.get(key, "see docs/simulate.md, section 'Cluster file'")
    where = f"{path}: " if path else ""
    return InputFileError(f"{file}: {where}{what}; {hint}")


def parse_cluster(data: Any, *, file: str = "cluster.yaml") -> list[NodeInventory]:
    """Validate an already YAML-loaded cluster document and expand it into nodes."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise _fail(file, "", f"expected a mapping with version and nodeGroups, got {got}")
    try:
        spec = msgspec.convert(data, ClusterSpec)
    except msgspec.ValidationError as exc:
        raise _fail(file, *explain(exc)) from None
    if spec.version != 1:
        raise _fail(file, "version", f"unsupported version {spec.version} (this gpuslice reads 1)")
    seen: set[str] = set()
    total = 0
    for i, group in enumerate(spec.node_groups):
        where = f"nodeGroups[{i}]"
        if not _NAME.match(group.name):
            raise _fail(file, f"{where}.name",
                        f"{group.name!r} is not a lower-case DNS label (a-z, 0-9, '-')")
        if group.name in seen:
            raise _fail(file, f"{where}.name", f"duplicate group name {group.name!r}")
        seen.add(group.name)
        g = group.gpu
        if not g.model.strip():
            raise _fail(file, f"{where}.gpu.model", "empty model name")
        if g.numa_nodes is not None and g.numa_nodes > g.count:
            raise _fail(file, f"{where}.gpu.numaNodes",
                        f"{g.numa_nodes} NUMA nodes for {g.count} GPUs (at most one per GPU)")
        if g.mode == "mig" or g.mig_profiles is not None:
            _check_mig(file, where, g)
        total += group.count
    if total > MAX_NODES:
        raise _fail(file, "nodeGroups", f"{total} nodes in all, more than {MAX_NODES}")
    return [_node(f"{group.name}-{n:03d}", group.gpu)
            for group in spec.node_groups for n in range(group.count)]


def _mig_gpu(spec: GPUSpec) -> mig.MigGPU | None:
    if spec.mode != "mig":
        return None
    table = mig.catalog_for(spec.model, spec.memory_mib)
    if spec.mig_profiles is not None:
        table = tuple(p for p in table if p.name in spec.mig_profiles)
    return mig.MigGPU(profiles=table)


def _check_mig(file: str, where: str, g: GPUSpec) -> None:
    table = mig.catalog_for(g.model, g.memory_mib)
    if not table:
        raise _fail(file, f"{where}.gpu.mode", f"no MIG profile table for {g.model!r} with "
                    f"{g.memory_mib} MiB (MIG tables: A100 40/80GB, H100 80/94GB, H200 141GB)")
    if g.mode != "mig":
        raise _fail(file, f"{where}.gpu.migProfiles", "given for a group in shim mode; add "
                    "`mode: mig` or remove migProfiles")
    unknown = [n for n in g.mig_profiles or () if n not in {p.name for p in table}]
    if unknown or g.mig_profiles == []:
        raise _fail(file, f"{where}.gpu.migProfiles",
                    f"{', '.join(unknown) or 'empty list'}: not a profile of {g.model} "
                    f"(it has {', '.join(p.name for p in table)})")


def _node(name: str, spec: GPUSpec) -> NodeInventory:
    uuids = [f"GPU-{uuid.uuid5(_UUID_NS, f'{name}/{i}')}" for i in range(spec.count)]
    gpus = []
    for i, u in enumerate(uuids):
        numa = None if spec.numa_nodes is None else i * spec.numa_nodes // spec.count
        peers = tuple(p for p in uuids if p != u) if spec.nvlink else ()
        gpus.append(GPU(uuid=u, model=spec.model, memory_mib=spec.memory_mib, index=i,
                        sm_count=spec.sm_count, numa_node=numa, nvlink_peers=peers,
                        split_count=spec.split_count, mig=_mig_gpu(spec)))
    return NodeInventory(node=name, gpus=tuple(gpus))


def load_cluster(path: str | Path) -> list[NodeInventory]:
    """Read and validate a cluster file; see parse_cluster."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{file}: cannot read the cluster file: {exc}; "
                             "check the --cluster path") from None
    data = load_yaml(text, file=file, fix="fix the syntax (indentation, quotes, colons)")
    return parse_cluster(data, file=file)

"""PURE: a ResourceClaim's allocation -> the shares this node must enforce (the kubelet plugin's
input; container/limits.py turns them into the claim's region limits).

Owns: reading `status.allocation.devices.results[]` (entries of our driver and this node's
pool), both result shapes (a share: `consumedCapacity` + `shareID`; an exclusive device, or a
server with DRAConsumableCapacity off: neither = the whole device), memory rounding (UP to MiB),
checking each result against the devices this node publishes (slices.py's names and sizes),
and the priority of the driver's opaque config (ShareConfig, written by webhook/dra.py).
Does not: talk to the API (plugin.py fetches the claim) or write anything (cdi.py, regions).
Invariants: the limits are `consumedCapacity` (what the scheduler counted), never the request;
cores 0 (the published default: the claim named none) and 100 = no compute limit.
Failure: DraError naming the claim, the device and what to do.
Tests: tests/unit/dra/test_claims.py (golden: tests/golden/dra-samples/returned/)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuslice import model
from gpuslice.container.limits import FULL_CORES, ClaimShares, MiB, Share
from gpuslice.dra.slices import device_name, published_mib
from gpuslice.errors import GpusliceError, brief
from gpuslice.quantity import QuantityError, parse_quantity

__all__ = ["CONFIG_API_VERSION", "CONFIG_KIND", "DraError", "NodeDevice", "node_devices",
           "priority", "reserved_pods", "shares"]

# the opaque config a claim may carry for this driver (the webhook writes it for HAMi's
# nvidia.com/priority; docs/dra.md)
CONFIG_API_VERSION = "gpu.gpuslice.io/v1alpha1"
CONFIG_KIND = "ShareConfig"
_CONFIG_FIELDS = {"apiVersion", "kind", "priority"}


class DraError(GpusliceError):
    """A claim cannot be prepared on this node; the message reaches the pod's events."""


@dataclass(frozen=True)
class NodeDevice:
    """A GPU as this node publishes it in its ResourceSlice."""

    name: str  # gpu-<nvml index>
    uuid: str
    minor: int  # /dev/nvidia<minor> (NVML's minor number; the NVML index where it has none)
    memory_mib: int  # the published capacity: scaled memory rounded down to the step
    healthy: bool


def node_devices(gpus: Sequence[model.GPU], step_mib: int,
                 minors: Mapping[str, int] | None = None) -> dict[str, NodeDevice]:
    """The devices this node publishes (slices.py), by name; unhealthy ones too, marked, so a
    claim on one gets the right error (hidden GPUs are not in `gpus`). `minors`: uuid -> the
    device node's minor number, where NVML knows it."""
    minors = minors or {}
    return {device_name(g.index): NodeDevice(device_name(g.index), g.uuid,
                                             minors.get(g.uuid, g.index),
                                             published_mib(g.memory_mib, step_mib), g.healthy)
            for g in gpus}


def _capacity(value: Any, *, where: str, what: str) -> Any:
    try:
        return parse_quantity(value, field=f"{where} consumedCapacity.{what}")
    except QuantityError as exc:
        raise DraError(f"{exc}; the claim's allocation is malformed: delete the pod and the "
                       "claim so that the scheduler allocates it again") from None


def _share(r: Mapping[str, Any], dev: NodeDevice, where: str) -> Share:
    consumed = r.get("consumedCapacity")
    memory, cores = dev.memory_mib, FULL_CORES
    if isinstance(consumed, Mapping):
        if "memory" in consumed:
            memory = math.ceil(_capacity(consumed["memory"], where=where, what="memory") / MiB)
        if "cores" in consumed:
            cores = math.ceil(_capacity(consumed["cores"], where=where, what="cores"))
    elif consumed is not None:
        raise DraError(f"{where}: consumedCapacity is not a map; delete the pod and the claim so "
                       "that the scheduler allocates it again")
    if not 0 < memory <= dev.memory_mib or not 0 <= cores <= FULL_CORES:
        raise DraError(f"{where}: consumes {memory} MiB / {cores} cores of {dev.name}, which "
                       f"publishes {dev.memory_mib} MiB / {FULL_CORES}; the slice changed since "
                       "the scheduler allocated (memoryScaling or memoryStepMiB): delete the pod "
                       "and the claim so that it is allocated again")
    cores = cores or FULL_CORES  # consumed none: no compute limit
    share_id = r.get("shareID")
    return Share(str(r.get("request", "")), dev.name, dev.uuid, dev.minor, memory, cores,
                 str(share_id) if share_id else None)


def shares(claim: Mapping[str, Any], *, driver: str, node: str,
           devices: Mapping[str, NodeDevice]) -> ClaimShares:
    """The claim's shares on this node; DraError if any of them cannot be honoured here."""
    meta = claim.get("metadata") or {}
    key = f"claim {meta.get('namespace', '')}/{meta.get('name', '')}"
    status = claim.get("status") or {}
    alloc = status.get("allocation")
    if not isinstance(alloc, Mapping):
        raise DraError(f"{key}: not allocated (status.allocation is empty); the kubelet prepares "
                       "claims only after the scheduler allocated them: check the claim's pod "
                       "was scheduled by kube-scheduler with DRA enabled")
    results = (alloc.get("devices") or {}).get("results") or []
    ours = [r for r in results if isinstance(r, Mapping) and r.get("driver") == driver]
    mine = [r for r in ours if r.get("pool") == node]
    if not mine:
        pools = sorted({str(r.get("pool")) for r in ours})
        raise DraError(f"{key}: none of its {driver} devices is on node {node} (allocated in "
                       f"pools {', '.join(pools) or 'none'}); the pod runs on another node than "
                       "its claim was allocated for: delete the pod")
    out = []
    for r in mine:
        where = f"{key} device {node}/{r.get('device')}"
        dev = devices.get(str(r.get("device")))
        if dev is None:
            raise DraError(f"{where}: this node has no such GPU now (gone, hidden or renumbered; "
                           f"it has {', '.join(sorted(devices)) or 'none'}); delete the pod and "
                           "the claim so that the scheduler allocates a GPU that exists")
        if not dev.healthy:
            raise DraError(f"{where}: GPU {dev.uuid} is unhealthy (it is no longer published); "
                           "delete the pod and the claim so that another GPU is allocated")
        out.append(_share(r, dev, where))
    return ClaimShares(str(meta.get("uid", "")), str(meta.get("namespace", "")),
                       str(meta.get("name", "")), tuple(out), reserved_pods(claim),
                       priority(alloc, driver=driver, where=key))


def priority(alloc: Mapping[str, Any], *, driver: str, where: str) -> int:
    """HAMi's priority from the allocation's opaque config of `driver` (kind ShareConfig, which
    the webhook writes for `nvidia.com/priority`): 0 (high, the default) or 1 (low)."""
    got = 0
    for entry in (alloc.get("devices") or {}).get("config") or ():
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, Mapping) or params.get("apiVersion") != CONFIG_API_VERSION \
                or params.get("kind") != CONFIG_KIND or set(params) - _CONFIG_FIELDS:
            raise DraError(f"{where}: opaque config of {driver} {brief(params)}: not a "
                           f"{CONFIG_API_VERSION} {CONFIG_KIND} (fields: priority); fix the "
                           "claim's spec.devices.config, or remove it")
        value = params.get("priority", 0)
        if value not in (0, 1) or isinstance(value, bool):
            raise DraError(f"{where}: {CONFIG_KIND} priority={brief(value)}: use 0 (high) or "
                           "1 (low)")
        got = max(got, int(value))  # several configs: the lowest priority wins
    return got


def reserved_pods(claim: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(name, uid) of the pods in the claim's status.reservedFor."""
    return tuple((str(p.get("name", "")), str(p.get("uid", "")))
                 for p in (claim.get("status") or {}).get("reservedFor") or []
                 if isinstance(p, Mapping) and p.get("resource") == "pods")

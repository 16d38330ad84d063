"""PURE: the limits a DRA claim's containers get: its shares on this node, as one region.

Owns: `Share` and `ClaimShares` (what dra/claims.py reads from a claim's allocation, with the
gang its pods name (dra/plugin.py), what the checkpoint keeps, what the exporter and the
watchdog label and check usage with) and `region_spec` (one region per claim: the limits the
library enforces).
Does not: read allocations (dra/claims.py) or write regions (container/regions.py).
Invariants: one cap per GPU (two shares of one claim on one GPU add up), sm_limit = the largest
cores of its GPUs; the limits are exactly the shares' consumedCapacity.
Tests: tests/unit/dra/test_claims.py
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuslice.shim import RegionSpec

__all__ = ["FULL_CORES", "ClaimShares", "MiB", "Share", "region_spec"]

MiB = 1 << 20
FULL_CORES = 100


@dataclass(frozen=True)
class Share:
    """One allocation result of this node: a device, its limits and the share it is."""

    request: str
    device: str
    uuid: str
    minor: int  # /dev/nvidia<minor>
    memory_mib: int
    cores: int  # 1..100; 100 = no compute limit
    share_id: str | None  # None: the whole device (no consumedCapacity)


@dataclass(frozen=True)
class ClaimShares:
    uid: str
    namespace: str
    name: str
    shares: tuple[Share, ...]
    pods: tuple[tuple[str, str], ...]  # (name, uid) of the pods in status.reservedFor
    priority: int = 0  # HAMi's nvidia.com/priority (0 high, 1 low): the claim's opaque config
    # the gpuslice.io/gang its pods name, read at the first prepare ("" none; a checkpoint entry
    # written before gangs reached the DRA path has none)
    gang: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def region_spec(c: ClaimShares, *, compute_mode: str = "hard") -> RegionSpec:
    """The claim's region: its GPUs in first-seen order, each with the memory of its shares
    (two shares of one claim on one GPU add up), the largest cores as sm_limit, and the
    claim's priority."""
    memory: dict[str, int] = {}
    cores: dict[str, int] = {}
    for s in c.shares:
        memory[s.uuid] = memory.get(s.uuid, 0) + s.memory_mib
        cores[s.uuid] = min(FULL_CORES, cores.get(s.uuid, 0) + s.cores)
    return RegionSpec(device_uuids=tuple(memory), limits=tuple(m * MiB for m in memory.values()),
                      sm_limit=max(cores.values()), compute_mode=compute_mode,
                      priority=c.priority)

"""The node's GPUs as the scheduler sees them: the `gpuslice.io/inventory` node annotation.

Owns: turning discovered GPUs + health + the per-node overrides (splitCount, memoryScaling,
hideGPUs by UUID or NVML index) into model.GPU values, and publishing their encoding at start,
whenever it changes (health), and every `inventory_interval_seconds` (so a hand-edited or
lost annotation heals).
Does not: talk to NVML (nvml.py) or the API (cluster.py queues the write).
Invariants: hidden GPUs are neither published nor advertised to the kubelet; memory is
published in MiB scaled by memoryScaling (rounded down).
Tests: tests/unit/node/test_inventory.py
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from gpuslice import codec, model
from gpuslice.node.nvml import DeviceInfo
from gpuslice.node.settings import NodeConfig

__all__ = ["Inventory", "node_gpus"]

log = logging.getLogger(__name__)
MiB = 1 << 20


def node_gpus(devices: Sequence[DeviceInfo], cfg: NodeConfig,
              unhealthy: Mapping[str, str]) -> tuple[model.GPU, ...]:
    hidden = set(cfg.hide_gpus)
    unknown = hidden - {d.uuid for d in devices} - {str(d.index) for d in devices}
    if unknown:
        log.warning("hideGPUs names no GPU of this node: %s", ", ".join(sorted(unknown)))
    shown = [d for d in devices if d.uuid not in hidden and str(d.index) not in hidden]
    uuids = {d.uuid for d in shown}
    return tuple(model.GPU(
        uuid=d.uuid, model=d.model, memory_mib=int(d.memory_bytes // MiB * cfg.memory_scaling),
        index=d.index, sm_count=d.sm_count, numa_node=d.numa_node,
        nvlink_peers=tuple(p for p in d.nvlink_peers if p in uuids),
        healthy=d.uuid not in unhealthy, split_count=cfg.split_count) for d in shown)


class Inventory:
    def __init__(self, devices: Sequence[DeviceInfo], cfg: NodeConfig,
                 publish: Callable[[str, str], None], *,
                 clock: Callable[[], float] = time.monotonic,
                 decorate: Callable[[tuple[model.GPU, ...]], tuple[model.GPU, ...]] | None = None
                 ) -> None:
        self._decorate = decorate or (lambda gpus: gpus)  # MIG mode adds its blocks (node/mig.py)
        self._devices = tuple(devices)
        self._cfg = cfg
        self._publish = publish
        self._clock = clock
        self._last: str | None = None
        self._last_at = 0.0
        self.gpus: tuple[model.GPU, ...] = self._decorate(node_gpus(self._devices, cfg, {}))

    def update(self, unhealthy: Mapping[str, str]) -> bool:
        """Recompute with this health; publish if changed or due. True when GPUs changed."""
        gpus = self._decorate(node_gpus(self._devices, self._cfg, unhealthy))
        changed = gpus != self.gpus
        self.gpus = gpus
        text = codec.encode_inventory(model.NodeInventory(node=self._cfg.node_name, gpus=gpus))
        due = self._clock() - self._last_at >= self._cfg.inventory_interval_seconds
        if text != self._last or due:
            self._publish(codec.INVENTORY_ANNOTATION, text)
            self._last, self._last_at = text, self._clock()
        return changed

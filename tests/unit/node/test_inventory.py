"""The inventory annotation: overrides applied, published on change and periodically."""

from __future__ import annotations

from gpuslice import codec
from gpuslice.node.inventory import Inventory, node_gpus
from gpuslice.node.nvml import DeviceInfo
from gpuslice.node.settings import load

DEVICES = [DeviceInfo(index=i, uuid=f"GPU-{i}", model="NVIDIA H100 80GB HBM3",
                      memory_bytes=81559 << 20, sm_count=132, numa_node=None,
                      nvlink_peers=tuple(f"GPU-{j}" for j in range(3) if j != i))
           for i in range(3)]


def _cfg(**flags):
    return load(None, flags={"nodeName": "n1", **flags}, environ={})


def test_overrides_hide_gpus_scale_memory_and_set_the_split_count():
    gpus = node_gpus(DEVICES, _cfg(hideGPUs=["1"], memoryScaling=0.5, splitCount=4), {})
    assert [g.uuid for g in gpus] == ["GPU-0", "GPU-2"]
    assert gpus[0].memory_mib == 81559 // 2 and gpus[0].split_count == 4
    assert gpus[0].nvlink_peers == ("GPU-2",), "a hidden GPU is nobody's NVLink peer"
    assert gpus[0].numa_node is None and gpus[0].sm_count == 132


def test_published_at_start_on_change_and_when_due():
    sent = []
    now = [0.0]
    inv = Inventory(DEVICES, _cfg(inventoryIntervalSeconds=60), lambda k, v: sent.append(v),
                    clock=lambda: now[0])
    inv.update({})
    assert len(sent) == 1
    decoded = codec.decode_inventory(sent[0], node="n1")
    assert [g.uuid for g in decoded.gpus] == ["GPU-0", "GPU-1", "GPU-2"]
    inv.update({})
    assert len(sent) == 1, "nothing changed and not due"
    assert inv.update({"GPU-1": "XID 79"}) is True
    assert not codec.decode_inventory(sent[-1], node="n1").gpus[1].healthy
    now[0] = 61
    inv.update({"GPU-1": "XID 79"})
    assert len(sent) == 3, "republished when due, so a lost annotation heals"

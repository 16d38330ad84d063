"""One GPU path per node with the REAL kubelet v1.36 (issue 20, item 7): a node agent with
both paths configured offers its GPUs through one only. Relabelled to DRA while a pod holds a
device-plugin GPU, the node's allocatable GPU resources drop to 0 (no new pod is placed) and
no ResourceSlice appears; once the pod is gone the device plugins are gone and the
ResourceSlice offers the GPUs (the real kubelet keeps nvidia.com/gpu unallocatable); labelled
back, the slice is deleted and the device plugins offer every GPU again. Never both."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from gpuslice.dra import DRIVER
from gpuslice.kube.client import dict_view
from gpuslice.node.path import LABEL
from kubelet import real

LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}


def until(cond: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def allocatable(node: real.RealNode) -> dict[str, int]:
    alloc = ((node.node() or {}).get("status") or {}).get("allocatable") or {}
    return {r: int(alloc.get(r, "0")) for r in real.GPU_RESOURCES}


def slice_devices(client: Any) -> int | None:
    """Devices of the node's ResourceSlice(s) of gpuslice's driver; None: no slice."""
    found = [dict(s) for s in client.list(dict_view(ResourceSlice), fields={
        "spec.nodeName": real.NODE, "spec.driver": DRIVER})]
    return sum(len(s["spec"].get("devices") or []) for s in found) if found else None


def readyz(node: real.RealNode) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/readyz",
                                    timeout=5):
            return ""
    except urllib.error.HTTPError as exc:
        return exc.read().decode()


def test_a_relabelled_real_node_drains_switches_to_dra_and_back_never_offering_both(tier):
    tier.node.stop()  # this test's node has DRA configured too
    tier.node = None
    node = real.RealNode(tier.plane.assets, tier.plane.kubeconfig, gpus=4)
    node.agent_settings = {"dra": {
        "enabled": True, "pluginDir": str(node.root_dir / "plugins" / DRIVER),
        "registryDir": str(node.root_dir / "plugins_registry"), "cdiDir": str(node.work / "cdi")}}
    tier.node = node.start()
    admin = tier.plane_client()
    client, ns = tier.client(), tier.namespace

    def label(value: str) -> None:
        admin.patch(Node, real.NODE, {"metadata": {"labels": {LABEL: value}}},
                    patch_type=PatchType.MERGE)

    try:
        full = until(lambda: (a := allocatable(node))["nvidia.com/gpu"] and a, "GPUs offered")
        assert full == {"nvidia.com/gpu": 40, "volcano.sh/vgpu-number": 40,
                        "tencent.com/vcuda-core": 400}
        assert slice_devices(admin) is None, "a device-plugin node publishes no slice"

        client.create(dict_view(Pod)(real.pod_body("holder", ns, LIMITS)))
        tier.wait_pods(["holder"])
        label("dra")
        until(lambda: allocatable(node) == dict.fromkeys(real.GPU_RESOURCES, 0),
              "every device-plugin resource unallocatable while the node drains")
        assert f"{ns}/holder" in until(lambda: readyz(node), "the drain on /readyz")
        assert slice_devices(admin) is None, "DRA waits for the pod"
        assert sorted(p.name for p in real.DEVICE_PLUGIN_DIR.glob("gpuslice-*.sock")), \
            "the device plugins stay registered for the running pod"

        client.delete(Pod, "holder", namespace=ns, grace_period=0)
        assert until(lambda: slice_devices(admin), "the ResourceSlice", timeout=60) == 4
        assert not list(real.DEVICE_PLUGIN_DIR.glob("gpuslice-*.sock")), \
            "a DRA node registers no device plugin"
        time.sleep(3)  # the kubelet's status updates come every second: nothing comes back
        assert allocatable(node) == dict.fromkeys(real.GPU_RESOURCES, 0)
        until(lambda: readyz(node) == "", "ready on DRA (the kubelet registered the plugin)")

        label("device-plugin")  # no claim prepared: at once
        until(lambda: allocatable(node) == full, "every GPU offered again by the device plugins")
        until(lambda: slice_devices(admin) is None, "the ResourceSlice deleted")
        events = [e for e in node.agent_log() if e.get("msg") == "GPU path switched"]
        assert len(events) == 2, events
    finally:
        node.stop()
        tier.node = None  # the next test's tier.ensure() starts a node of the usual kind
        for s in admin.list(dict_view(ResourceSlice)):
            admin.delete(ResourceSlice, s["metadata"]["name"])

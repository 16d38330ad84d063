"""One GPU path per node (issue 20, item 7): the node agent with both paths configured serves
only the one its Node's label `gpuslice.io/gpu-path` names (else the config's gpuPath), and a
relabelled node switches only once no pod holds a GPU through the old path, advertising nothing
new meanwhile. Against the kubelet emulator (device plugins, PodResources) and the API server
(the Node's label, the ResourceSlice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Node as NodeRes
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from gpuslice import model
from gpuslice.dra import DRIVER
from gpuslice.kube import errors
from gpuslice.kube.client import dict_view
from gpuslice.node.path import DEVICE_PLUGIN, DRA, LABEL
from kubeapi.waiting import wait_for
from kubelet.pods import NODE, gpu

SLICE = f"{NODE}-{DRIVER}"


def dra_flags(base: str) -> dict[str, Any]:
    return {"dra": {"enabled": True, "pluginDir": f"{base}/plugins/{DRIVER}",
                    "registryDir": f"{base}/registry", "cdiDir": f"{base}/cdi"}}


@pytest.fixture
async def node(kube_api, tmp_path_factory):
    from kubelet.nodeharness import running_node

    base = Path(tmp_path_factory.mktemp("dra"))
    async with running_node(kube_api, **dra_flags(str(base))) as n:
        yield n


async def label(node: Any, value: str | None) -> None:
    await node.client.patch(NodeRes, NODE, {"metadata": {"labels": {LABEL: value}}},
                            patch_type=PatchType.MERGE)


async def published(node: Any) -> int | None:
    """Devices in the node's ResourceSlice; None: no slice."""
    try:
        with errors.translate("get"):
            got = await node.client.get(dict_view(ResourceSlice), SLICE)
    except errors.NotFound:
        return None
    return len(got["spec"].get("devices") or [])


def plugin_sockets(node: Any) -> list[str]:
    return sorted(p.name for p in (node.state.parent / "dp").glob("gpuslice-*.sock"))


def advertised(node: Any, resource: str = "nvidia.com/gpu") -> set[str]:
    return set(node.kubelet.endpoints[resource].devices.values())


async def test_a_node_serves_its_default_path_alone(node):
    assert node.agent.path.current == DEVICE_PLUGIN
    await node.kubelet.wait_devices("nvidia.com/gpu")
    assert advertised(node) == {"Healthy"}
    await wait_for(lambda: node.agent.ready() is None, "ready")
    assert set(node.agent._serving) == {DEVICE_PLUGIN}
    assert await published(node) is None, "a device-plugin node publishes no ResourceSlice"


async def test_a_device_plugin_node_deletes_a_slice_left_from_before(kube_api, tmp_path):
    from gpuslice.dra import slices
    from kubelet.nodeharness import running_node

    client = kube_api.async_client()
    stale = slices.build_slice(NODE, [model.GPU(uuid=gpu(0), model="H100", memory_mib=16384)])
    await client.create(dict_view(ResourceSlice)(stale))  # an agent that served both paths
    async with running_node(kube_api, **dra_flags(str(tmp_path))) as n:
        await wait_for(lambda: n.agent.ready() is None, "ready")
        async def gone() -> bool:
            return await published(n) is None

        await wait_for(gone, "the stale slice deleted")
        assert set(n.agent._serving) == {DEVICE_PLUGIN}


async def test_a_relabelled_node_drains_then_switches_and_back(node):
    await node.kubelet.wait_devices("nvidia.com/gpu")
    # a pod the kubelet gave a GPU through the device plugin
    node.kubelet.assigned[("default", "train")] = {"c": [("nvidia.com/gpu", [f"{gpu(0)}::0"])]}
    await label(node, DRA)
    await wait_for(lambda: node.agent.path.draining, "the device-plugin path draining")
    await wait_for(lambda: advertised(node) == {"Unhealthy"}, "no device offered while draining")
    assert node.agent.path.current == DEVICE_PLUGIN
    assert DRA not in node.agent._serving and await published(node) is None, \
        "never both paths: DRA waits for the pod"
    assert "default/train" in (node.agent.ready() or "")
    assert len(plugin_sockets(node)) == 3, "still registered: the pod's containers keep it"

    del node.kubelet.assigned[("default", "train")]  # the pod is gone
    await wait_for(lambda: node.agent.path.current == DRA, "the switch to DRA")
    await wait_for(lambda: published(node), "the ResourceSlice")
    assert await published(node) == 2
    assert set(node.agent._serving) == {DRA}
    assert plugin_sockets(node) == [], "a DRA node registers no device plugin"
    assert (node.state / "gpu-path").read_text().strip() == DRA

    registrations = len(node.kubelet.registrations)
    await label(node, DEVICE_PLUGIN)  # no claim prepared: at once
    await wait_for(lambda: node.agent.path.current == DEVICE_PLUGIN, "the switch back")
    await wait_for(lambda: len(node.kubelet.registrations) >= registrations + 3,
                   "the device plugins registered again")
    await wait_for(lambda: advertised(node) == {"Healthy"}, "devices offered again")
    await wait_for(lambda: set(node.agent._serving) == {DEVICE_PLUGIN}, "DRA stopped")
    assert await published(node) is None, "its ResourceSlice deleted"


async def test_a_label_the_agent_cannot_serve_keeps_the_path_and_says_why(kube_api):
    from kubelet.nodeharness import running_node

    async with running_node(kube_api) as n:  # DRA off
        await label(n, DRA)
        await wait_for(lambda: "set dra.enabled=true" in (n.agent.ready() or ""),
                       "the problem on /readyz")
        assert n.agent.path.current == DEVICE_PLUGIN and not n.agent.path.draining
        assert advertised(n) == {"Healthy"}, "the node keeps serving the path it can"
        await label(n, "gpu")
        await wait_for(lambda: "use dra or device-plugin" in (n.agent.ready() or ""), "typo")

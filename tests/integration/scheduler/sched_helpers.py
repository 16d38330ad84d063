"""Helpers for the extender's integration tests: objects, a running extender, the verbs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, NodeStatus, Pod
from lightkube.types import PatchType

from gpuslice import codec, handoff, model
from gpuslice.kube.client import dict_view
from gpuslice.scheduler.config import LeaderElection, SchedulerConfig
from gpuslice.scheduler.service import Extender
from kubeapi.waiting import wait_for


def node_obj(name: str, gpus: int = 2, mem: int = 16384, split: int = 10) -> dict[str, Any]:
    inv = model.NodeInventory(node=name, gpus=tuple(
        model.GPU(uuid=f"GPU-{name}-{i}", model="NVIDIA A10", memory_mib=mem, index=i,
                  split_count=split) for i in range(gpus)))
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "annotations": {codec.INVENTORY_ANNOTATION: codec.encode_inventory(inv)}}}


def pod_obj(name: str, mem: int = 4096, cores: int = 10, gpus: int = 1) -> dict[str, Any]:
    """A pod as the webhook leaves it: managed label, our scheduler, nvidia.com/gpu named."""
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(mem),
              "nvidia.com/gpucores": str(cores)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {handoff.MANAGED_LABEL: "true"}},
            "spec": {"schedulerName": "gpuslice-scheduler", "containers": [
                {"name": "main", "image": "registry.invalid/pause:1",
                 "resources": {"limits": limits}}]}}


async def create(client: AsyncClient, obj: dict[str, Any]) -> dict[str, Any]:
    kind = Node if obj["kind"] == "Node" else Pod
    return dict(await client.create(dict_view(kind)(obj)))  # type: ignore[call-arg]


async def ready_node(client: AsyncClient, name: str, allocatable: dict[str, str],
                     gpus: int = 2, mem: int = 16384) -> None:
    """A GPU node the real kube-scheduler will use: Ready, allocatable set, and the not-ready
    taint (kube-apiserver adds it to every new Node) lifted by kube-controller-manager."""
    await create(client, node_obj(name, gpus=gpus, mem=mem))
    await client.patch(NodeStatus, name, {"status": {
        "allocatable": allocatable, "capacity": allocatable,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "no kubelet: a test node"}]}}, patch_type=PatchType.MERGE)

    async def schedulable() -> bool:
        return not (await client.get(dict_view(Node), name))["spec"].get("taints")
    await wait_for(schedulable, "the node lifecycle controller to lift not-ready", timeout=30)


def config(**overrides: Any) -> SchedulerConfig:
    le = overrides.pop("leader_election", LeaderElection(enabled=False))
    return SchedulerConfig(leader_election=le, **overrides)


class Running:
    """An Extender served on 127.0.0.1 and an HTTP session to call its verbs as the scheduler."""

    def __init__(self, kube_api: Any, clock: Callable[[], float] = time.time,
                 client: AsyncClient | None = None, **overrides: Any) -> None:
        self.client = client or kube_api.async_client()
        self.ext = Extender(config(**overrides), self.client, clock=clock)
        self.http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Running:
        port = await self.ext.start()
        self.url = f"http://127.0.0.1:{port}"
        self.http = aiohttp.ClientSession()
        await wait_for(lambda: self.ext.nodes.synced.is_set() and self.ext.pods.synced.is_set(),
                       "the caches to sync")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.http is not None
        await self.http.close()
        await self.ext.stop()

    async def verb(self, verb: str, body: dict[str, Any]) -> Any:
        assert self.http is not None
        async with self.http.post(f"{self.url}/{verb}", json=body) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def pod(self, name: str) -> dict[str, Any]:
        return dict(await self.client.get(dict_view(Pod), name, namespace="default"))

    async def filter(self, name: str, nodes: list[str]) -> dict[str, Any]:
        """filter as kube-scheduler sends it (nodeCacheCapable: true, the whole pod)."""
        return await self.verb("filter", {"Pod": await self.pod(name), "Nodes": None,
                                          "NodeNames": nodes})

    async def bind(self, name: str, node: str) -> str:
        pod = await self.pod(name)
        reply = await self.verb("bind", {"PodName": name, "PodNamespace": "default",
                                         "PodUID": pod["metadata"]["uid"], "Node": node})
        return str(reply["Error"])

    async def place(self, name: str, nodes: list[str]) -> str:
        """filter then bind on the first fitting node; the node, or the filter's reasons."""
        got = await self.filter(name, nodes)
        if not got["NodeNames"]:
            return repr({**got["FailedNodes"], **got["FailedAndUnresolvableNodes"]})
        error = await self.bind(name, got["NodeNames"][0])
        assert error == "", error
        return str(got["NodeNames"][0])

    async def mark_allocated(self, name: str) -> None:
        """What the node agent does after Allocate: gpuslice.io/allocated."""
        from gpuslice.kube.patch import patch_metadata

        await patch_metadata(self.client, Pod, name, namespace="default",
                             annotations={handoff.ALLOCATED: "main"})

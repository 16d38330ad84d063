"""The extender behind a kube-scheduler (tests/kubeapi's driver, the real bodies) with the
deploy/ configuration, in both nodeCacheCapable modes: every pod that fits is bound with an
assignment on its node, no GPU is over-committed, and a pod that fits nowhere gets
FailedScheduling with the extender's reason."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import yaml
from lightkube.resources.core_v1 import Event, Node, NodeStatus, Pod
from lightkube.types import PatchType
from sched_helpers import Running, create, node_obj, pod_obj, wait_for

from gpuslice import codec, handoff
from gpuslice.allocator import AllocationError, ClusterState
from gpuslice.kube.cache import Informer
from gpuslice.kube.client import dict_view
from gpuslice.kube.patch import patch_metadata
from kubeapi.scheduler_driver import DriverConfig, SchedulerDriver

DEPLOY = Path(__file__).parents[3] / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "20",
               "volcano.sh/vgpu-number": "20", "tencent.com/vcuda-core": "200"}


async def agent(client, seen: set[str]) -> None:
    """The node agent's part: mark each bound pod allocated (else the in-flight rule waits)."""
    async def on(change) -> None:
        pod = change.new
        if pod and pod["spec"].get("nodeName") and change.key not in seen:
            seen.add(change.key)
            with contextlib.suppress(Exception):
                await patch_metadata(client, Pod, pod["metadata"]["name"], namespace="default",
                                     annotations={handoff.ALLOCATED: "main"})
    await Informer(client, Pod, labels={handoff.MANAGED_LABEL: "true"}, handler=on).run()


def over_committed(nodes: list[dict], pods: list[dict]) -> list[str]:
    state, problems = ClusterState(), []
    for n in nodes:
        state.add_node(codec.decode_inventory(
            n["metadata"]["annotations"][codec.INVENTORY_ANNOTATION], node=n["metadata"]["name"]))
    for p in pods:
        text = (p["metadata"].get("annotations") or {}).get(codec.ASSIGNMENT_ANNOTATION)
        if p["spec"].get("nodeName") and text:
            try:
                state.assign(p["metadata"]["name"], codec.decode_assignment(text))
            except AllocationError as exc:
                problems.append(str(exc))
    return problems


@pytest.mark.parametrize("cache_capable", [True, False], ids=["node-names", "full-nodes"])
async def test_the_scheduler_binds_every_pod_that_fits_and_none_twice(kube_api, cache_capable):
    admin = kube_api.async_client()
    for i in range(3):
        await create(admin, node_obj(f"gpu-{i}", gpus=2, mem=16384))
        await admin.patch(NodeStatus, f"gpu-{i}", {"status": {"allocatable": ALLOCATABLE,
                                                             "capacity": ALLOCATABLE}},
                          patch_type=PatchType.MERGE)
    extender = yaml.safe_load(DEPLOY.read_text())["extenders"][0]
    async with Running(kube_api) as ext:
        config = DriverConfig.from_extender(
            {**extender, "urlPrefix": ext.url, "nodeCacheCapable": cache_capable},
            initial_backoff=0.1, max_backoff=0.5, seed=1)
        seen: set[str] = set()
        emulator = asyncio.create_task(agent(admin, seen))
        async with SchedulerDriver(kube_api.kubeconfig, config) as driver:
            for i in range(18):  # 6 GPUs x 16 GiB hold these 54 GiB with room to spare
                await create(admin, pod_obj(f"p{i:02d}", mem=(2048, 4096)[i % 2]))
            await create(admin, pod_obj("huge", mem=65536))
            assert await driver.wait_until_bound(18, timeout=30) == 18

            async def refused() -> bool:
                events = [e async for e in admin.list(dict_view(Event), namespace="default")]
                return any(e["reason"] == "FailedScheduling" and "insufficient GPU memory"
                           in e["message"] and e["involvedObject"]["name"] == "huge"
                           for e in events)
            await wait_for(refused, "FailedScheduling for the pod that fits nowhere")
        emulator.cancel()
        pods = [dict(p) async for p in admin.list(dict_view(Pod), namespace="default")]
        nodes = [dict(n) async for n in admin.list(dict_view(Node))]
        bound = [p for p in pods if p["spec"].get("nodeName")]
        assert len(bound) == 18
        for p in bound:
            a = codec.decode_assignment(p["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION])
            assert a.node == p["spec"]["nodeName"], "the assignment names the node it is bound to"
        assert over_committed(nodes, pods) == []

"""Volcano MIG pods (volcano.sh/vgpu-mode: mig) through kube-scheduler and the extender, on a
cluster mixing MIG and shared-slice nodes: each MIG pod is bound to a MIG node with a legal
placement of the smallest profile that holds it, shared-slice pods never land on MIG nodes,
nothing is over-committed, and a MIG pod no profile holds gets FailedScheduling naming why."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from lightkube.resources.core_v1 import Event, Node, NodeStatus, Pod
from lightkube.types import PatchType
from sched_helpers import Running, create, node_obj, pod_obj, wait_for
from test_driver_places_pods_end_to_end import ALLOCATABLE, agent, over_committed

from gpuslice import codec, handoff, mig, model
from gpuslice.kube.client import dict_view
from kubeapi.scheduler_driver import DriverConfig, SchedulerDriver

DEPLOY = Path(__file__).parents[3] / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
H100 = mig.CATALOG["H100-80GB"]


def mig_node(name: str) -> dict:
    inv = model.NodeInventory(node=name, gpus=tuple(
        model.GPU(uuid=f"GPU-{name}-{i}", model="NVIDIA H100 80GB HBM3", memory_mib=81559,
                  index=i, mig=mig.MigGPU(profiles=H100)) for i in range(2)))
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "annotations": {codec.INVENTORY_ANNOTATION: codec.encode_inventory(inv)}}}


def volcano_mig_pod(name: str, mem: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {handoff.MANAGED_LABEL: "true"},
                         "annotations": {"volcano.sh/vgpu-mode": "mig"}},
            "spec": {"schedulerName": "gpuslice-scheduler", "containers": [
                {"name": "main", "image": "registry.invalid/pause:1", "resources": {"limits": {
                    "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(mem)}}}]}}


async def test_mig_pods_go_to_mig_nodes_with_legal_placements(kube_api):
    admin = kube_api.async_client()
    for obj in (mig_node("mig-0"), mig_node("mig-1"), node_obj("shim-0", gpus=2, mem=16384)):
        await create(admin, obj)
        await admin.patch(NodeStatus, obj["metadata"]["name"], {"status": {
            "allocatable": ALLOCATABLE, "capacity": ALLOCATABLE}}, patch_type=PatchType.MERGE)
    extender = yaml.safe_load(DEPLOY.read_text())["extenders"][0]
    async with Running(kube_api) as ext:
        config = DriverConfig.from_extender({**extender, "urlPrefix": ext.url},
                                            initial_backoff=0.1, max_backoff=0.5, seed=1)
        emulator = asyncio.create_task(agent(admin, set()))
        async with SchedulerDriver(kube_api.kubeconfig, config) as driver:
            # 4 GPUs: 4 x 3g.40gb + 4 x 1g.10gb fit (3g takes slices 4-7, 1g the first half).
            # One at a time, each allocated before the next: pods of one device request but
            # different sizes in flight on one node wait for each other (DESIGN §4, 1.), and
            # the scheduler does not retry them on that pod's update (kube-scheduler alike)
            for i, (name, mem) in enumerate([(f"{k}{i}", m) for i in range(4)
                                             for k, m in (("big", 30000), ("small", 8000))]):
                await create(admin, volcano_mig_pod(name, mem))
                assert await driver.wait_until_bound(i + 1, timeout=20) == i + 1, name

                async def allocated(name: str = name) -> bool:
                    p = await admin.get(Pod, name, namespace="default")
                    return handoff.ALLOCATED in (p.metadata.annotations or {})
                await wait_for(allocated, f"{name} allocated")
            await create(admin, pod_obj("shared", mem=4096))
            await create(admin, volcano_mig_pod("huge", 90000))
            assert await driver.wait_until_bound(9, timeout=30) == 9

            async def refused() -> bool:
                events = [e async for e in admin.list(dict_view(Event), namespace="default")]
                return any(e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] ==
                           "huge" and "no MIG profile holds the request" in e["message"]
                           for e in events)
            await wait_for(refused, "FailedScheduling naming the MIG reason")
        emulator.cancel()
    pods = {p["metadata"]["name"]: dict(p)
            async for p in admin.list(dict_view(Pod), namespace="default")}
    nodes = [dict(n) async for n in admin.list(dict_view(Node))]
    assert pods["shared"]["spec"]["nodeName"] == "shim-0"
    for name in [f"big{i}" for i in range(4)] + [f"small{i}" for i in range(4)]:
        p = pods[name]
        a = codec.decode_assignment(p["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION])
        (s,) = a.slices()
        assert p["spec"]["nodeName"].startswith("mig-") and a.node == p["spec"]["nodeName"]
        assert s.mig is not None and s.mig.profile == ("3g.40gb" if "big" in name
                                                       else "1g.10gb"), name
    assert not pods["huge"]["spec"].get("nodeName")
    assert over_committed(nodes, list(pods.values())) == [], "legal on every GPU"

"""DRA end to end: do the limits the kubelet plugin writes equal what the scheduler allocated,
and is any device over-committed (issue 13 item 5)?

What runs: the API server (tests/kubeapi's server in its own process, or a real kube-apiserver
+ etcd when KUBEBUILDER_ASSETS has them); per fake node (--gpus fake 80 GiB GPUs), gpuslice's
SlicePublisher and its kubelet DRA plugin (dra/plugin.py served by dra/kubelet.py over real
unix sockets, its own state and CDI dirs) registered with tests/kubelet's DRA kubelet
emulator; --claims ResourceClaims of mixed shapes (memory and cores, one of them, a rounding
case, none = a whole GPU); the allocator: the real kube-scheduler when KUBEBUILDER_ASSETS has
one (claims are then used by pods on Ready fake nodes), else tests/kubeapi/dra_allocator.py's
stand-in; then NodePrepareResources for every allocated claim through its node's emulator,
one call at a time (prepare_*_ms: what the kubelet waits), and NodeUnprepareResources for all.
Checks, recomputed from the API's claims and slices (not the allocator's bookkeeping): each CDI
spec's GPUs, CUDA_DEVICE_MEMORY_LIMIT_i and CUDA_DEVICE_SM_LIMIT equal the allocation's
consumedCapacity (a whole device: its published memory, no compute limit); no device's shares
sum past its capacity, no exclusive device is held twice; unprepare leaves no CDI spec.
Prints one JSON object (allocated, prepared, overcommitted_devices, prepare_p99_ms, api_server,
scheduler, ...). Usage: python benchmarks/dra_e2e.py [--nodes 20 --claims 400 --json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the test API server, the allocator, the emulator
sys.path.insert(0, str(ROOT / "benchmarks"))  # allocator_bench's percentile

from lightkube import AsyncClient, KubeConfig  # noqa: E402
from lightkube.resources.core_v1 import Namespace, Node, NodeStatus, Pod  # noqa: E402
from lightkube.resources.resource_v1 import (  # noqa: E402
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
)
from lightkube.types import PatchType  # noqa: E402

from allocator_bench import pct  # noqa: E402  (one percentile rule for every benchmark)
from gpuslice.dra import DRIVER, cdi  # noqa: E402
from gpuslice.dra.claims import node_devices  # noqa: E402
from gpuslice.dra.kubelet import DraLink  # noqa: E402
from gpuslice.dra.plugin import ApiClaims, DraPlugin  # noqa: E402
from gpuslice.dra.publisher import SlicePublisher  # noqa: E402
from gpuslice.kube import errors  # noqa: E402
from gpuslice.kube.client import dict_view  # noqa: E402
from gpuslice.node.allocate import Layout  # noqa: E402
from gpuslice.node.inventory import node_gpus  # noqa: E402
from gpuslice.node.nvml import DeviceInfo  # noqa: E402
from gpuslice.node.settings import DraConfig, NodeConfig  # noqa: E402
from gpuslice.quantity import parse_quantity  # noqa: E402
from kubeapi.dra_allocator import StandInAllocator, results  # noqa: E402
from kubelet.dra import DraKubelet  # noqa: E402

GPU_MIB = 81920
MiB = 1 << 20
NS = "dra-bench"  # its own namespace: a real cluster may hold other claims
# (capacity.requests or None, weight): what a mixed cluster asks for
SHAPES: tuple[tuple[dict[str, str] | None, int], ...] = (
    ({"memory": "4Gi", "cores": "30"}, 5), ({"memory": "8Gi", "cores": "50"}, 3),
    ({"memory": "20Gi", "cores": "25"}, 2), ({"memory": "2Gi"}, 2), ({"cores": "10"}, 1),
    ({"memory": "1500Mi", "cores": "2500m"}, 1), (None, 1))


@dataclass
class FakeNode:
    name: str
    dir: Path
    gpus: list[DeviceInfo]
    plugin: DraPlugin
    link: DraLink
    kubelet: DraKubelet
    task: asyncio.Task[None]

    async def stop(self) -> None:
        await self.kubelet.stop()
        await self.link.stop()
        await self.task
        await self.plugin.stop()


def fake_gpus(node: str, count: int) -> list[DeviceInfo]:
    return [DeviceInfo(index=i, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}/{i}')}",
                       model="NVIDIA H100 80GB HBM3", memory_bytes=GPU_MIB * MiB, sm_count=132,
                       numa_node=i * 2 // count) for i in range(count)]


async def start_node(client: AsyncClient, name: str, base: Path, gpus: int, step: int
                     ) -> tuple[FakeNode, float]:
    """Publish the node's slice and serve its plugin; (node, publish seconds)."""
    devices = fake_gpus(name, gpus)
    shown = node_gpus(devices, NodeConfig(node_name=name), {})  # the agent's inventory
    t0 = time.perf_counter()
    await SlicePublisher(client, name, DraConfig(memory_step_mib=step)).publish(shown)
    published = time.perf_counter() - t0
    d = base / name
    layout = Layout(library_host=str(d / "lib/libgpuslice.so"),
                    preload_host=str(d / "lib/ld.so.preload"), regions_host=str(d / "regions"),
                    board_host=str(d / "board"))
    prepared_on = node_devices(shown, step)
    plugin = DraPlugin(driver=DRIVER, node=name, api=ApiClaims(client),
                       devices=lambda: prepared_on,
                       state_dir=d / "state", cdi_dir=d / "cdi", layout=layout)
    link = DraLink(plugin, driver=DRIVER, plugin_dir=d / "plugin", registry_dir=d / "registry",
                   poll_s=0.2)
    kubelet = DraKubelet(d / "registry")
    task = asyncio.create_task(link.run())
    await kubelet.start()
    await kubelet.wait_registered(DRIVER)
    return FakeNode(name, d, devices, plugin, link, kubelet, task), published


async def call_each(nodes: dict[str, FakeNode], claims: list[dict[str, Any]], verb: str
                    ) -> tuple[list[float], dict[str, str]]:
    """`verb` ("prepare", "unprepare") for each claim through its node's kubelet, one call at a
    time, as the kubelet waits for it: (milliseconds per call, claim name -> error)."""
    took, failed = [], {}
    for c in claims:
        node = nodes[results(c)[0]["pool"]]
        t = time.perf_counter()
        answer = (await getattr(node.kubelet, verb)(DRIVER, c))[c["metadata"]["uid"]]
        took.append((time.perf_counter() - t) * 1000)
        if answer.error:
            failed[c["metadata"]["name"]] = answer.error
    return took, failed


def claim_body(i: int, requests: dict[str, str] | None) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": DRIVER}
    if requests:
        exact["capacity"] = {"requests": requests}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{i:05d}", "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exact}]}}}


async def allocate_with_kube_scheduler(client: AsyncClient, plane: Any, nodes: list[str],
                                       claims: list[dict[str, Any]], work: Path,
                                       timeout: float) -> None:
    """Pods that use the claims on Ready fake nodes; the real kube-scheduler allocates."""
    for name in nodes:
        await client.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name}}}))
        await client.patch(NodeStatus, name, {"status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "1000"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "1000"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake node, no kubelet"}]}},
            patch_type=PatchType.MERGE)
    for c in claims:
        name = c["metadata"]["name"]
        await client.create(dict_view(Pod)({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"pod-{name}", "namespace": NS}, "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [{"name": "c", "image": "registry.invalid/pause:never-pulled",
                            "resources": {"claims": [{"name": "gpu"}]}}]}}), namespace=NS)
    config = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
              "profiles": [{"schedulerName": "default-scheduler"}],
              "leaderElection": {"leaderElect": False}}
    names = {c["metadata"]["name"] for c in claims}
    proc = plane.start_scheduler(config)
    try:
        last, since = -1, time.monotonic()
        while time.monotonic() - since < timeout:  # until no claim was allocated for a while
            done = len([c async for c in client.list(dict_view(ResourceClaim), namespace=NS)
                        if c["metadata"]["name"] in names and results(dict(c))])
            if done == len(claims):
                break
            if done != last:
                last, since = done, time.monotonic()
            await asyncio.sleep(0.5)
    finally:
        proc.stop()


def expected_limits(claim: dict[str, Any], devices: dict[tuple[str, str], dict[str, Any]]
                    ) -> dict[str, str]:
    """The env a CDI spec must carry for `claim`, from its allocation and the slices."""
    memory: dict[str, int] = {}
    cores: dict[str, int] = {}
    for r in results(claim):
        device = devices[(r["pool"], r["device"])]
        gpu = device["attributes"]["uuid"]["string"]
        consumed = r.get("consumedCapacity") or {}
        published = device["capacity"]["memory"]["value"]
        mib = math.ceil(parse_quantity(consumed.get("memory", published)) / MiB)
        memory[gpu] = memory.get(gpu, 0) + mib
        cores[gpu] = min(100, cores.get(gpu, 0) + (math.ceil(parse_quantity(
            consumed.get("cores", "100"))) or 100))  # consumed none: no compute limit
    env = {"GPUSLICE_DEVICE_UUIDS": ",".join(memory),
           "CUDA_DEVICE_SM_LIMIT": str(max(cores.values()))}
    env.update({f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{m}m" for i, m in enumerate(memory.values())})
    return env


def overcommitted(claims: list[dict[str, Any]], devices: dict[tuple[str, str], dict[str, Any]]
                  ) -> list[str]:
    used: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    whole: dict[tuple[str, str], int] = defaultdict(int)
    for c in claims:
        for r in results(c):
            key = (r["pool"], r["device"])
            if r.get("consumedCapacity") is None:
                whole[key] += 1
            for name, q in (r.get("consumedCapacity") or {}).items():
                used[key][name] += parse_quantity(q)
    bad = []
    for key in set(used) | set(whole):
        caps = devices[key]["capacity"]
        over = [n for n, q in used[key].items() if q > parse_quantity(caps[n]["value"])]
        if over or whole[key] > 1 or (whole[key] and used[key]):
            bad.append(f"{key[0]}/{key[1]}")
    return sorted(bad)


async def bench(client: AsyncClient, args: argparse.Namespace, base: Path, *,
                api_server: str, plane: Any = None) -> dict[str, Any]:
    with contextlib.suppress(errors.Conflict), errors.translate(f"create namespace {NS}"):
        await client.create(dict_view(Namespace)({"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NS}}))
    # as the chart with dra.enabled; a real cluster may have it from an earlier run
    with contextlib.suppress(errors.Conflict), errors.translate("create the DeviceClass"):
        await client.create(dict_view(DeviceClass)({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}))
    names = [f"gpu-node-{i:02d}" for i in range(args.nodes)]
    nodes: dict[str, FakeNode] = {}
    publish_s = []
    try:
        for name in names:
            nodes[name], took = await start_node(client, name, base, args.gpus, args.step)
            publish_s.append(took)
        rng = random.Random(args.seed)
        shapes = [s for s, w in SHAPES for _ in range(w)]
        bodies = [claim_body(i, rng.choice(shapes)) for i in range(args.claims)]
        for body in bodies:
            await client.create(dict_view(ResourceClaim)(body), namespace=NS)
        t0 = time.perf_counter()
        if plane is not None and plane.assets.kube_scheduler is not None:
            scheduler = "kube-scheduler " + plane.version.split()[-1]
            await allocate_with_kube_scheduler(client, plane, names, bodies, base, args.timeout)
        else:
            scheduler = StandInAllocator.name
            await StandInAllocator(client, nodes=names, namespace=NS).allocate_pending()
        allocate_s = time.perf_counter() - t0
        ours = {b["metadata"]["name"] for b in bodies}  # a real cluster may hold others
        claims = [dict(c) async for c in client.list(dict_view(ResourceClaim), namespace=NS)
                  if c["metadata"]["name"] in ours]
        slices = [dict(s) async for s in client.list(dict_view(ResourceSlice))
                  if s["spec"].get("nodeName") in nodes]
        devices = {(s["spec"]["pool"]["name"], d["name"]): d
                   for s in slices for d in s["spec"]["devices"]}
        allocated = [c for c in claims if results(c)]
        prepare_ms, failures = await call_each(nodes, allocated, "prepare")
        mismatches = []
        for c in allocated:
            if c["metadata"]["name"] in failures:
                continue
            node = nodes[results(c)[0]["pool"]]
            spec = json.loads(cdi.path(node.dir / "cdi", c["metadata"]["uid"]).read_text())
            env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
            want = expected_limits(c, devices)
            if {k: env.get(k) for k in want} != want or any(
                    k.startswith("CUDA_DEVICE_MEMORY_LIMIT_") and k not in want for k in env):
                mismatches.append(f"{c['metadata']['name']}: CDI {env} != allocation {want}")
        unprepare_ms, unprepare_failures = await call_each(nodes, allocated, "unprepare")
        left = sorted(p.name for n in nodes.values() for p in (n.dir / "cdi").glob("*.json"))
    finally:
        for node in nodes.values():
            with contextlib.suppress(Exception):
                await node.stop()
    over = overcommitted(claims, devices)
    return {
        "allocated": len(allocated), "pending": len(claims) - len(allocated),
        "prepared": len(allocated) - len(failures),
        "prepare_errors": [f"{k}: {v}" for k, v in failures.items()][:5],
        "unprepare_errors": [f"{k}: {v}" for k, v in unprepare_failures.items()][:5],
        "cdi_mismatches": len(mismatches),
        "cdi_mismatch_examples": mismatches[:3],
        "overcommitted_devices": len(over), "overcommitted_examples": over[:5],
        "cdi_specs_left_after_unprepare": len(left),
        "shares": sum(1 for c in allocated for r in results(c) if r.get("shareID")),
        # claims that name no cores consume none and run without a compute limit
        "uncapped_compute_shares": sum(1 for c in allocated for r in results(c)
                                       if r.get("shareID") and
                                       r["consumedCapacity"].get("cores") == "0"),
        "exclusive_results": sum(1 for c in allocated for r in results(c)
                                 if not r.get("shareID")),
        "prepare_p50_ms": round(pct(prepare_ms, 0.50), 2) if prepare_ms else 0.0,
        "prepare_p99_ms": round(pct(prepare_ms, 0.99), 2) if prepare_ms else 0.0,
        "prepare_max_ms": round(max(prepare_ms, default=0.0), 2),
        "unprepare_p99_ms": round(pct(unprepare_ms, 0.99), 2) if unprepare_ms else 0.0,
        "publish_p99_ms": round(pct([s * 1000 for s in publish_s], 0.99), 2),
        "allocate_s": round(allocate_s, 2),
        "nodes": args.nodes, "gpus_per_node": args.gpus, "claims": args.claims,
        "memory_step_mib": args.step, "api_server": api_server, "scheduler": scheduler,
        "plugin": "gpuslice DRA plugin over gRPC unix sockets (tests/kubelet/dra.py emulator)",
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--gpus", type=int, default=8, help="fake GPUs per node")
    p.add_argument("--claims", type=int, default=400)
    p.add_argument("--step", type=int, default=256, help="dra.memoryStepMiB")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds the real kube-scheduler may go without allocating a claim")
    p.add_argument("--json", action="store_true", help="print JSON only")
    return p.parse_args(argv)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from kubeapi.envtest import ControlPlane, find_assets
    from kubeapi.server import spawn

    base = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))  # unix socket paths stay short
    assets = find_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    plane = server = None
    try:
        if assets is not None:
            plane = ControlPlane(assets, base / "envtest").start()
            kubeconfig, api_name = plane.kubeconfig, plane.version
        else:
            server = spawn(base / "kubeapi", history=100_000)  # own process: no shared GIL
            kubeconfig, api_name = server.kubeconfig, "in-process (tests/kubeapi, own process)"
        client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
        try:
            return await bench(client, args, base, api_server=api_name, plane=plane)
        finally:
            await client.close()
    finally:
        if plane is not None:
            plane.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    arguments = parse()
    result = asyncio.run(main(arguments))
    print(json.dumps(result, indent=None if arguments.json else 2))
    if result["overcommitted_devices"] or result["cdi_mismatches"] or \
            result["prepared"] != result["allocated"] or result["unprepare_errors"]:
        sys.exit(1)

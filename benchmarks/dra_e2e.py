"""DRA end to end: do the limits the kubelet plugin writes equal what the scheduler allocated,
is any device over-committed (issue 13 item 5), and are claims made from templates and freed
by kube-controller-manager?

What runs: the API server (tests/kubeapi's server in its own process, or a real kube-apiserver
+ etcd + kube-controller-manager when KUBEBUILDER_ASSETS has them); per fake node (--gpus fake
80 GiB GPUs), gpuslice's SlicePublisher and its kubelet DRA plugin (dra/plugin.py served by
dra/kubelet.py over real unix sockets, its own state and CDI dirs) registered with
tests/kubelet's DRA kubelet emulator; --claims claims of mixed shapes (memory and cores, one of
them, a rounding case, none = a whole GPU); the allocator: the real kube-scheduler when
KUBEBUILDER_ASSETS has one, else tests/kubeapi/dra_allocator.py's stand-in; then
NodePrepareResources for every allocated claim through its node's emulator, one call at a time
(prepare_*_ms: what the kubelet waits), and NodeUnprepareResources for all.
Two paths on the real binaries (one pod per claim, on fake nodes that are Ready and that the
node lifecycle controller has untainted before anything is timed):
- direct: a ResourceClaim created by the benchmark, the pod names it (resourceClaimName);
- from templates (--from-templates of the claims, default half): the pod names a
  ResourceClaimTemplate (resourceClaimTemplateName) and kube-controller-manager's resourceclaim
  controller creates its claim (owned by the pod).
After unprepare every pod is deleted and the benchmark waits until kube-controller-manager has
freed each claim as Kubernetes v1.36 does: a claim it made from a template is deleted (its pod,
the owner, is gone); a direct claim stays but loses its reservedFor, its allocation and the
delete-protection finalizer. The stand-in path (no KUBEBUILDER_ASSETS) has no
kube-controller-manager: direct claims only, nothing freed (the output says so).
kube-scheduler runs with clientConnection qps/burst raised (--scheduler-qps): its default 50
qps caps DRA scheduling at ~17 pods/s (3 writes a pod: the claim's finalizer, its status with
allocation and reservedFor, the binding; measured 16.0 pods/s at 400 claims with qps 50).
Checks, recomputed from the API's claims and slices (not the allocator's bookkeeping): each CDI
spec's GPUs, CUDA_DEVICE_MEMORY_LIMIT_i and CUDA_DEVICE_SM_LIMIT equal the allocation's
consumedCapacity (a whole device: its published memory, no compute limit); no device's shares
sum past its capacity, no exclusive device is held twice; unprepare leaves no CDI spec.
Prints one JSON object (allocated, prepared, overcommitted_devices, prepare_p99_ms,
claims_from_templates, freed_after_delete, free_s, paths, api_server, scheduler, ...).
Usage: python benchmarks/dra_e2e.py [--nodes 20 --claims 400 --json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import math
import os
import random
import shutil
import socket
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
    ResourceClaimTemplate,
    ResourceSlice,
)
from lightkube.types import PatchType  # noqa: E402

from allocator_bench import pct  # noqa: E402  (one percentile rule for every benchmark)
from gpuslice.container.edits import Layout  # noqa: E402
from gpuslice.dra import DRIVER, cdi  # noqa: E402
from gpuslice.dra.claims import node_devices  # noqa: E402
from gpuslice.dra.kubelet import DraLink  # noqa: E402
from gpuslice.dra.plugin import ApiClaims, DraPlugin  # noqa: E402
from gpuslice.dra.publisher import SlicePublisher  # noqa: E402
from gpuslice.kube import errors  # noqa: E402
from gpuslice.kube.cache import Informer  # noqa: E402
from gpuslice.kube.client import dict_view  # noqa: E402
from gpuslice.node.inventory import node_gpus  # noqa: E402
from gpuslice.node.nvml import DeviceInfo  # noqa: E402
from gpuslice.node.settings import DraConfig, NodeConfig  # noqa: E402
from gpuslice.quantity import parse_quantity  # noqa: E402
from kubeapi.dra_allocator import DELETE_PROTECTION, StandInAllocator, results  # noqa: E402
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


async def start_node(client: AsyncClient, name: str, base: Path, gpus: int, step: int,
                     devices: list[DeviceInfo] | None = None) -> tuple[FakeNode, float]:
    """Publish the node's slice and serve its plugin; (node, publish seconds). `devices`:
    its GPUs (default: `gpus` fake H100s)."""
    devices = devices or fake_gpus(name, gpus)
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


def template_body(kind: int) -> dict[str, Any]:
    """The ResourceClaimTemplate of SHAPES[kind] (same spec as a direct claim of that shape)."""
    spec = claim_body(0, SHAPES[kind][0])["spec"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"gpu-shape-{kind}", "namespace": NS}, "spec": {"spec": spec}}


@dataclass(frozen=True)
class PodClaim:
    """One pod of the real path and how it gets its claim."""

    pod: str
    claim: str = ""  # a direct claim's name (resourceClaimName)
    template: str = ""  # else the template kube-controller-manager makes its claim from

    def body(self) -> dict[str, Any]:
        ref = ({"resourceClaimName": self.claim} if self.claim
               else {"resourceClaimTemplateName": self.template})
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": self.pod,
                                                                "namespace": NS},
                "spec": {"resourceClaims": [{"name": "gpu", **ref}],
                         "containers": [{"name": "c",
                                         "image": "registry.invalid/pause:never-pulled",
                                         "resources": {"claims": [{"name": "gpu"}]}}]}}


def owner_pod(claim: dict[str, Any]) -> str:
    """The pod a claim was made for (kube-controller-manager's controller reference), or ""."""
    return next((o["name"] for o in claim["metadata"].get("ownerReferences") or ()
                 if o.get("kind") == "Pod" and o.get("controller")), "")


async def our_claims(client: AsyncClient, pods: list[PodClaim]) -> list[dict[str, Any]]:
    """The claims of `pods` that exist: direct ones by name, generated ones by owner."""
    direct = {p.claim for p in pods if p.claim}
    templated = {p.pod for p in pods if p.template}
    return [dict(c) async for c in client.list(dict_view(ResourceClaim), namespace=NS)
            if c["metadata"]["name"] in direct or owner_pod(dict(c)) in templated]


GAVE_UP: list[str] = []  # stages that ended without progress, for the output


async def until(what: str, done: Any, timeout: float, poll: float = 0.2) -> float:
    """Await `done()` (a coroutine function returning how many things are still missing) until
    it returns 0; the seconds it took. After `timeout` seconds WITHOUT PROGRESS (the count did
    not fall) it gives up, notes it in GAVE_UP and returns the seconds until the last progress
    (say, when the last claim that fits was allocated), not the time spent waiting after it."""
    t0 = since = time.perf_counter()
    last = -1
    while True:
        missing = await done()
        now = time.perf_counter()
        if missing == 0:
            return now - t0
        if last < 0 or missing < last:
            last, since = missing, now
        elif now - since > timeout:
            GAVE_UP.append(f"{what}: {missing} missing, no progress for {timeout:.0f} s")
            return since - t0
        await asyncio.sleep(poll)


async def ready_nodes(client: AsyncClient, nodes: list[str], timeout: float) -> float:
    """Ready fake nodes (no kubelet) and the seconds until kube-controller-manager's node
    lifecycle controller lifted the not-ready taint kube-apiserver gives every new Node."""
    for name in nodes:
        await client.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name}}}))
        await client.patch(NodeStatus, name, {"status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "1000"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "1000"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake node, no kubelet"}]}},
            patch_type=PatchType.MERGE)

    async def tainted() -> int:
        return len([n async for n in client.list(dict_view(Node))  # not sum(): async
                    if n["metadata"]["name"] in nodes and n["spec"].get("taints")])
    return await until("the nodes to lose the not-ready taint", tainted, timeout)


def unschedulable(pod: dict[str, Any]) -> bool:
    """kube-scheduler found the pod no room (PodScheduled=False, Unschedulable)."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or ())


def scheduler_configuration(qps: float) -> dict[str, Any]:
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "default-scheduler"}],
            "clientConnection": {"qps": qps, "burst": int(qps * 2)},
            "leaderElection": {"leaderElect": False}}


async def allocate_with_kube_scheduler(client: AsyncClient, plane: Any, pods: list[PodClaim],
                                       args: argparse.Namespace) -> dict[str, float]:
    """Pods that use the claims; kube-controller-manager makes the templates' claims, then the
    real kube-scheduler allocates them all. The seconds each stage took."""
    took: dict[str, float] = {}
    for kind in sorted({int(p.template.rsplit("-", 1)[1]) for p in pods if p.template}):
        await client.create(dict_view(ResourceClaimTemplate)(template_body(kind)), namespace=NS)
    t0 = time.perf_counter()
    for p in pods:
        await client.create(dict_view(Pod)(p.body()), namespace=NS)
    took["create_pods_s"] = time.perf_counter() - t0
    templated = {p.pod for p in pods if p.template}

    async def not_made() -> int:
        made = {owner_pod(dict(c)) async for c in
                client.list(dict_view(ResourceClaim), namespace=NS)}
        return len(templated - made)
    # from the first pod's create: kube-controller-manager works while they are created
    took["claims_from_templates_s"] = (await until(
        "kube-controller-manager to create the templates' claims", not_made, args.timeout)
        + took["create_pods_s"])

    by_claim = {p.claim: p.pod for p in pods if p.claim}

    async def undecided() -> int:  # pods neither allocated nor found no room for
        placed = {owner_pod(c) or by_claim.get(c["metadata"]["name"], "")
                  for c in await our_claims(client, pods) if results(c)}
        refused = {p["metadata"]["name"] async for p in client.list(
            dict_view(Pod), namespace=NS) if unschedulable(dict(p))}
        return len({p.pod for p in pods} - placed - refused)
    t0 = time.perf_counter()  # from kube-scheduler's launch: its start-up counts
    proc = plane.start_scheduler(scheduler_configuration(args.scheduler_qps))
    try:
        launched = time.perf_counter() - t0
        took["allocate_s"] = launched + await until(
            "kube-scheduler to allocate every claim or find it no room", undecided,
            args.timeout, poll=0.1)
    finally:
        proc.stop()
    return took


async def delete_and_wait_freed(client: AsyncClient, pods: list[PodClaim],
                                claims: list[dict[str, Any]], timeout: float
                                ) -> dict[str, Any]:
    """Delete every pod (one call at a time, grace period 0: no kubelet); watch until
    kube-controller-manager freed each allocated claim: one made from a template is deleted, a
    direct one keeps existing without reservedFor, allocation and delete-protection finalizer.
    Per path: how many were freed, seconds from each claim's pod delete to its claim freed
    (p50, max), and seconds from the first delete until the last claim was freed."""
    by_claim = {p.claim: p.pod for p in pods if p.claim}
    claim_pod = {c["metadata"]["name"]: owner_pod(c) or by_claim[c["metadata"]["name"]]
                 for c in claims if results(c)}  # allocated claim -> its pod
    made = {n for n, pod in claim_pod.items() if pod not in by_claim.values()}
    direct = set(claim_pod) - made
    freed_at: dict[str, float] = {}
    deleted_at: dict[str, float] = {}

    def is_free(c: dict[str, Any]) -> bool:
        status = c.get("status") or {}
        return not (status.get("reservedFor") or status.get("allocation")
                    or DELETE_PROTECTION in (c["metadata"].get("finalizers") or ()))

    def on(change: Any) -> None:
        name = change.key.rpartition("/")[2]
        if name not in claim_pod or name in freed_at or claim_pod[name] not in deleted_at:
            return
        if change.type == "DELETED" or (name in direct and is_free(change.new)):
            freed_at[name] = time.perf_counter()

    watch = Informer(client, ResourceClaim, namespace=NS, handler=on)
    watching = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(watch.synced.wait(), timeout)
        t0 = time.perf_counter()
        for p in pods:
            deleted_at[p.pod] = time.perf_counter()
            with contextlib.suppress(errors.NotFound), errors.translate(f"delete pod {p.pod}"):
                await client.delete(Pod, p.pod, namespace=NS, grace_period=0)
        deleted_s = time.perf_counter() - t0

        async def held() -> int:
            return len(claim_pod) - len(freed_at)
        await until("kube-controller-manager to free the claims", held, timeout, poll=0.05)
    finally:
        watch.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await watching

    def path(names: set[str]) -> dict[str, Any]:
        lags = sorted(freed_at[n] - deleted_at[claim_pod[n]] for n in names if n in freed_at)
        return {"allocated": len(names), "freed_after_delete": len(lags),
                "free_p50_s": round(pct(lags, 0.5), 3) if lags else 0.0,
                "free_max_s": round(lags[-1], 3) if lags else 0.0,
                "all_freed_s": round(max(freed_at[n] for n in names if n in freed_at) - t0, 2)
                if lags else 0.0}
    return {"delete_pods_s": round(deleted_s, 2), "direct": path(direct),
            "from_templates": path(made)}


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


def version(binary: Path) -> str:
    """`kube-controller-manager v1.36.2`, from the binary that ran."""
    import subprocess

    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                         timeout=30).stdout.split()
    return f"{binary.name} {out[-1] if out else 'unknown'}"


TEMPLATES_NEED = ("not run: claims made from templates and freed after delete need "
                  "kube-controller-manager and kube-scheduler (real binaries: KUBEBUILDER_ASSETS)")


async def namespace_and_class(client: AsyncClient) -> None:
    """The benchmark's namespace and the DeviceClass (as the chart with dra.enabled makes it;
    a real cluster may have both from an earlier run); GAVE_UP emptied for this run."""
    with contextlib.suppress(errors.Conflict), errors.translate(f"create namespace {NS}"):
        await client.create(dict_view(Namespace)({"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NS}}))
    with contextlib.suppress(errors.Conflict), errors.translate("create the DeviceClass"):
        await client.create(dict_view(DeviceClass)({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}))
    GAVE_UP.clear()


async def bench(client: AsyncClient, args: argparse.Namespace, base: Path, *,
                api_server: str, plane: Any = None) -> dict[str, Any]:
    await namespace_and_class(client)
    real = plane is not None and plane.assets.kube_scheduler is not None
    kcm = real and plane.assets.kube_controller_manager is not None
    share = args.from_templates if kcm else 0.0
    names = [f"gpu-node-{i:02d}" for i in range(args.nodes)]
    nodes: dict[str, FakeNode] = {}
    publish_s = []
    stages: dict[str, float] = {}
    freed: dict[str, Any] = {}
    try:
        for name in names:
            nodes[name], took = await start_node(client, name, base, args.gpus, args.step)
            publish_s.append(took)
        rng = random.Random(args.seed)
        kinds = [k for k, (_, w) in enumerate(SHAPES) for _ in range(w)]
        pods: list[PodClaim] = []
        for i in range(args.claims):
            kind = rng.choice(kinds)
            if int((i + 1) * share) > int(i * share):  # spread evenly among the direct ones
                pods.append(PodClaim(f"pod-t{i:05d}", template=f"gpu-shape-{kind}"))
                continue
            body = claim_body(i, SHAPES[kind][0])
            await client.create(dict_view(ResourceClaim)(body), namespace=NS)
            pods.append(PodClaim(f"pod-{body['metadata']['name']}",
                                 claim=body["metadata"]["name"]))
        if real:
            scheduler = "kube-scheduler " + plane.version.split()[-1]
            stages["nodes_untainted_s"] = await ready_nodes(client, names, args.timeout)
            stages.update(await allocate_with_kube_scheduler(client, plane, pods, args))
        else:
            scheduler = StandInAllocator.name
            t0 = time.perf_counter()
            await StandInAllocator(client, nodes=names, namespace=NS).allocate_pending()
            stages["allocate_s"] = time.perf_counter() - t0
        claims = await our_claims(client, pods)  # a real cluster may hold others
        slices = [dict(s) async for s in client.list(dict_view(ResourceSlice))
                  if s["spec"].get("nodeName") in nodes]
        devices = {(s["spec"]["pool"]["name"], d["name"]): d
                   for s in slices for d in s["spec"]["devices"]}
        allocated = [c for c in claims if results(c)]
        by_claim = {p.claim: p.pod for p in pods if p.claim}
        reserved = sum(1 for c in allocated if [r.get("name") for r in (
            c["status"].get("reservedFor") or ())] == [
            owner_pod(c) or by_claim.get(c["metadata"]["name"])])
        prepare_ms, failures = await call_each(nodes, allocated, "prepare")
        mismatches = cdi_mismatches(nodes, allocated, devices, failures)
        unprepare_ms, unprepare_failures = await call_each(nodes, allocated, "unprepare")
        left = sorted(p.name for n in nodes.values() for p in (n.dir / "cdi").glob("*.json"))
        if kcm:  # the kubelet unprepares, then the pods go: kube-controller-manager frees
            freed = await delete_and_wait_freed(client, pods, claims, args.timeout)
    finally:
        for node in nodes.values():
            with contextlib.suppress(Exception):
                await node.stop()
    over = overcommitted(claims, devices)
    made = [c for c in claims if owner_pod(c)]
    paths: dict[str, Any] = {"direct": {
        "pods": sum(1 for p in pods if p.claim) if real else 0,
        "claims": sum(1 for p in pods if p.claim),
        "allocated": sum(1 for c in allocated if not owner_pod(c))}}
    if kcm:
        paths["from_templates"] = {
            "pods": len(pods) - paths["direct"]["claims"], "claims_from_templates": len(made),
            "allocated": sum(1 for c in allocated if owner_pod(c))}
        for name in ("direct", "from_templates"):
            paths[name].update({k: v for k, v in freed[name].items() if k != "allocated"})
    else:
        paths["from_templates"] = TEMPLATES_NEED
        paths["direct"]["freed_after_delete"] = ("not run: nothing frees claims without "
                                                 "kube-controller-manager")
    allocate_s = stages.get("allocate_s", 0.0)
    return {
        "allocated": len(allocated), "pending": args.claims - len(allocated),
        "prepared": len(allocated) - len(failures),
        "reserved_for_their_pod": reserved if real else None,
        "claims_from_templates": len(made),
        "freed_after_delete": (sum(freed[n]["freed_after_delete"]
                                   for n in ("direct", "from_templates")) if freed else None),
        # from the first pod delete until the last claim was freed (both paths)
        "free_s": max(freed["direct"]["all_freed_s"], freed["from_templates"]["all_freed_s"])
        if freed else None,
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
        "allocated_per_s": round(len(allocated) / allocate_s, 1) if allocate_s else 0.0,
        **{k: round(v, 2) for k, v in stages.items() if k != "allocate_s"},
        **({"delete_pods_s": freed["delete_pods_s"]} if freed else {}),
        "paths": paths,
        "gave_up": list(GAVE_UP),  # e.g. claims that fit nowhere: left pending
        "nodes": args.nodes, "gpus_per_node": args.gpus, "claims": args.claims,
        "memory_step_mib": args.step, "api_server": api_server, "scheduler": scheduler,
        **({"scheduler_client": {
            "qps": args.scheduler_qps, "burst": int(args.scheduler_qps * 2),
            "why": "kube-scheduler's default clientConnection (qps 50, burst 100) caps DRA "
                   "scheduling at ~17 pods/s (3 writes a pod): raised unless --scheduler-qps "
                   "50"}} if real else {}),
        "controller_manager": (version(plane.assets.kube_controller_manager) if kcm
                               else "none (nothing frees claims)"),
        "plugin": "gpuslice DRA plugin over gRPC unix sockets (tests/kubelet/dra.py emulator)",
    }


# ---- issue 23: pods written for HAMi, Volcano and GPU Manager, through the webhook, on DRA ----

# (container limits, init container limits or None, annotations, weight)
DIALECT_SHAPES: tuple[tuple[dict[str, str], dict[str, str] | None, dict[str, str], int], ...] = (
    ({"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"}, None, {}, 4),
    ({"nvidia.com/gpumem-percentage": "10"}, None, {}, 2),
    ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8000"}, None, {}, 1),
    ({"nvidia.com/gpumem": "2048", "nvidia.com/priority": "1"}, None,
     {"nvidia.com/use-gputype": "h100"}, 1),
    ({"volcano.sh/vgpu-memory": "8192", "volcano.sh/vgpu-cores": "50"}, None, {}, 3),
    ({"tencent.com/vcuda-core": "20", "tencent.com/vcuda-memory": "16"}, None, {}, 3),
    ({"nvidia.com/gpumem": "1024"}, {"volcano.sh/vgpu-memory": "3000"}, {}, 1))
IMAGE = "registry.invalid/pause:never-pulled"


def dialect_pod(name: str, shape: int) -> dict[str, Any]:
    limits, init, annotations, _ = DIALECT_SHAPES[shape]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": IMAGE,
                                            "resources": {"limits": dict(limits)}}]}
    if init:
        spec["initContainers"] = [{"name": "warmup", "image": IMAGE,
                                   "resources": {"limits": dict(init)}}]
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": NS, "labels": {"bench": "dialects"},
                         "annotations": dict(annotations)}}


def plain_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"bench": "plain"}},
            "spec": {"containers": [{"name": "main", "image": IMAGE,
                                     "resources": {"requests": {"cpu": "1m"}}}]}}


def args_memory(args: argparse.Namespace) -> int:
    """The memory capacity every fake GPU publishes, MiB (GPU_MIB rounded down to the step)."""
    return GPU_MIB // args.step * args.step


def claims_by_hand(bodies: list[dict[str, Any]], sizes: list[int]
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The dialect pods as a user of DRA would write them: the claim specs the webhook gives
    (webhook/dra.claim_spec), named as it names them, the pods naming them; no dialect resource,
    so the webhook lets them through unchanged. (pods, templates)."""
    from gpuslice import dialects
    from gpuslice.webhook import dra

    opts = dra.DraOptions(enabled=True, default_path="dra")
    pods, templates = [], {}
    for body in bodies:
        parsed = dialects.parse_pod(body)
        pod = copy.deepcopy(body)
        pod["metadata"]["name"] = body["metadata"]["name"].replace("dialect-", "raw-")
        pod["metadata"]["annotations"] = {}
        claims = []
        for key in ("initContainers", "containers"):
            for c in pod["spec"].get(key) or ():
                s = next(x for x in parsed.slices if x.container == c["name"])
                spec = dra.claim_spec(s, parsed.filter, sizes, opts)
                name = dra.template_name(spec)
                templates[name] = {"apiVersion": "resource.k8s.io/v1",
                                   "kind": "ResourceClaimTemplate",
                                   "metadata": {"name": name, "namespace": NS},
                                   "spec": {"spec": spec}}
                claims.append({"name": f"gpu-{c['name']}", "resourceClaimTemplateName": name})
                c["resources"] = {"claims": [{"name": f"gpu-{c['name']}"}]}
        pod["spec"]["resourceClaims"] = claims
        pods.append(pod)
    return pods, list(templates.values())


def webhook_configuration(name: str, url: str) -> Any:
    """The MutatingWebhookConfiguration that sends pod creates to the webhook at `url` (with
    DRA on it creates templates, except for dryRun requests: NoneOnDryRun)."""
    from lightkube.models.admissionregistration_v1 import (
        MutatingWebhook,
        RuleWithOperations,
        WebhookClientConfig,
    )
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration

    return MutatingWebhookConfiguration(metadata=ObjectMeta(name=name), webhooks=[
        MutatingWebhook(name="pods.gpuslice.io", admissionReviewVersions=["v1"],
                        sideEffects="NoneOnDryRun", failurePolicy="Fail", timeoutSeconds=10,
                        clientConfig=WebhookClientConfig(url=url),
                        rules=[RuleWithOperations(apiGroups=[""], apiVersions=["v1"],
                                                  operations=["CREATE"], resources=["pods"])])])


async def start_webhook(client: AsyncClient, base: Path, kubeconfig: Path) -> Any:
    """`gpuslice webhook` in its own process (DRA path by default) over HTTPS, called by
    kube-apiserver, as a cluster runs it; the Popen, stopped by the caller."""
    import subprocess

    import yaml

    from gpuslice.webhook.certgen import certgen

    tls = base / "webhook-tls"
    await certgen(service="unused", namespace="default", ips=["127.0.0.1"], out_dir=str(tls))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (base / "webhook.yaml").write_text(yaml.safe_dump({
        "address": "127.0.0.1", "port": port, "certFile": str(tls / "tls.crt"),
        "keyFile": str(tls / "tls.key"), "checkNamespaceLabels": False,
        "kubeconfig": str(kubeconfig), "dra": {"enabled": True, "defaultPath": "dra"}}))
    log = (base / "webhook.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-c", "from gpuslice.cli import main; main()",
                             "webhook", "--config", str(base / "webhook.yaml")],
                            stdout=log, stderr=subprocess.STDOUT)
    with contextlib.suppress(errors.Conflict), errors.translate("create the webhook config"):
        await client.create(webhook_configuration("gpuslice-dra-bench",
                                                  f"https://127.0.0.1:{port}/mutate"))
    await certgen(service="unused", namespace="default", ips=["127.0.0.1"], out_dir=str(tls),
                  webhook_config="gpuslice-dra-bench", client=client)
    probe = dialect_pod("probe", 0)
    for _ in range(600):  # kube-apiserver calls it once it has the caBundle and the slices
        if proc.poll() is not None:
            break
        with contextlib.suppress(errors.APIError), errors.translate("probe the webhook"):
            got = await client.create(dict_view(Pod)(probe), namespace=NS, dry_run=True)
            if got["spec"].get("resourceClaims"):
                return proc
        await asyncio.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"the webhook never translated a pod: see {base / 'webhook.log'}")


class PodWatch:
    """The benchmark's pods as a watch sees them: which are bound, which kube-scheduler found
    no room for (one watch instead of lists that would load the API server)."""

    def __init__(self, client: AsyncClient) -> None:
        self.bound: set[str] = set()
        self.refused: set[str] = set()
        self.claims_missing: set[str] = set()  # kube-controller-manager has not made them all
        self.decided_at = 0.0  # perf_counter of the last bind or refusal seen
        self.informer = Informer(client, Pod, namespace=NS, handler=self._on)

    def _on(self, change: Any) -> None:
        name = change.key.rpartition("/")[2]
        pod = change.new
        if pod is None:
            self.bound.discard(name)
            self.refused.discard(name)
            return
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        wanted = {c.get("name") for c in spec.get("resourceClaims") or ()}
        made = {c.get("name") for c in status.get("resourceClaimStatuses") or ()
                if c.get("resourceClaimName")}
        (self.claims_missing.add if wanted - made else self.claims_missing.discard)(name)
        if spec.get("nodeName"):
            if name not in self.bound:
                self.decided_at = time.perf_counter()
            self.bound.add(name)
            self.refused.discard(name)
        elif unschedulable(pod) and name not in self.refused:
            self.refused.add(name)
            self.decided_at = time.perf_counter()


async def schedule_timed(plane: Any, args: argparse.Namespace, watch: PodWatch,
                         names: list[str], during: Any = None) -> float:
    """Launch kube-scheduler and wait until every pod of `names` is bound or found no room;
    the seconds from the launch (its start-up counts, for both kinds of pod alike) to the last
    bind or refusal (a wait that ends without progress is not counted: GAVE_UP says so)."""
    want = set(names)

    async def undecided() -> int:
        return len(want - watch.bound - watch.refused)
    t0 = time.perf_counter()
    proc = plane.start_scheduler(scheduler_configuration(args.scheduler_qps))
    side = asyncio.create_task(during()) if during else None
    try:
        await until("kube-scheduler to place every pod or find it no room", undecided,
                    args.timeout, poll=0.05)
        if side is not None:  # what it restarted must be placed too
            await side
            await until("kube-scheduler to place the pod created again", undecided,
                        args.timeout, poll=0.05)
        return watch.decided_at - t0
    finally:
        proc.stop()


async def create_all(client: AsyncClient, bodies: list[dict[str, Any]], workers: int = 8
                     ) -> tuple[float, list[str]]:
    """Create the pods, `workers` at a time (kube-apiserver calls the webhook for each);
    (seconds, the denials)."""
    queue = list(reversed(bodies))
    denied: list[str] = []

    async def worker() -> None:
        while queue:
            body = queue.pop()
            try:
                with errors.translate(f"create pod {body['metadata']['name']}"):
                    await client.create(dict_view(Pod)(body), namespace=NS)
            except errors.APIError as exc:
                denied.append(str(exc))
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - t0, denied


async def dialect_burst(client: AsyncClient, args: argparse.Namespace, base: Path, plane: Any
                        ) -> dict[str, Any]:
    """Issue 23's proof: --pods plain pods, then --pods pods in HAMi, Volcano and GPU Manager
    terms through gpuslice's webhook, each placed by the same real kube-scheduler on --nodes
    fake nodes; mid-burst a node agent restarts (its plugin, socket and kubelet registration
    anew from its checkpoint) and a bound pod is deleted and created again. Then every claim is
    prepared through its node's kubelet emulator (one twice: a container restart), the CDI
    limits compared with consumedCapacity, and over-commitment counted."""
    await namespace_and_class(client)
    names = [f"gpu-node-{i:03d}" for i in range(args.nodes)]
    nodes: dict[str, FakeNode] = {}
    out: dict[str, Any] = {}
    watch = PodWatch(client)
    watching = asyncio.create_task(watch.informer.run())
    webhook = None
    restarts: dict[str, Any] = {}
    try:
        for name in names:
            nodes[name], _ = await start_node(client, name, base, args.gpus, args.step)
        out["nodes_untainted_s"] = round(await ready_nodes(client, names, args.timeout), 2)
        webhook = await start_webhook(client, base, plane.kubeconfig)
        await asyncio.wait_for(watch.informer.synced.wait(), args.timeout)

        plain = [plain_pod(f"plain-{i:05d}") for i in range(args.pods)]
        out["plain_create_s"] = round((await create_all(client, plain))[0], 2)
        plain_s = await schedule_timed(plane, args, watch, [p["metadata"]["name"] for p in plain])
        out["plain_bound"] = len({p["metadata"]["name"] for p in plain} & watch.bound)
        for p in plain:  # out of the way: the second phase starts from empty nodes
            with contextlib.suppress(errors.NotFound), errors.translate("delete"):
                await client.delete(Pod, p["metadata"]["name"], namespace=NS, grace_period=0)

        rng = random.Random(args.seed)
        kinds = [k for k, shape in enumerate(DIALECT_SHAPES) for _ in range(shape[3])]
        shapes = [rng.choice(kinds) for _ in range(args.pods)]
        bodies = [dialect_pod(f"dialect-{i:05d}", k) for i, k in enumerate(shapes)]
        if args.raw_claims:  # the same claims written by hand: kube-scheduler's DRA alone
            raw, templates = claims_by_hand(bodies, [args_memory(args)])
            for t in templates:
                with contextlib.suppress(errors.Conflict), errors.translate("template"):
                    await client.create(dict_view(ResourceClaimTemplate)(t), namespace=NS)
            await create_all(client, raw)
            raw_names = [p["metadata"]["name"] for p in raw]
            raw_s = await schedule_timed(plane, args, watch, raw_names)
            out["raw_bound"] = len(set(raw_names) & watch.bound)
            out["raw_schedule_s"] = round(raw_s, 2)
            out["raw_pods_per_s"] = round(out["raw_bound"] / raw_s, 1)
            for name in raw_names:
                with contextlib.suppress(errors.NotFound), errors.translate("delete"):
                    await client.delete(Pod, name, namespace=NS, grace_period=0)

            async def held() -> int:  # their shares must be free before the next phase
                return len([c async for c in client.list(dict_view(ResourceClaim),
                                                         namespace=NS)])
            await until("kube-controller-manager to delete the hand-written pods' claims",
                        held, args.timeout)
        created_s, denied = await create_all(client, copy.deepcopy(bodies))
        out["dialect_create_s"] = round(created_s, 2)
        out["denied_at_admission"] = denied[:3]
        templated = {b["metadata"]["name"] for b in bodies}

        async def not_made() -> int:
            made = {owner_pod(dict(c)) async for c in
                    client.list(dict_view(ResourceClaim), namespace=NS)}
            return len(templated - made)
        out["claims_made_s"] = round(await until("kube-controller-manager to make the claims",
                                                 not_made, args.timeout), 2)

        async def restart_mid_burst() -> None:
            await until("half of the pods bound", _left(watch, templated, len(templated) // 2),
                        args.timeout, poll=0.05)
            victim = sorted(watch.bound & templated)[0]
            t0 = time.perf_counter()
            node = names[0]
            await nodes[node].stop()  # the node agent restarts: same state dir and sockets
            nodes[node], _ = await start_node(client, node, base, args.gpus, args.step)
            restarts["node_agent"] = {"node": node, "s": round(time.perf_counter() - t0, 2)}
            body = next(b for b in bodies if b["metadata"]["name"] == victim)
            with errors.translate(f"delete pod {victim}"):
                await client.delete(Pod, victim, namespace=NS, grace_period=0)

            async def gone() -> int:
                return len([c async for c in client.list(dict_view(ResourceClaim),
                                                         namespace=NS)
                            if owner_pod(dict(c)) == victim])
            await until(f"the claims of {victim} to go with it", gone, args.timeout)
            errors_seen: list[str] = []
            for _ in range(5):  # as a controller would: again after a failure
                _, failed = await create_all(client, [copy.deepcopy(body)])
                errors_seen += failed
                if not failed:
                    break
                await asyncio.sleep(1)
            restarts["pod"] = {"pod": victim, "recreated": not failed,
                               "attempts": len(errors_seen) + (not failed), "errors": errors_seen}
        dialect_s = await schedule_timed(plane, args, watch, sorted(templated), restart_mid_burst)
        out["dialect_bound"] = len(templated & watch.bound)
        out["dialect_unschedulable"] = len(templated & watch.refused)
        stuck = sorted(templated - watch.bound - watch.refused)
        out["undecided"] = {"pods": stuck[:5], "count": len(stuck), "claims_not_made_by_kcm":
                            len(set(stuck) & watch.claims_missing)}

        claims = [dict(c) async for c in client.list(dict_view(ResourceClaim), namespace=NS)
                  if owner_pod(dict(c)) in templated]
        slices = [dict(s) async for s in client.list(dict_view(ResourceSlice))
                  if s["spec"].get("nodeName") in nodes]
        devices = {(s["spec"]["pool"]["name"], d["name"]): d
                   for s in slices for d in s["spec"]["devices"]}
        allocated = [c for c in claims if results(c)]
        prepare_ms, failures = await call_each(nodes, allocated, "prepare")
        mismatches = cdi_mismatches(nodes, allocated, devices, failures)
        again = allocated[0]  # a container restart: the kubelet prepares the claim again
        node = nodes[results(again)[0]["pool"]]
        spec_path = cdi.path(node.dir / "cdi", again["metadata"]["uid"])
        before = spec_path.read_bytes()
        answer = (await node.kubelet.prepare(DRIVER, again))[again["metadata"]["uid"]]
        restarts["container"] = {"claim": again["metadata"]["name"], "error": answer.error,
                                 "same_cdi_spec": spec_path.read_bytes() == before}
        over = overcommitted(claims, devices)
        out.update({
            "pods": args.pods, "nodes": args.nodes, "gpus_per_node": args.gpus,
            "plain_schedule_s": round(plain_s, 2),
            "plain_pods_per_s": round(out["plain_bound"] / plain_s, 1),
            "dialect_schedule_s": round(dialect_s, 2),
            "dialect_pods_per_s": round((out["dialect_bound"] + out["dialect_unschedulable"])
                                        / dialect_s, 1),
            "claims": len(claims), "allocated": len(allocated), "prepared":
                len(allocated) - len(failures),
            "prepare_errors": [f"{k}: {v}" for k, v in failures.items()][:5],
            "prepare_p99_ms": round(pct(prepare_ms, 0.99), 2) if prepare_ms else 0.0,
            "cdi_mismatches": len(mismatches), "cdi_mismatch_examples": mismatches[:3],
            "overcommitted_devices": len(over), "overcommitted_examples": over[:5],
            "restarts": restarts, "gave_up": list(GAVE_UP),
            "dialects": {name: sum(1 for k in shapes if DIALECT_SHAPES[k][0].keys() & set(names_))
                         for name, names_ in DIALECT_NAMES.items()},
        })
        out["ratio_to_plain"] = round(out["dialect_pods_per_s"] / out["plain_pods_per_s"], 3) \
            if out["plain_pods_per_s"] else None
        if out.get("raw_pods_per_s"):
            out["ratio_to_raw_claims"] = round(out["dialect_pods_per_s"] / out["raw_pods_per_s"], 3)
        out["api_server"] = plane.version
        out["scheduler"] = "kube-scheduler " + plane.version.split()[-1]
        return out
    finally:
        watch.informer.stop()
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watching
        if webhook is not None:
            webhook.terminate()
            webhook.wait(10)
        for n in nodes.values():
            with contextlib.suppress(Exception):
                await n.stop()


DIALECT_NAMES = {"HAMi": {"nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpu"},
                 "Volcano": {"volcano.sh/vgpu-memory"}, "GPU Manager": {"tencent.com/vcuda-core"}}


def _left(watch: PodWatch, names: set[str], target: int) -> Any:
    async def left() -> int:
        return max(0, target - len(names & watch.bound))
    return left


def cdi_mismatches(nodes: dict[str, FakeNode], allocated: list[dict[str, Any]],
                   devices: dict[tuple[str, str], dict[str, Any]], failures: dict[str, str]
                   ) -> list[str]:
    """Claims whose prepared CDI limits differ from their allocation's consumedCapacity."""
    bad = []
    for c in allocated:
        if c["metadata"]["name"] in failures:
            continue
        node = nodes[results(c)[0]["pool"]]
        spec = json.loads(cdi.path(node.dir / "cdi", c["metadata"]["uid"]).read_text())
        env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        want = expected_limits(c, devices)
        if {k: env.get(k) for k in want} != want or any(
                k.startswith("CUDA_DEVICE_MEMORY_LIMIT_") and k not in want for k in env):
            bad.append(f"{c['metadata']['name']}: CDI {env} != allocation {want}")
    return bad


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--gpus", type=int, default=8, help="fake GPUs per node")
    p.add_argument("--claims", type=int, default=400)
    p.add_argument("--step", type=int, default=256, help="dra.memoryStepMiB")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a real control plane's stage (untainting nodes, making claims "
                        "from templates, allocating, freeing) may go without progress")
    p.add_argument("--from-templates", type=float, default=0.5,
                   help="share of the claims made by kube-controller-manager from "
                        "ResourceClaimTemplates (real binaries only)")
    p.add_argument("--scheduler-qps", type=float, default=500.0,
                   help="kube-scheduler's clientConnection qps (burst: twice that)")
    p.add_argument("--dialects", action="store_true",
                   help="issue 23: --pods HAMi/Volcano/GPU Manager pods through the webhook "
                        "onto DRA, against as many plain pods (real binaries only)")
    p.add_argument("--pods", type=int, default=2000, help="pods of each kind (--dialects)")
    p.add_argument("--raw-claims", action="store_true",
                   help="with --dialects: also the same claims written by hand, placed by the "
                        "same kube-scheduler (what DRA costs without the webhook)")
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
            if args.dialects:
                if plane is None or plane.assets.kube_scheduler is None:
                    raise SystemExit("--dialects needs the real binaries: set KUBEBUILDER_ASSETS "
                                     "(bash tools/kube/build.sh prints the folder)")
                return await dialect_burst(client, args, base, plane)
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
    if arguments.dialects:
        sys.exit(1 if result["overcommitted_devices"] or result["cdi_mismatches"] or
                 result["prepared"] != result["allocated"] or result["gave_up"] or
                 result["restarts"]["container"]["error"] else 0)
    made = result["paths"]["from_templates"]
    if result["overcommitted_devices"] or result["cdi_mismatches"] or \
            result["prepared"] != result["allocated"] or result["unprepare_errors"] or (
            result["freed_after_delete"] is not None and
            result["freed_after_delete"] != result["allocated"]) or (
            isinstance(made, dict) and made["claims_from_templates"] != made["pods"]):
        sys.exit(1)

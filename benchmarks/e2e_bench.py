"""End to end: pods created at once go through the API server, the admission webhook, a
scheduler calling the extender's verbs, and the emulated node agent; how fast are they bound,
and is any GPU over-committed (DESIGN §6: >= 300 pods/s, zero over-committed GPUs)?

What runs, each in its own process (so each has a core where the machine has them): the API
server (tests/kubeapi's server, or a real kube-apiserver + etcd when KUBEBUILDER_ASSETS has
them), `gpuslice webhook` (HTTPS; on a real kube-apiserver registered with the chart's
MutatingWebhookConfiguration, rendered by helm, matchConditions and all), `gpuslice
scheduler` (logging at info, from bytecode, as installed), the scheduler (tests/kubeapi's
driver, which plays kube-scheduler with its real bodies one pod at a time, or the real
kube-scheduler when KUBEBUILDER_ASSETS has one, configured from
deploy/scheduler/kube-scheduler-config.yaml: it elects a leader and the extender follows its
Lease, as deployed; pods are created once both lead), a
node emulator (this script, `--role agent`) for the 100 nodes' kubelets and node agents: after
--allocate-ms it writes each bound pod's first kubelet status, as every node does for every pod
it admits (both modes; the node agent then writes nothing, and the extender's in-flight rule
ends at that status), or with --no-kubelet-status the agent's gpuslice.io/allocated mark
instead, and this process, which creates the pods (--concurrency in flight, plain aiohttp: the
harness's kubectl).
--restart SIGKILLs the extender when half the pods are bound and starts a new one; `restart`
then says when (seconds from the first create), how long until it was ready, the longest pause
between two binds after the kill, and the binds of each second of the run.
--group N makes every N pods in a row one job (one shape) and counts in `groups_split` the jobs
whose pods were bound to more than one node; --gang also gives each job's pods one
`gpuslice.io/gang`, which the extender keeps on one node, and --gang-size its
`gpuslice.io/gang-size` (the first pod then goes where the whole job fits); --gang-every K
makes only every K-th job a gang, the others' pods compete with them. --policy: the
extender's policy.
Prints one JSON object: pods_per_s (bound / seconds from the first create to the last bind
the agent saw), bound, overcommitted_gpus (recomputed from the API's pods and nodes), CPU per
pod of every process (from the first create on: start-up and imports left out; a restarted
extender's start-up counted), the machine's cpu_count and load, and what ran.
Usage: python benchmarks/e2e_bench.py [--nodes 100 --pods 2000 --restart --json]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import gc
import itertools
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.generic_resource import create_global_resource
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, NodeStatus, Pod
from lightkube.types import PatchType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the test API server and the scheduler driver
sys.path.insert(0, str(ROOT / "tests" / "deploy"))  # the chart's render

from test_chart import find_helm, render  # noqa: E402

from gpuslice import codec, dialects, handoff, model  # noqa: E402
from gpuslice.allocator import footprint  # noqa: E402
from gpuslice.kube.cache import Change, Informer  # noqa: E402
from gpuslice.kube.client import dict_view, make_client  # noqa: E402
from gpuslice.kube.patch import patch_metadata  # noqa: E402
from gpuslice.scheduler.state import trim_pod  # noqa: E402
from kubeapi.bench import cpu_seconds  # noqa: E402
from kubeapi.certs import make_pki  # noqa: E402
from kubeapi.envtest import ControlPlane, find_assets  # noqa: E402
from kubeapi.raw import has_not_ready_taint  # noqa: E402
from kubeapi.scheduler_driver import DriverConfig, SchedulerDriver, api_session  # noqa: E402
from kubeapi.server import spawn  # noqa: E402

GPU_MIB = 81920
# as deployed: kube-scheduler's configuration, and its Lease (namespace, name), which the
# extender follows
KUBE_SCHEDULER_CONFIG = yaml.safe_load(
    (ROOT / "deploy/scheduler/kube-scheduler-config.yaml").read_text())
LEASE = (KUBE_SCHEDULER_CONFIG["leaderElection"]["resourceNamespace"],
         KUBE_SCHEDULER_CONFIG["leaderElection"]["resourceName"])
SHAPES = (  # (limits as a user writes them, weight): a few pod templates, as in real clusters
    ({"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "10"}, 4),
    ({"nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "20"}, 3),
    ({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "20"}, 1),
    ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2048"}, 2),
)
MUTATING = create_global_resource("admissionregistration.k8s.io", "v1",
                                  "MutatingWebhookConfiguration", "mutatingwebhookconfigurations")
CLI_CODE = "import sys; from gpuslice.cli import main; sys.exit(main())"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_body(name: str, gpus: int) -> dict[str, Any]:
    inv = model.NodeInventory(node=name, gpus=tuple(
        model.GPU(uuid=f"GPU-{name}-{i}", model="NVIDIA H100 80GB HBM3", memory_mib=GPU_MIB,
                  index=i, split_count=10) for i in range(gpus)))
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"kubernetes.io/hostname": name},
        "annotations": {codec.INVENTORY_ANNOTATION: codec.encode_inventory(inv)}}}


def node_status(gpus: int) -> dict[str, Any]:
    """What the kubelet and the node agent's device plugin report."""
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "250", "nvidia.com/gpu": str(10 * gpus),
             "volcano.sh/vgpu-number": str(10 * gpus), "tencent.com/vcuda-core": str(100 * gpus)}
    return {"status": {"capacity": alloc, "allocatable": alloc, "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "emulated"}]}}


async def add_nodes(client: AsyncClient, count: int, gpus: int) -> list[str]:
    """The GPU nodes, registered and Ready, as their kubelets and node agents leave them."""
    names = [f"gpu-{i:03d}" for i in range(count)]
    for name in names:
        await client.create(dict_view(Node)(node_body(name, gpus)))  # type: ignore[call-arg]
        await client.patch(NodeStatus, name, node_status(gpus), patch_type=PatchType.MERGE)
    return names


def plain_pod_body(name: str) -> dict[str, Any]:
    """A pod without a GPU: what the plain kube-scheduler places in the comparison."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:never-pulled",
                                     "resources": {"requests": {"cpu": "10m"}}}]}}


def pod_body(name: str, limits: dict[str, str], webhook: bool, gang: str = "",
             gang_size: int = 0) -> dict[str, Any]:
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "default"}, "spec": {"containers": [
            {"name": "main", "image": "registry.invalid/cuda:never-pulled",
             "resources": {"limits": dict(limits)}}]}}
    if gang:
        pod["metadata"]["annotations"] = {dialects.GANG_ANNOTATION: gang}
    if gang and gang_size:
        pod["metadata"]["annotations"][dialects.GANG_SIZE_ANNOTATION] = str(gang_size)
    if not webhook:  # what the webhook would have done
        for _, _, resource, quantity in handoff.missing_device_resources(pod):
            pod["spec"]["containers"][0]["resources"]["limits"][resource] = str(quantity)
        pod["metadata"]["labels"] = {handoff.MANAGED_LABEL: "true"}
        pod["spec"]["schedulerName"] = "gpuslice-scheduler"
    return pod


class Processes:
    """`gpuslice webhook` and `gpuslice scheduler` as child processes."""

    def __init__(self, work: Path, kubeconfig: Path, policy: str = "binpack",
                 follow: bool = True, python: str = sys.executable) -> None:
        self.work, self.kubeconfig, self.policy, self.follow = work, kubeconfig, policy, follow
        self.cli = [python, "-c", CLI_CODE]  # the interpreter gpuslice's processes run on
        self.extender_port = free_port()
        self.extender: subprocess.Popen[bytes] | None = None
        self.webhook: subprocess.Popen[bytes] | None = None
        self.extender_cpu_s = 0.0  # of extenders already stopped
        # as installed from a wheel (pip compiles its modules): a restart reads bytecode, not
        # source, also where PYTHONDONTWRITEBYTECODE is set
        self.env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                    "PYTHONPYCACHEPREFIX": str(work / "pycache")}

    def start_extender(self) -> None:
        cfg = self.work / "scheduler.yaml"
        cfg.write_text(yaml.safe_dump({
            "address": "127.0.0.1", "port": self.extender_port, "kubeconfig": str(self.kubeconfig),
            "policy": self.policy, "logLevel": "info", "leaderElection": {
                # as deployed (deploy/scheduler/, the chart): leading with kube-scheduler
                "follow": True, "leaseName": LEASE[1], "leaseNamespace": LEASE[0]}
            if self.follow else {
                # the driver in kube-scheduler's place holds no Lease: the extender's own
                "leaseNamespace": "default", "leaseSeconds": 4, "renewDeadlineSeconds": 3,
                "retryPeriodSeconds": 1}}))
        self.extender = subprocess.Popen([*self.cli, "scheduler", "--config", str(cfg)],
                                         env=self.env,
                                         stderr=open(self.work / "scheduler.log", "ab"))  # noqa: SIM115

    def start_webhook(self) -> tuple[str, bytes]:
        pki = make_pki()
        files = pki.write(self.work / "webhook-pki")
        port = free_port()
        cfg = self.work / "webhook.yaml"
        cfg.write_text(yaml.safe_dump({
            "address": "127.0.0.1", "port": port, "certFile": str(files["serving.crt"]),
            "keyFile": str(files["serving.key"]), "checkNamespaceLabels": False,
            "logLevel": "info"}))
        self.webhook = subprocess.Popen([*self.cli, "webhook", "--config", str(cfg)], env=self.env,
                                        stderr=open(self.work / "webhook.log", "ab"))  # noqa: SIM115
        return f"https://127.0.0.1:{port}", pki.ca_cert

    def kill_extender(self, sig: int) -> None:
        assert self.extender is not None
        self.extender_cpu_s += cpu_seconds(self.extender.pid)
        self.extender.send_signal(sig)
        self.extender.wait(30)

    def stop(self) -> None:
        for proc in (self.extender, self.webhook):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)


async def wait_http(url: str, what: str, timeout: float = 60.0, *, every: float = 0.1,
                    process: subprocess.Popen[bytes] | None = None, **kw: Any) -> None:
    """Until `url` answers 200, asked `every` s; a `process` (what serves it) that exits ends
    the wait at once."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url, **kw) as r:
                    if r.status == 200:
                        return
            if process is not None and process.poll() is not None:
                raise SystemExit(f"e2e_bench: {what} exited ({process.returncode}) before it "
                                 "was ready")
            if time.monotonic() > deadline:
                raise SystemExit(f"e2e_bench: {what} did not become ready in {timeout:.0f}s")
            await asyncio.sleep(every)


async def alternated(baseline: str | None, runs: int,
                     once: Callable[[str], Awaitable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """`once(src)` `runs` times for this checkout's src/ and, with `baseline` (another checkout,
    e.g. a git worktree), that one's, alternated so a busier minute hits both. A first round,
    not counted, writes each one's bytecode, as pip does."""
    codes = {"this checkout": str(ROOT / "src")}
    if baseline:
        codes["baseline"] = str(Path(baseline).resolve() / "src")
    out = []
    for i in range(runs + 1):
        for code, src in codes.items():
            result = await once(src)
            if i:
                out.append({"code": code, **result})
    return out


def _trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the extender keeps, and the QoS class the kubelet's status repeats (immutable: a
    status write with another one is refused)."""
    out = trim_pod(pod)
    if qos := (pod.get("status") or {}).get("qosClass"):
        out["status"]["qosClass"] = qos
    return out


class AgentEmulator:
    """The GPU nodes' side of each bound pod, after `delay_s` (the kubelet's admission and the
    node agent's Allocate answers): with `kubelet`, the kubelet's first status write (container
    statuses, Waiting/ContainerCreating), which every node makes for every pod it admits, in
    both modes; without it, gpuslice's `gpuslice.io/allocated` mark instead, which the node
    agent writes only where the kubelet's status has not landed by `allocatedMarkAfterSeconds`
    (docs/node-agent.md). Records when it saw each pod bound."""

    def __init__(self, client: AsyncClient, api: aiohttp.ClientSession, delay_s: float,
                 plain: bool = False, kubelet: bool = True) -> None:
        self.client, self.api, self.delay_s, self.kubelet = client, api, delay_s, kubelet
        self.bound: dict[str, float] = {}  # pod key -> when this watch saw it bound
        self.failures: Counter[str] = Counter()  # writes that failed, by error
        self.changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        labels = None if plain else {handoff.MANAGED_LABEL: "true"}  # plain: every pod
        self.informer: Informer[Any] = Informer(client, Pod, labels=labels, trim=_trim_pod,
                                                handler=self._on)

    def _on(self, c: Change[Any]) -> None:
        pod = c.new
        if pod is None or not pod["spec"].get("nodeName") or c.key in self.bound:
            return
        self.bound[c.key] = time.monotonic()
        self.changed.set()
        if self.kubelet or codec.ASSIGNMENT_ANNOTATION in pod["metadata"]["annotations"]:
            task = asyncio.get_running_loop().create_task(self._admit(pod))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _admit(self, pod: dict[str, Any]) -> None:
        await asyncio.sleep(self.delay_s)
        meta = pod["metadata"]
        try:
            if self.kubelet:
                await self._status(pod)
            else:
                names = ",".join(r.container for r in handoff.device_requests(pod))
                await patch_metadata(self.client, Pod, meta["name"], namespace=meta["namespace"],
                                     annotations={handoff.ALLOCATED: names})
        except Exception as exc:  # counted and reported: the run measured something else
            self.failures[f"{type(exc).__name__}: {exc}".replace(meta["name"], "<pod>")[:240]] += 1

    async def _status(self, pod: dict[str, Any]) -> None:
        """The kubelet's first pods/status patch after admission (a strategic merge patch, as
        the kubelet's status manager sends it; the fields of v1.36's first write)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        meta = pod["metadata"]
        conditions = [{"type": t, "status": v, "lastProbeTime": None, "lastTransitionTime": now,
                       **({"reason": "ContainersNotReady",
                           "message": "containers with unready status: [main]"}
                          if t in ("Ready", "ContainersReady") else {})}
                      for t, v in (("PodReadyToStartContainers", "False"),
                                   ("Initialized", "True"), ("Ready", "False"),
                                   ("ContainersReady", "False"))]
        body = {"metadata": {"uid": meta["uid"]}, "status": {
            "$setElementOrder/conditions": [{"type": c["type"]} for c in conditions]
            + [{"type": "PodScheduled"}],
            "conditions": conditions, "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
            "startTime": now, "qosClass": pod["status"].get("qosClass", "BestEffort"),
            "containerStatuses": [{"name": c["name"], "image": "registry.invalid/never-pulled",
                                   "imageID": "",
                                   "ready": False, "restartCount": 0, "started": False,
                                   "lastState": {}, "volumeMounts": [],
                                   "state": {"waiting": {"reason": "ContainerCreating"}}}
                                  for c in pod["spec"]["containers"]]}}
        url = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        async with self.api.patch(url, data=json.dumps(body), headers={
                "Content-Type": "application/strategic-merge-patch+json"}) as r:
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:300]}")

    async def wait_bound(self, count: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while len(self.bound) < count and time.monotonic() < deadline:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))
        return len(self.bound)

    async def finish(self) -> None:
        """Let the marks under way land."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)


def pod_bodies(a: argparse.Namespace) -> list[dict[str, Any]]:
    """The pods to create: plain ones, or GPU pods of SHAPES drawn per job of --group pods (the
    same draws as one pod a job when --group is 1), a gang a job with --gang."""
    if a.plain:
        return [plain_pod_body(f"job-{i:05d}") for i in range(a.pods)]
    rng = random.Random(a.seed)
    shapes = [s for s, w in SHAPES for _ in range(w)]
    out = []
    for i in range(a.pods):
        if i % a.group == 0:
            shape = rng.choice(shapes)
        job = i // a.group
        gang = f"job-{job:05d}" if a.gang and a.group > 1 and job % a.gang_every == 0 else ""
        out.append(pod_body(f"job-{i:05d}", shape, not a.no_webhook, gang,
                            a.group if a.gang_size else 0))
    return out


def groups_split(pods: list[dict[str, Any]], group: int, every: int = 1) -> int:
    """How many jobs of `group` pods in a row (by name), of every `every`-th job, were bound to
    more than one node."""
    nodes: dict[int, set[str]] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        job = int(p["metadata"]["name"].removeprefix("job-")) // group
        if node and job % every == 0:
            nodes.setdefault(job, set()).add(node)
    return sum(1 for on in nodes.values() if len(on) > 1)


def overcommitted(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[int, int]:
    """(GPUs over their memory, cores or slices, bound pods without an assignment on their
    node), recomputed from the API's objects with the allocator's footprint rule."""
    gpus = {}
    for n in nodes:
        text = (n["metadata"].get("annotations") or {}).get(codec.INVENTORY_ANNOTATION)
        if text:
            for g in codec.decode_inventory(text, node=n["metadata"]["name"]).gpus:
                gpus[g.uuid] = g
    used: dict[str, list[int]] = {}
    stray = 0
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        text = (p["metadata"].get("annotations") or {}).get(codec.ASSIGNMENT_ANNOTATION)
        if not node or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        a = codec.decode_assignment(text) if text else None
        if a is None or a.node != node:
            stray += 1
            continue
        for uuid, f in footprint(a, gpus).items():
            u = used.setdefault(uuid, [0, 0, 0, 0])
            u[0] += f.mem
            u[1] += f.cores
            u[2] += f.slots
            u[3] += f.excl
    bad = sum(1 for uuid, (mem, cores, slots, excl) in used.items()
              if mem > gpus[uuid].memory_mib or cores > 100 or slots > gpus[uuid].split_count
              or (excl and slots > 1))
    return bad, stray


class Child:
    """This script in another role (`--role driver|agent`), in its own process so each part of
    the pipeline has a core of its own where there are cores; it reports JSON lines on stdout
    (its figures, and its own CPU time at the end) and stops when its stdin closes."""

    def __init__(self, role: str, *args: str) -> None:
        self.role, self.args = role, args
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> dict[str, Any]:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--role", self.role, *self.args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            limit=64 * 2**20)  # the last line lists every bind's time: 64 KiB holds ~3,000
        return await self.line()

    async def line(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        text = await self.proc.stdout.readline()
        if not text:
            raise SystemExit(f"e2e_bench: the {self.role} process ended early (exit "
                             f"{await self.proc.wait()})")
        return dict(json.loads(text))

    async def finish(self) -> dict[str, Any]:
        """Close its stdin, read its last report and wait for it to exit."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        report = await self.line()
        await self.proc.wait()
        return report

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def stdin_closed() -> None:
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)


async def driver_role(a: argparse.Namespace) -> None:
    """tests/kubeapi's kube-scheduler driver, until stdin closes; then its statistics."""
    extender = {**KUBE_SCHEDULER_CONFIG["extenders"][0], "urlPrefix": a.extender_url}
    config = DriverConfig.from_extender(extender, initial_backoff=0.2, max_backoff=2.0,
                                        seed=a.seed)
    async with SchedulerDriver(Path(a.kubeconfig), config) as driver:
        say({"ready": True, "cpu_s": time.process_time()})
        await stdin_closed()
    stats = driver.stats
    say({"failed": stats.failed,
         "top_failures": Counter(m[:120] for _, m in stats.failures).most_common(3),
         "verb_ms_p50": {verb: round(sorted(ts)[len(ts) // 2] * 1000, 1)
                         for verb, ts in stats.verb_seconds.items() if ts},
         "cpu_s": time.process_time()})


async def agent_role(a: argparse.Namespace) -> None:
    """The node emulator (kubelets, node agents): reports when half, then all --pods are bound."""
    client = make_client(a.kubeconfig)  # as the node agent's
    api = api_session(Path(a.kubeconfig), limit=32, timeout=60)  # as the kubelets'
    agent = AgentEmulator(client, api, a.allocate_ms / 1000, plain=a.plain,
                          kubelet=not a.no_kubelet_status)
    task = asyncio.create_task(agent.informer.run())
    await agent.informer.synced.wait()
    say({"ready": True, "cpu_s": time.process_time()})
    say({"half": await agent.wait_bound(a.pods // 2, a.timeout)})
    bound = await agent.wait_bound(a.pods, a.timeout)
    say({"bound": bound, "last": max(agent.bound.values(), default=None),
         "times": sorted(agent.bound.values())})
    await stdin_closed()
    await agent.finish()
    agent.informer.stop()
    await task
    await client.close()
    await api.close()
    say({"cpu_s": time.process_time(), "failures": agent.failures.most_common(3)})


async def verb_cpu(a: argparse.Namespace) -> dict[str, Any]:
    """--verb-cpu: the extender's CPU per pod and step, one call at a time (nothing else
    running): --pods pods created (their watch events), filter + prioritize each, bind each."""
    work = Path(tempfile.mkdtemp(prefix="e2e-verbs-"))
    server = spawn(work / "kubeapi", history=1_000_000)
    procs = Processes(work, server.kubeconfig, follow=False, python=a.gpuslice_python)
    client = AsyncClient(config=KubeConfig.from_file(server.kubeconfig))
    try:
        names = await add_nodes(client, a.nodes, a.gpus)
        procs.start_extender()
        url = f"http://127.0.0.1:{procs.extender_port}"
        await wait_http(f"{url}/readyz", "the extender")
        assert procs.extender is not None
        pid, out = procs.extender.pid, {}
        async with api_session(server.kubeconfig, limit=8, timeout=60) as api, \
                aiohttp.ClientSession() as http:
            async def call(verb: str, body: Any) -> Any:
                async with http.post(f"{url}/{verb}", json=body) as r:
                    return await r.json()

            async def per_call(what: str, calls: Any) -> None:
                c0 = cpu_seconds(pid)
                for c in calls:
                    await c
                await asyncio.sleep(1.0)  # the watch events the calls caused
                out[what] = round((cpu_seconds(pid) - c0) * 1000 / a.pods, 3)

            pods: list[dict[str, Any]] = []

            async def create(i: int) -> None:
                async with api.post("/api/v1/namespaces/default/pods", json=pod_body(
                        f"job-{i:05d}", SHAPES[0][0], False)) as r:
                    pods.append(dict(await r.json()))

            await per_call("created (its watch event)", (create(i) for i in range(a.pods)))
            async def choose(pod: dict[str, Any]) -> None:  # as kube-scheduler: one, then the other
                body = {"Pod": pod, "Nodes": None, "NodeNames": names}
                await call("filter", body)
                await call("prioritize", body)

            await per_call("filter + prioritize", (choose(p) for p in pods))
            await per_call("bind (its watch event included)", (call("bind", {
                "PodName": p["metadata"]["name"], "PodNamespace": "default",
                "PodUID": p["metadata"]["uid"], "Node": names[i % len(names)]})
                for i, p in enumerate(pods)))
        return {"extender_cpu_ms_per_call": out, "pods": a.pods, "nodes": a.nodes,
                "cpu_count": os.cpu_count(),
                "load_average": [round(x, 2) for x in os.getloadavg()]}
    finally:
        await client.close()
        procs.stop()
        server.stop()


def kube_scheduler_config(extender_url: str | None, qps: int) -> dict[str, Any]:
    """deploy/scheduler/kube-scheduler-config.yaml with its extender at `extender_url`; None:
    the stock scheduler alone (the plain run). Both elect a leader (LEASE), and both raise
    clientConnection.qps/burst alike: the default 50 caps kube-scheduler's own writes (events,
    failure statuses)."""
    config = {**KUBE_SCHEDULER_CONFIG, "clientConnection": {"qps": qps, "burst": 2 * qps}}
    if extender_url is None:
        del config["extenders"]
        config["profiles"] = [{"schedulerName": "default-scheduler"}]
    else:
        config["extenders"] = [{**KUBE_SCHEDULER_CONFIG["extenders"][0],
                                "urlPrefix": extender_url}]
    return config


async def run(a: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="e2e-bench-"))
    assets = find_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    if a.plain and (assets is None or assets.kube_scheduler is None):
        raise SystemExit("e2e_bench: --plain measures the real kube-scheduler: set "
                         "KUBEBUILDER_ASSETS (docs/development.md)")
    plane = server = None
    if assets is not None:
        plane = ControlPlane(assets, work / "envtest").start()
        kubeconfig, api_name = plane.kubeconfig, plane.version
    else:
        server = spawn(work / "kubeapi", history=1_000_000)  # its own process: no shared GIL
        kubeconfig, api_name = server.kubeconfig, "in-process"
    procs = Processes(work, kubeconfig, a.policy,
                      follow=plane is not None and plane.assets.kube_scheduler is not None,
                      python=a.gpuslice_python)
    client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
    children: list[Child] = []
    try:
        await add_nodes(client, a.nodes, a.gpus)
        if plane is not None:  # the not-ready taint kube-apiserver gives every new Node
            await untainted(client, a.nodes, a.timeout)
        webhook = extender = "not used (--plain)"
        ext_url = None
        if not a.plain:
            webhook = "not used (--no-webhook: pods created as the webhook leaves them)"
            if not a.no_webhook:
                url, ca = procs.start_webhook()
                await wait_http(f"{url}/healthz", "the webhook", ssl=False)
                webhook = "gpuslice webhook (HTTPS, own process)"
                # (the in-process server evaluates no matchConditions: a bare configuration)
                if plane is None or find_helm() is None:
                    await client.create(MUTATING(webhook_config(url, ca)))  # type: ignore
                    webhook += ", a bare MutatingWebhookConfiguration" + (
                        "" if plane is None else " (no helm: bash deploy/tools/get-helm.sh)")
                else:
                    await client.create(MUTATING(chart_webhook_config(url, ca)))  # type: ignore
                    webhook += ", the chart's MutatingWebhookConfiguration"
            procs.start_extender()
            ext_url = f"http://127.0.0.1:{procs.extender_port}"
            await wait_http(f"{ext_url}/readyz", "the extender")
            extender = "gpuslice scheduler (own process, Lease leader election)"
        common = ("--kubeconfig", str(kubeconfig), "--pods", str(a.pods),
                  "--timeout", str(a.timeout), "--seed", str(a.seed),
                  *(("--plain",) if a.plain else ()),
                  *(("--no-kubelet-status",) if a.no_kubelet_status else ()))
        agent = Child("agent", *common, "--allocate-ms", str(a.allocate_ms))
        children.append(agent)
        started = {"node emulator": (await agent.start())["cpu_s"]}
        driver = None
        if plane is not None and plane.assets.kube_scheduler is not None:
            plane.start_scheduler(kube_scheduler_config(ext_url, a.scheduler_qps))
            await leading(client, ext_url, a.timeout)
            scheduler_name = (f"kube-scheduler {plane.version.split()[-1]} (clientConnection "
                              f"qps {a.scheduler_qps}, burst {2 * a.scheduler_qps})")
        else:
            scheduler_name = "driver"
            assert ext_url is not None
            driver = Child("driver", *common, "--extender-url", ext_url)
            children.append(driver)
            started["driver"] = (await driver.start())["cpu_s"]
        bodies = [json.dumps(b) for b in pod_bodies(a)]

        def process_cpu() -> dict[str, float]:
            """CPU seconds so far of every process but this one and the children."""
            cpu = {p.name: cpu_seconds(p.popen.pid) for p in (plane.processes if plane else ())
                   if p.popen is not None}
            if procs.extender is not None:
                cpu["extender"] = procs.extender_cpu_s + cpu_seconds(procs.extender.pid)
            if procs.webhook is not None:
                cpu["webhook"] = cpu_seconds(procs.webhook.pid)
            if server is not None:
                cpu["api_server"] = cpu_seconds(server.process.pid)
            return cpu

        cpu_before = time.process_time()
        started.update(process_cpu())
        requests_before = await api_requests(kubeconfig) if plane is not None else Counter()
        async with api_session(kubeconfig, limit=a.concurrency, timeout=60) as api:
            t0 = time.monotonic()
            gate = asyncio.Semaphore(a.concurrency)

            async def create(body: str) -> None:
                async with gate, api.post("/api/v1/namespaces/default/pods", data=body,
                                          headers={"Content-Type": "application/json"}) as r:
                    if r.status != 201:
                        raise SystemExit(f"e2e_bench: creating a pod: HTTP {r.status}: "
                                         f"{(await r.text())[:300]}")

            creating = asyncio.gather(*(create(b) for b in bodies))
            await agent.line()  # half of the pods are bound
            restart: dict[str, float] = {}
            if a.restart and not a.plain:
                restart["killed"] = time.monotonic()
                procs.kill_extender(signal.SIGKILL)  # no clean-up: a crash mid-stream
                procs.start_extender()
                await wait_http(f"{ext_url}/readyz", "the restarted extender")
                restart["ready"] = time.monotonic()
            await creating
        cpu = {"pod creation": time.process_time() - cpu_before}
        done = await agent.line()
        cpu.update(process_cpu())
        requests = (await api_requests(kubeconfig) - requests_before) if plane is not None else None
        bound, last = int(done["bound"]), done["last"]
        elapsed = (last - t0) if last is not None else 0.0
        stats = await driver.finish() if driver is not None else None
        if stats is not None:
            cpu["driver"] = stats["cpu_s"]
        emulated = await agent.finish()
        cpu["node emulator"] = emulated["cpu_s"]
        pods = [dict(p) async for p in client.list(dict_view(Pod), namespace="default")]
        nodes = [dict(n) async for n in client.list(dict_view(Node))]
        bad, stray = (0, 0) if a.plain else overcommitted(nodes, pods)
        split = groups_split(pods, a.group, a.gang_every if a.gang else 1) \
            if a.group > 1 else None
        return {
            "mode": "plain" if a.plain else "gpuslice",
            "pods_per_s": round(bound / elapsed, 1) if elapsed > 0 else None,
            "bound": bound, "pods": a.pods, "nodes": a.nodes, "gpus_per_node": a.gpus,
            "seconds": round(elapsed, 2), "overcommitted_gpus": bad,
            "bound_without_assignment": stray, "restarted_extender": bool(restart),
            "restart": restart_timeline(restart, done["times"], t0) if restart else None,
            "groups_split": split, "gangs": a.gang and a.group > 1,
            "gang_size": a.gang_size and a.gang and a.group > 1, "policy": a.policy,
            "node_write_failures": emulated["failures"],
            "failed_scheduling_attempts": stats["failed"] if stats else None,
            "top_failures": stats["top_failures"] if stats else None,
            "verb_ms_p50": stats["verb_ms_p50"] if stats else None,
            "cpu_ms_per_pod": {k: round((v - started.get(k, 0.0)) * 1000 / max(bound, 1), 2)
                               for k, v in cpu.items()},
            "api_requests_per_pod": None if requests is None else {
                k: round(n / max(bound, 1), 2) for k, n in requests.most_common()
                if n >= bound / 20},
            "cpu_count": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "python": {"harness": platform.python_version(),
                       **({} if a.plain else {"gpuslice": python_version(a.gpuslice_python)})},
            "api_server": api_name, "scheduler": scheduler_name, "webhook": webhook,
            "extender": extender,
            "nodes_emulated": ("each pod's first kubelet status write" if not a.no_kubelet_status
                               else "no kubelet status writes; " + (
                                   "a watch records when each pod is bound" if a.plain else
                                   "the node agent's gpuslice.io/allocated mark")) +
            f" {a.allocate_ms:g} ms after the pod is seen bound (own process)",
        }
    finally:
        for child in children:
            child.kill()
        await client.close()
        procs.stop()
        if server is not None:
            server.stop()
        if plane is not None:
            plane.stop()


def python_version(python: str) -> str:
    return subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def restart_timeline(restart: dict[str, float], times: list[float], t0: float
                     ) -> dict[str, Any]:
    """When the extender was killed and ready again (seconds from the first create), the
    longest pause between two binds after the kill, and the binds of each second of the run:
    what a restart costs the rate."""
    killed = restart["killed"]
    after = [killed, *(t for t in times if t >= killed)]
    per_s = Counter(int(t - t0) for t in times)
    return {"killed_at_s": round(killed - t0, 2),
            "ready_after_s": round(restart["ready"] - killed, 2),
            "longest_pause_s": round(max(b - a for a, b in itertools.pairwise(after))
                                     if len(after) > 1 else 0.0, 2),
            "binds_per_s": [per_s[i] for i in range(max(per_s) + 1)] if per_s else []}


async def api_requests(kubeconfig: Path) -> Counter[str]:
    """kube-apiserver's apiserver_request_total, summed by verb, resource and subresource."""
    async with api_session(kubeconfig, limit=1, timeout=30) as api, api.get("/metrics") as r:
        text = await r.text()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(kv.split("=", 1) for kv in line[24:line.rindex("}")].split(","))
            key = " ".join(labels.get(k, "").strip('"') for k in ("verb", "resource",
                                                                    "subresource")).strip()
            counts[key] += int(float(line.rsplit(" ", 1)[1]))
    return counts


async def leading(client: AsyncClient, extender_url: str | None, timeout: float) -> None:
    """Until kube-scheduler holds LEASE and the extender (if any) leads with it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ApiError):
            lease = await client.get(Lease, LEASE[1], namespace=LEASE[0])
            if lease.spec.holderIdentity:
                if extender_url is None:
                    return
                async with aiohttp.ClientSession() as http, \
                        http.get(f"{extender_url}/metrics") as r:
                    if "\ngpuslice_scheduler_leader 1.0" in await r.text():
                        return
        await asyncio.sleep(0.1)
    raise SystemExit(f"e2e_bench: kube-scheduler and the extender lead no Lease {LEASE} "
                     f"after {timeout:g} s")


async def untainted(client: AsyncClient, count: int, timeout: float) -> None:
    """Until kube-controller-manager's node lifecycle controller has lifted the not-ready
    taint from every (Ready) node, as it does for a node whose kubelet reports Ready."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = [dict(n) async for n in client.list(dict_view(Node))]
        tainted = [n["metadata"]["name"] for n in nodes if has_not_ready_taint(n)]
        if len(nodes) >= count and not tainted:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"e2e_bench: {len(tainted)} nodes kept the not-ready taint for "
                             f"{timeout:.0f}s (is kube-controller-manager running?)")
        await asyncio.sleep(0.2)


async def compare(a: argparse.Namespace) -> dict[str, Any]:
    """--compare: plain and gpuslice runs alternated on fresh control planes, side by side."""
    rounds = []
    for _ in range(a.rounds):
        pair = {}
        for plain in (True, False):
            pair["plain" if plain else "gpuslice"] = await run(
                argparse.Namespace(**{**vars(a), "plain": plain}))
        rounds.append(pair)
    ratios = sorted(r["gpuslice"]["pods_per_s"] / r["plain"]["pods_per_s"] for r in rounds)
    return {"ratio_median": round(statistics.median(ratios), 3),
            "ratios": [round(x, 3) for x in ratios],
            "plain_pods_per_s": [r["plain"]["pods_per_s"] for r in rounds],
            "gpuslice_pods_per_s": [r["gpuslice"]["pods_per_s"] for r in rounds],
            "overcommitted_gpus": sum(r["gpuslice"]["overcommitted_gpus"] for r in rounds),
            "bound": min(r[m]["bound"] for r in rounds for m in r),
            "rounds": rounds}


def chart_webhook_config(url: str, ca: bytes) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration as `helm install` renders it for a 1.36 server
    (tests/deploy/test_chart.py; its matchConditions included: kube-apiserver evaluates them for
    every pod), pointed at `url`."""
    (hook,) = [copy.deepcopy(o) for o in render("default")
               if o["kind"] == "MutatingWebhookConfiguration"]
    hook["metadata"].pop("annotations", None)
    hook["webhooks"][0]["clientConfig"] = {"url": f"{url}/mutate",
                                           "caBundle": base64.b64encode(ca).decode()}
    return hook


def webhook_config(url: str, ca: bytes) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "gpuslice"},
            "webhooks": [{"name": "pods.gpuslice.io", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None", "timeoutSeconds": 10, "failurePolicy": "Fail",
                          "clientConfig": {"url": f"{url}/mutate",
                                           "caBundle": base64.b64encode(ca).decode()},
                          "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                     "operations": ["CREATE"], "resources": ["pods"]}]}]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node (80 GiB, split 10)")
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--restart", action="store_true",
                    help="SIGKILL the extender when half the pods are bound, start a new one")
    ap.add_argument("--allocate-ms", type=float, default=50.0,
                    help="the emulated node agent's delay from bind to gpuslice.io/allocated")
    ap.add_argument("--no-kubelet-status", action="store_true",
                    help="model no kubelet status writes: gpuslice's agent then marks "
                         "gpuslice.io/allocated on each pod (the rate before 2026-11-27)")
    ap.add_argument("--concurrency", type=int, default=32, help="pod creations in flight")
    ap.add_argument("--group", type=int, default=1,
                    help="pods of one job (one shape) in a row; groups_split counts those split")
    ap.add_argument("--gang", action="store_true",
                    help="each job of --group pods names one gpuslice.io/gang")
    ap.add_argument("--gang-every", type=int, default=1, metavar="K",
                    help="with --gang: only every K-th job is a gang (and counted in "
                         "groups_split); the others' pods name none")
    ap.add_argument("--gang-size", action="store_true",
                    help="with --gang: each pod also says its gang's size (gpuslice.io/gang-size)")
    ap.add_argument("--policy", default="binpack", help="the extender's placement policy")
    ap.add_argument("--no-webhook", action="store_true")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plain", action="store_true",
                    help="pods without a GPU, the stock kube-scheduler alone (no webhook, no "
                         "extender): the rate gpuslice is compared with; needs KUBEBUILDER_ASSETS")
    ap.add_argument("--compare", action="store_true",
                    help="--plain and gpuslice runs alternated, --rounds pairs, and their ratio")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs for --compare")
    ap.add_argument("--scheduler-qps", type=int, default=500,
                    help="the real kube-scheduler's clientConnection.qps (burst twice it)")
    ap.add_argument("--gpuslice-python", default=sys.executable, metavar="PYTHON",
                    help="the interpreter the webhook and the extender run on (this one by "
                         "default; the control-plane image ships Python 3.12): a virtual "
                         "environment's python with gpuslice installed")
    ap.add_argument("--verb-cpu", action="store_true",
                    help="instead: the extender's CPU per verb, one call at a time")
    ap.add_argument("--role", choices=("driver", "agent"), help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    ap.add_argument("--extender-url", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role is not None:
        # as `python -m kubeapi`: what these processes keep is acyclic JSON, freed by reference
        # counting, so young collections are made rarer and full ones practically never run
        gc.set_threshold(50_000, 20, 1000)
        asyncio.run(driver_role(a) if a.role == "driver" else agent_role(a))
        return 0
    out = asyncio.run(verb_cpu(a) if a.verb_cpu else compare(a) if a.compare else run(a))
    print(json.dumps(out) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0 if a.verb_cpu or (out["overcommitted_gpus"] == 0 and out["bound"] == a.pods) else 1


if __name__ == "__main__":
    sys.exit(main())

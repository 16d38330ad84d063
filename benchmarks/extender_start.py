"""How long a (re)started extender takes to serve a large cluster, and how much memory it needs
to get there: `gpuslice scheduler` started against --nodes GPU nodes and --pods bound, running
GPU pods (each with its assignment), timed from its start to /readyz (both caches listed), and
its peak RSS (VmHWM) then. While it lists, kube-scheduler's calls wait (up to 3 s) or fail.

The API server is the real kube-apiserver + etcd when KUBEBUILDER_ASSETS has them, else
tests/kubeapi's, in its own process. Pods carry --pad-kib KiB of environment, as real pods
carry env, volumes and probes (a real kube-apiserver drops the status a create carries: its
pods stay Pending, with their assignment and the allocated mark).
Usage: python benchmarks/extender_start.py [--nodes 5000 --pods 40000 --runs 3 --json]
       [--baseline ../other-checkout]  (its starts alternate with this checkout's, one fill)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_bench import SHAPES, Processes, alternated, node_body, node_status, pod_body, wait_http
from gpuslice import codec, model
from kubeapi.bench import cpu_seconds
from kubeapi.envtest import ControlPlane, find_assets
from kubeapi.scheduler_driver import api_session
from kubeapi.server import spawn

GPUS = 8


def bound_pod(i: int, nodes: int, pad_kib: int) -> dict[str, Any]:
    """Pod i, bound and running on node i % nodes, GPU (i // nodes) % 8, as the extender and
    the kubelet leave it."""
    node = f"gpu-{i % nodes:04d}"
    pod = pod_body(f"job-{i:05d}", SHAPES[0][0], webhook=False)
    slices = (model.GPUSlice(uuid=f"GPU-{node}-{(i // nodes) % GPUS}", memory_mib=4096,
                             cores=10),)
    assignment = model.PodAssignment(node=node, containers=(
        model.ContainerAssignment(container="main", slices=slices),))
    pod["metadata"]["annotations"] = {codec.ASSIGNMENT_ANNOTATION:
                                      codec.encode_assignment(assignment),
                                      "gpuslice.io/allocated": "main"}
    pod["metadata"]["uid"] = f"uid-{i:05d}"
    pod["spec"]["nodeName"] = node
    pod["spec"]["containers"][0]["env"] = [{"name": f"SETTING_{k:04d}", "value": "x" * 40}
                                           for k in range(pad_kib * 1024 // 64)]
    pod["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "main", "ready": True, "restartCount": 0, "image": "registry.invalid/cuda",
         "imageID": "", "started": True,
         "state": {"running": {"startedAt": "2026-11-28T00:00:00Z"}}}]}
    return pod


async def fill(kubeconfig: Path, a: argparse.Namespace) -> None:
    async with api_session(kubeconfig, limit=32, timeout=120) as api:
        gate = asyncio.Semaphore(32)

        async def call(method: str, url: str, body: Any, ctype: str = "application/json") -> None:
            async with gate, api.request(method, url, data=json.dumps(body),
                                         headers={"Content-Type": ctype}) as r:
                if r.status >= 300:
                    raise SystemExit(f"extender_start: {method} {url}: HTTP {r.status}: "
                                     f"{(await r.text())[:300]}")

        names = [f"gpu-{i:04d}" for i in range(a.nodes)]
        await asyncio.gather(*(call("POST", "/api/v1/nodes", node_body(n, GPUS)) for n in names))
        await asyncio.gather(*(call("PATCH", f"/api/v1/nodes/{n}/status", node_status(GPUS),
                                    "application/merge-patch+json") for n in names))
        await asyncio.gather(*(call("POST", "/api/v1/namespaces/default/pods",
                                    bound_pod(i, a.nodes, a.pad_kib)) for i in range(a.pods)))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


async def start_once(procs: Processes) -> dict[str, Any]:
    t0 = time.monotonic()
    procs.start_extender()
    assert procs.extender is not None
    await wait_http(f"http://127.0.0.1:{procs.extender_port}/readyz",
                    f"the extender (see {procs.work}/scheduler.log)", timeout=600, every=0.02,
                    process=procs.extender)
    out = {"ready_s": round(time.monotonic() - t0, 2),
           "cpu_s": round(cpu_seconds(procs.extender.pid), 2),
           "peak_rss_mib": peak_rss_mib(procs.extender.pid)}
    procs.stop()
    return out


async def main(a: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="extender-start-"))
    assets = find_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    if assets is not None:
        server: Any = ControlPlane(assets, work / "envtest").start()
        name = server.version
    else:
        server, name = spawn(work / "kubeapi", history=1000), "tests/kubeapi (own process)"
    try:
        t0 = time.monotonic()
        await fill(server.kubeconfig, a)
        filled = round(time.monotonic() - t0, 1)
        procs = Processes(work, server.kubeconfig, follow=False)

        async def once(src: str) -> dict[str, Any]:  # on the one cluster
            procs.env["PYTHONPATH"] = src
            return await start_once(procs)

        runs = await alternated(a.baseline, a.runs, once)
        return {"nodes": a.nodes, "pods": a.pods, "pad_kib": a.pad_kib, "filled_in_s": filled,
                "runs": runs, "api_server": name}
    finally:
        server.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=40000)
    p.add_argument("--pad-kib", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--baseline", metavar="CHECKOUT",
                   help="another checkout (a git worktree) whose extender starts alternate with "
                        "this one's on the same cluster")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = asyncio.run(main(args))
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))

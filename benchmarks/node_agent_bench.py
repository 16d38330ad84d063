"""How long does the node agent take to admit a pod? The kubelet's admission path is
GetPreferredAllocation then Allocate per GPU container, one pod at a time; each call waits for
the agent (DESIGN §4). Measured end to end over the real unix sockets: the kubelet emulator
(tests/kubelet/) admits --pods pods that the test API server holds as bound, all in flight at
once on one node with --gpus fake GPUs, in a shuffled order; then the time until every pod's
gpuslice.io/allocated mark is in the API.
Prints one JSON object: per-container admission latency p50/p99/max (ms: GetPreferredAllocation
+ Allocate as the kubelet sees them), the agent's own time per call (ms), pods, containers, and
seconds until all marks landed. The test API server runs in this process (a thread), so it
competes for the interpreter: the round trips are an upper bound.
Usage: python benchmarks/node_agent_bench.py [--pods 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the test API server and the kubelet emulator

from lightkube import AsyncClient, KubeConfig  # noqa: E402
from lightkube.resources.core_v1 import Node, Pod  # noqa: E402

from gpuslice import handoff  # noqa: E402
from gpuslice.kube.client import dict_view  # noqa: E402
from gpuslice.node.agent import Agent  # noqa: E402
from gpuslice.node.nvml import FakeBackend  # noqa: E402
from gpuslice.node.settings import load  # noqa: E402
from kubeapi.server import KubeApiServer  # noqa: E402
from kubelet.emulator import Kubelet  # noqa: E402
from kubelet.pods import NODE, container, gpu, pod  # noqa: E402


async def bench(args: argparse.Namespace, server: KubeApiServer, base: Path) -> dict:
    client = AsyncClient(config=KubeConfig.from_file(server.kubeconfig))
    await client.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node",
                                         "metadata": {"name": NODE}}))
    lib = base / "libgpuslice.so"
    lib.write_bytes(b"library")
    cfg = load(None, flags={"nodeName": NODE, "devicePluginDir": str(base / "dp"),
                            "stateDir": str(base / "state"), "splitCount": 100,
                            "podResourcesSocket": str(base / "pr.sock"),
                            "metricsAddress": "127.0.0.1:0", "inFlightTimeoutSeconds": 3600,
                            "logLevel": "warning"}, environ={})
    agent = Agent(cfg, FakeBackend.with_count(args.gpus), client, library=lib)
    inside: list[float] = []  # time spent in the agent's own code per call (no gRPC, no kubelet)
    for name in ("allocate", "preferred"):
        setattr(agent, name, _timed(getattr(agent, name), inside))
    kubelet = Kubelet(str(base / "dp"), str(base / "pr.sock"))
    await kubelet.start()
    task = asyncio.create_task(agent.run())
    rng = random.Random(7)
    now = time.time()
    pods = []
    # a mix of 1- and 2-container pods, 1 or 2 GPUs each, as the extender lets them fly
    # together on one node (handoff.blocking_flight): pods with the same first request have the
    # same shape (interchangeable), the others differ in it (distinguishable); the agent
    # refuses calls that could be for pods of two shapes (allocate.match)
    for i in range(args.pods):
        names = ["main"] if i % 3 else ["main", "side"]
        qty = {"main": 1} if i % 3 else {"main": 2, "side": 1}
        gpus = {n: rng.sample([gpu(g) for g in range(args.gpus)], qty[n]) for n in names}
        p = pod(f"p{i}", [container(n, quantity=qty[n], mem=256, cores=0) for n in names], gpus,
                at=now - args.pods + i)
        pods.append(dict(await client.create(dict_view(Pod)(p))))
    while len(kubelet.endpoints) < 3:
        await asyncio.sleep(0.05)
    await kubelet.wait_devices("nvidia.com/gpu")
    rng.shuffle(pods)  # the kubelet's order is its own
    lat = []
    for p in pods:
        for r in handoff.device_requests(p):
            t0 = time.perf_counter()
            await kubelet.allocate(r.resource, r.quantity)
            lat.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    while agent.cluster.queued:
        await asyncio.sleep(0.01)
    drained = time.perf_counter() - t0
    agent.stop()
    await task
    await kubelet.stop()
    return {"pods": len(pods), "containers": len(lat), "gpus": args.gpus,
            "admission_ms": _summary(lat), "agent_ms_per_call": _summary(inside),
            "marks_landed_s_after_last_admission": round(drained, 3)}


def _timed(call: Callable[..., Awaitable[Any]], into: list[float]) -> Callable[..., Any]:
    async def run(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await call(*args)
        finally:
            into.append((time.perf_counter() - t0) * 1000)
    return run


def _summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(q[49], 2), "p99": round(q[98], 2), "max": round(max(values), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gsb", dir="/tmp"))
    try:
        with KubeApiServer(base / "api") as server:
            print(json.dumps(asyncio.run(bench(args, server, base))))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

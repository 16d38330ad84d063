"""Time the extender's filter+prioritize over HTTP on a large cluster (DESIGN §6 target:
5,000 nodes x 8 GPUs, 40,000 placed slices, p99 <= 10 ms per filter+prioritize).

Builds the extender's state the way the service does: Node objects carrying
gpuslice.io/inventory and bound Pod objects carrying gpuslice.io/assignment go through
ExtenderState.on_node/on_pod (seeded random: models 80/48/24 GB, slices 1-24 GiB; --in-flight
of the pods are not yet allocated, so the in-flight rule runs too). Serves the real routes
(scheduler/app.py) with aiohttp on 127.0.0.1 from a forked child (the extender is its own
process) and sends what kube-scheduler sends with nodeCacheCapable: true: for each new pod (a
rotation of shapes), filter with every node name (percentageOfNodesToScore 100, the worst case;
--offer 10 sends the 10 % kube-scheduler's adaptive default looks at with 5,000 nodes), then
prioritize with the names that passed. A call is timed from sending the body to
reading the whole reply (bodies encoded beforehand; TCP_NODELAY as Go's client).
The extender keeps results per pod shape and decides again only the nodes changed since
(allocator/reuse.py): --bind places each pod on its best node between pods, untimed, as
kube-scheduler's bind would (so every filter has changed nodes to decide again); --new-shapes
names every pod's container anew, a shape never seen (nothing kept serves it: the slow path).
Prints a table, or with --json one JSON object (p50_ms, p99_ms of filter+prioritize; also
in_handler_p50_ms / _p99_ms: the part spent inside the extender's two handlers).
Usage: python benchmarks/extender_bench.py [--nodes 5000 --gpus 8 --pods 40000 --rounds 30]
       [--offer 100] [--bind] [--new-shapes] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import os
import platform
import random
import signal
import socket
import sys
import time
from typing import Any

from aiohttp import web

from allocator_bench import pct  # the same percentile as the in-process figures
from gpuslice import codec, handoff, model
from gpuslice.allocator import parse_policy
from gpuslice.scheduler.app import make_app
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.metrics import Metrics
from gpuslice.scheduler.state import ExtenderState, pod_key

MODELS = (("NVIDIA H100 80GB HBM3", 81920), ("NVIDIA L40S", 49152), ("NVIDIA A10", 24576))
SHAPES: dict[str, dict[str, Any]] = {  # container limits, pod annotations
    "small": ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048", "nvidia.com/gpucores": "10"},
              {}),
    "large-memory": ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960",
                      "nvidia.com/gpucores": "20"}, {}),
    "multi-gpu": ({"nvidia.com/gpu": "4", "nvidia.com/gpumem": "10240",
                   "nvidia.com/gpucores": "20"}, {}),
    "typed": ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"},
              {"nvidia.com/use-gputype": "H100"}),
    "exclusive": ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16384",
                   "nvidia.com/gpucores": "100"}, {}),
    "percent": ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25",
                 "nvidia.com/gpucores": "10"}, {}),
    "volcano": ({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "4096"}, {}),
}


def pod(name: str, limits: dict[str, str], annotations: dict[str, str],
        container: str = "main") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-11-24T00:00:00Z",
                         "labels": {handoff.MANAGED_LABEL: "true"},
                         "annotations": dict(annotations)},
            "spec": {"schedulerName": "gpuslice-scheduler",
                     "containers": [{"name": container, "image": "x",
                                     "resources": {"limits": limits, "requests": limits}}]},
            "status": {"phase": "Pending"}}


def build(state: ExtenderState, nodes: int, gpus: int, pods: int, in_flight: int,
          seed: int) -> None:
    rng = random.Random(seed)
    invs = []
    for n in range(nodes):
        gpu_model, mem = MODELS[n % len(MODELS)]
        inv = model.NodeInventory(node=f"node-{n:05d}", gpus=tuple(
            model.GPU(uuid=f"GPU-{n:05d}-{i}", model=gpu_model, memory_mib=mem, index=i,
                      numa_node=i * 2 // gpus) for i in range(gpus)))
        invs.append(inv)
        state.on_node("ADDED", {"metadata": {"name": inv.node, "annotations": {
            codec.INVENTORY_ANNOTATION: codec.encode_inventory(inv)}}})
    free = {(n, i): [invs[n].gpus[i].memory_mib, 100, 0] for n in range(nodes)
            for i in range(gpus)}
    now = time.time()
    placed = 0
    while placed < pods:
        n, i = rng.randrange(nodes), rng.randrange(gpus)
        f = free[n, i]
        mem = rng.choice((1024, 2048, 4096, 8192, 12288, 16384, 24576))
        cores = rng.choice((0, 0, 10, 20, 30, 50))
        if mem > f[0] or cores > f[1] or f[2] >= 10:
            continue
        f[0], f[1], f[2] = f[0] - mem, f[1] - cores, f[2] + 1
        a = model.PodAssignment(node=invs[n].node, containers=(model.ContainerAssignment(
            container="main", slices=(model.GPUSlice(uuid=invs[n].gpus[i].uuid, memory_mib=mem,
                                                     cores=cores),)),))
        p = pod(f"p{placed}", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem),
                               "nvidia.com/gpucores": str(cores)}, {
            codec.ASSIGNMENT_ANNOTATION: codec.encode_assignment(a),
            handoff.BOUND_AT: handoff.format_time(now)})
        if placed >= in_flight:
            p["metadata"]["annotations"][handoff.ALLOCATED] = "main"
        p["spec"]["nodeName"] = invs[n].node
        state.on_pod("ADDED", p)
        placed += 1


def add_bench_routes(app: web.Application, ev: Evaluator) -> None:
    """POST /bench/place {"Pod", "Node"}: hold the pod's placement there as bind does (the
    node agent taken to answer at once: no flight), without the API writes. GET /bench/spent:
    the time each /filter and /prioritize spent inside the extender's handler since the last
    ask (decoding and encoding included; HTTP parsing, the socket and the client not)."""
    spent: list[float] = []

    @web.middleware
    async def clock(request: web.Request, handler: Any) -> web.StreamResponse:
        t = time.perf_counter_ns()
        response = await handler(request)
        if request.path in ("/filter", "/prioritize"):
            spent.append((time.perf_counter_ns() - t) / 1e6)
        return response

    async def place(request: web.Request) -> web.Response:
        body = await request.json()
        pod_, node = body["Pod"], body["Node"]
        pl = ev.cached(pod_, [node]).fits.get(node)
        if pl is not None:
            ev.state.assume(pod_key(pod_), pod_["metadata"]["uid"], pl.assignment, None)
        return web.json_response({"placed": pl is not None})

    async def times(request: web.Request) -> web.Response:
        out = web.json_response(spent[:])
        spent.clear()
        return out

    app.middlewares.append(clock)
    app.router.add_post("/bench/place", place)
    app.router.add_get("/bench/spent", times)


def serve(app: web.Application) -> tuple[int, int]:
    """Serve `app` from a forked child (its own interpreter, as the real extender is its own
    process); returns (port, child pid)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the extender
        os.close(read_fd)

        async def run() -> None:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            os.write(write_fd, str(port).encode())
            os.close(write_fd)
            await asyncio.Event().wait()

        try:
            asyncio.run(run())
        finally:
            os._exit(0)
    os.close(write_fd)
    port = int(os.read(read_fd, 16))
    os.close(read_fd)
    return port, pid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--pods", type=int, default=40000, help="placed slices (bound pods)")
    ap.add_argument("--in-flight", type=int, default=200,
                    help="of those, pods not yet allocated by the node agent")
    ap.add_argument("--rounds", type=int, default=30, help="rounds over all pod shapes")
    ap.add_argument("--policy", default="binpack")
    ap.add_argument("--offer", type=int, default=100, metavar="PERCENT",
                    help="nodes offered per filter call (kube-scheduler's "
                         "percentageOfNodesToScore; its adaptive default at 5,000 nodes is 10)")
    ap.add_argument("--bind", action="store_true",
                    help="place each pod on its best node before the next (untimed)")
    ap.add_argument("--new-shapes", action="store_true",
                    help="every pod a shape not seen before (its own container name)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    state = ExtenderState(timeout_s=3600)
    t0 = time.perf_counter()
    build(state, a.nodes, a.gpus, a.pods, a.in_flight, a.seed)
    build_s = time.perf_counter() - t0
    gc.collect()
    gc.freeze()  # what the long-running extender does after its first list
    metrics = Metrics(state)
    ev = Evaluator(state, parse_policy(a.policy))
    app = make_app(ev, None, metrics, ready=lambda: None,  # type: ignore[arg-type]
                   is_leader=lambda: True)
    add_bench_routes(app, ev)
    port, child = serve(app)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net/http does
    names = state.cluster.nodes()
    offered = max(1, len(names) * a.offer // 100)

    def call(verb: str, body: bytes) -> tuple[float, Any]:
        t = time.perf_counter_ns()
        conn.request("POST", f"/{verb}", body, {"Content-Type": "application/json"})
        raw = conn.getresponse().read()
        return (time.perf_counter_ns() - t) / 1e6, raw

    times: dict[str, list[float]] = {k: [] for k in SHAPES}
    fits: dict[str, int] = {}
    placed = 0
    serial = 0
    for r in range(a.rounds + 1):  # round 0 warms up (first filter builds the node table)
        for shape, (limits, ann) in SHAPES.items():
            serial += 1
            p = pod(f"new-{serial}", limits, ann,
                    container=f"c{serial}" if a.new_shapes else "main")
            start = serial * offered % len(names)  # kube-scheduler rotates where it starts
            offer = (names[start:] + names[:start])[:offered]
            f_ms, raw = call("filter", json.dumps({"Pod": p, "Nodes": None,
                                                   "NodeNames": offer}).encode())
            passed = json.loads(raw)["NodeNames"]
            p_ms, raw = call("prioritize", json.dumps({"Pod": p, "Nodes": None,
                                                       "NodeNames": passed}).encode())
            scores = json.loads(raw)
            assert len(scores) == len(passed)
            if a.bind and scores:
                best = max(scores, key=lambda h: h["Score"])["Host"]
                _, raw = call("bench/place", json.dumps({"Pod": p, "Node": best}).encode())
                placed += json.loads(raw)["placed"]
            if r:
                times[shape].append(f_ms + p_ms)
                fits[shape] = len(passed)
    conn.request("GET", "/bench/spent")
    spent = json.loads(conn.getresponse().read())[2 * len(SHAPES):]  # after the warm-up round
    inside = [f + p for f, p in zip(spent[::2], spent[1::2], strict=True)]
    os.kill(child, signal.SIGTERM)
    os.waitpid(child, 0)
    every = [t for v in times.values() for t in v]
    out = {
        "nodes": a.nodes, "gpus": a.gpus, "pods": a.pods, "in_flight": a.in_flight,
        "rounds": a.rounds, "calls": len(every), "policy": a.policy, "offered_nodes": offered,
        "bind": a.bind, "placed": placed, "new_shapes": a.new_shapes,
        "p50_ms": round(pct(every, 0.5), 3), "p99_ms": round(pct(every, 0.99), 3),
        "max_ms": round(max(every), 3), "build_s": round(build_s, 1),
        "in_handler_p50_ms": round(pct(inside, 0.5), 3),
        "in_handler_p99_ms": round(pct(inside, 0.99), 3),
        "transport": "HTTP/1.1 keep-alive on 127.0.0.1, bodies pre-encoded",
        "python": platform.python_version(), "machine": platform.machine(),
        "shapes": {k: {"p50_ms": round(pct(v, 0.5), 3), "p99_ms": round(pct(v, 0.99), 3),
                       "fitting_nodes": fits[k]} for k, v in times.items()},
    }
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"{a.nodes} nodes x {a.gpus} GPUs, {a.pods} placed pods ({a.in_flight} in flight), "
          f"policy {a.policy}, {a.rounds} rounds, state built in {build_s:.1f} s")
    print(f"{'pod shape':<14} {'fit nodes':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for k, v in out["shapes"].items():
        print(f"{k:<14} {v['fitting_nodes']:>9} {v['p50_ms']:>8.2f} {v['p99_ms']:>8.2f}")
    print(f"{'all shapes':<14} {'':>9} {out['p50_ms']:>8.2f} {out['p99_ms']:>8.2f}")
    print(f"{'in the handlers':<14} {'':>9} {out['in_handler_p50_ms']:>8.2f} "
          f"{out['in_handler_p99_ms']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

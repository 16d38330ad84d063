"""How much of a CPU the in-process API server spends per pod, which bounds what
benchmarks/e2e_bench.py can reach with it: the server runs in its own process (spawn());
N pods go through the requests a pod meets in the end-to-end flow (create, get, two merge
patches, binding, one event) over HTTPS, 16 at a time, while W watchers stream every pod.
Prints pods/s (wall) and the server's CPU per pod and per request, read from /proc.
Usage: cd tests && python -m kubeapi.bench [--pods 1000] [--watchers 3] [--json]"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import tempfile
import time
from pathlib import Path

import aiohttp

from .raw import pod_body
from .server import spawn

REQUESTS_PER_POD = 6


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_pod(http: aiohttp.ClientSession, url: str, i: int) -> None:
    name = f"p{i}"
    pods = f"{url}/api/v1/namespaces/default/pods"
    calls = [("POST", pods, pod_body(name), "application/json"),
             ("GET", f"{pods}/{name}", None, ""),
             *[("PATCH", f"{pods}/{name}", {"metadata": {"annotations": {k: "x" * 200}}},
                "application/merge-patch+json") for k in ("a", "b")],
             ("POST", f"{pods}/{name}/binding", {"metadata": {"name": name},
                                                 "target": {"kind": "Node", "name": "n"}},
              "application/json"),
             ("POST", f"{url}/api/v1/namespaces/default/events",
              {"metadata": {"generateName": f"{name}."}, "involvedObject": {"name": name},
               "reason": "Scheduled", "message": "bench"}, "application/json")]
    for method, path, body, content_type in calls:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content_type else {}
        async with http.request(method, path, data=data, headers=headers) as reply:
            if reply.status >= 300:
                raise RuntimeError(f"{method} {path}: {reply.status} {await reply.text()}")


async def run(pods: int, watchers: int) -> dict[str, float]:
    server = spawn(Path(tempfile.mkdtemp(prefix="kubeapi-bench-")), history=1_000_000)
    tls = ssl.create_default_context(cafile=str(server.kubeconfig.parent / "pki" / "ca.crt"))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, ssl=tls)) \
                as http:
            seen = [0] * watchers

            async def watch(i: int) -> None:
                async with http.get(f"{server.url}/api/v1/pods", params={
                        "watch": "true", "resourceVersion": "1"},
                        timeout=aiohttp.ClientTimeout(total=None)) as reply:
                    async for _ in reply.content:
                        seen[i] += 1

            tasks = [asyncio.create_task(watch(i)) for i in range(watchers)]
            await asyncio.sleep(0.3)
            cpu0, start = cpu_seconds(server.process.pid), time.perf_counter()
            gate = asyncio.Semaphore(16)

            async def gated(i: int) -> None:
                async with gate:
                    await one_pod(http, server.url, i)

            await asyncio.gather(*(gated(i) for i in range(pods)))
            while watchers and min(seen) < 4 * pods:  # ADDED, 2 MODIFIED, bound
                await asyncio.sleep(0.02)
            wall = time.perf_counter() - start
            cpu = cpu_seconds(server.process.pid) - cpu0
            for task in tasks:
                task.cancel()
    finally:
        server.stop()
    return {"pods": pods, "watchers": watchers, "pods_per_s": round(pods / wall, 1),
            "server_cpu_ms_per_pod": round(1000 * cpu / pods, 3),
            "server_cpu_us_per_request": round(1e6 * cpu / (REQUESTS_PER_POD * pods), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m kubeapi.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--watchers", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    result = asyncio.run(run(args.pods, args.watchers))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['pods']} pods x {REQUESTS_PER_POD} requests, {result['watchers']} "
              f"watchers: {result['pods_per_s']} pods/s, server CPU "
              f"{result['server_cpu_ms_per_pod']} ms/pod "
              f"({result['server_cpu_us_per_request']} us/request incl. watch fan-out)")


if __name__ == "__main__":
    main()

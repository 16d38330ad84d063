"""The webhook's own CPU per admission, alone: `gpuslice webhook` (HTTPS, logging at info, as
installed) answers --reviews AdmissionReviews of a HAMi GPU pod (the golden one kube-apiserver
sent, shared/wire-samples/, given a slice request) over --connections keep-alive TLS
connections, as kube-apiserver calls it, and its process's CPU is read before and after. No
API server: the cost of the call itself, which the end-to-end runs (e2e_bench.py) can only show
mixed with kube-apiserver's.
Usage: python benchmarks/webhook_load.py [--reviews 3000 --runs 3 --json]
       [--baseline ../other-checkout]  (its runs alternate with this checkout's)
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import ssl
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_bench import Processes, alternated, wait_http
from kubeapi.bench import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "wire-samples" / "admissionreview-pod-create.request.json"
LIMITS = {"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "10"}  # e2e_bench's first shape


def reviews(n: int) -> list[bytes]:
    """n AdmissionReviews of the golden pod, each with its own uid and name."""
    review = json.loads(SAMPLE.read_text())
    review["request"]["object"]["spec"]["containers"][0]["resources"] = {"limits": LIMITS}
    out = []
    for i in range(n):
        r = copy.deepcopy(review)
        r["request"]["uid"] = f"00000000-0000-0000-0000-{i:012d}"
        r["request"]["object"]["metadata"]["name"] = r["request"]["name"] = f"job-{i:05d}"
        out.append(json.dumps(r).encode())
    return out


async def run_once(procs: Processes, bodies: list[bytes], connections: int) -> dict[str, Any]:
    url, ca = procs.start_webhook()  # as e2e_bench runs it (no API server: no kubeconfig read)
    assert procs.webhook is not None
    try:
        await wait_http(f"{url}/healthz", f"the webhook (see {procs.work}/webhook.log)",
                        ssl=False, process=procs.webhook)
        tls = ssl.create_default_context(cadata=ca.decode())
        connector = aiohttp.TCPConnector(limit=connections, ssl=tls)
        async with aiohttp.ClientSession(connector=connector) as http:
            gate = asyncio.Semaphore(connections)

            async def call(body: bytes) -> None:
                async with gate, http.post(f"{url}/mutate", data=body, headers={
                        "Content-Type": "application/json"}) as r:
                    reply = await r.json()
                    if r.status != 200 or not reply["response"].get("patch"):
                        raise SystemExit(f"webhook_load: HTTP {r.status}: {reply}")

            await asyncio.gather(*(call(b) for b in bodies[:200]))  # connections, caches
            c0 = cpu_seconds(procs.webhook.pid)
            await asyncio.gather(*(call(b) for b in bodies))
            used = cpu_seconds(procs.webhook.pid) - c0
        return {"cpu_us_per_review": round(used * 1e6 / len(bodies))}
    finally:
        procs.stop()


async def main(a: argparse.Namespace) -> dict[str, Any]:
    bodies = reviews(a.reviews)
    work = Path(tempfile.mkdtemp(prefix="webhook-load-"))
    procs = Processes(work, work / "kubeconfig-unused")  # one bytecode cache for every run

    async def once(src: str) -> dict[str, Any]:
        procs.env["PYTHONPATH"] = src
        return await run_once(procs, bodies, a.connections)

    runs = await alternated(a.baseline, a.runs, once)
    codes = dict.fromkeys(r["code"] for r in runs)
    medians = {code: statistics.median(r["cpu_us_per_review"] for r in runs
                                       if r["code"] == code) for code in codes}
    return {"reviews": a.reviews, "connections": a.connections, "runs": runs,
            "median_cpu_us_per_review": medians}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reviews", type=int, default=3000)
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--baseline", metavar="CHECKOUT",
                   help="another checkout (a git worktree) whose runs alternate with this one's")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = asyncio.run(main(args))
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))

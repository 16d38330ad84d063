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
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_bench import CLI, free_port, make_pki, wait_http
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


async def run_once(src: str, bodies: list[bytes], connections: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="webhook-load-"))
    pki = make_pki()
    files = pki.write(work / "pki")
    port = free_port()
    (work / "webhook.yaml").write_text(yaml.safe_dump({
        "address": "127.0.0.1", "port": port, "certFile": str(files["serving.crt"]),
        "keyFile": str(files["serving.key"]), "checkNamespaceLabels": False,
        "logLevel": "info"}))
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "PYTHONPATH": src, "PYTHONPYCACHEPREFIX": str(ROOT / ".cache" / "bench-pycache")}
    proc = subprocess.Popen([*CLI, "webhook", "--config", str(work / "webhook.yaml")], env=env,
                            stderr=open(work / "webhook.log", "wb"))  # noqa: SIM115
    try:
        url = f"https://127.0.0.1:{port}"
        await wait_http(f"{url}/healthz", f"the webhook (see {work}/webhook.log)", ssl=False,
                        process=proc)
        tls = ssl.create_default_context(cadata=pki.ca_cert.decode())
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
            c0 = cpu_seconds(proc.pid)
            await asyncio.gather(*(call(b) for b in bodies))
            used = cpu_seconds(proc.pid) - c0
        return {"cpu_us_per_review": round(used * 1e6 / len(bodies))}
    finally:
        proc.terminate()
        proc.wait(10)


async def main(a: argparse.Namespace) -> dict[str, Any]:
    bodies = reviews(a.reviews)
    codes = {"this checkout": str(ROOT / "src")}
    if a.baseline:
        codes["baseline"] = str(Path(a.baseline).resolve() / "src")
    runs = []
    for i in range(a.runs + 1):
        for code, src in codes.items():  # alternated, so a busier minute hits both
            result = await run_once(src, bodies, a.connections)
            if i:  # the first run of each writes its bytecode, as pip does: not counted
                runs.append({"code": code, **result})
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

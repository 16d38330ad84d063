"""What the chart's admission objects cost kube-apiserver for a pod WITHOUT a GPU: CPU per
dry-run create (admission runs in full, nothing is stored), with none of them, with the
MutatingWebhookConfiguration alone (its matchConditions keep such a pod from the webhook; its
URL points nowhere, so a pod that reached it would fail), with the ValidatingAdmissionPolicies
alone, and with both, alternated in rounds on one real control plane (etcd + kube-apiserver of
KUBEBUILDER_ASSETS). The objects are the chart's default render (tests/deploy/test_chart.py,
helm). Prints one JSON object: ms of kube-apiserver CPU per create, per set, per round.
Usage: python3 benchmarks/admission_tax.py [--pods 3000] [--rounds 2] [--profile FILE]
  --profile: kube-apiserver's CPU profile (pprof) of the last round with the policies
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the control plane
sys.path.insert(0, str(ROOT / "tests" / "deploy"))  # the chart's render

from test_chart import render  # noqa: E402

from kubeapi.bench import cpu_seconds  # noqa: E402
from kubeapi.envtest import ControlPlane, find_assets  # noqa: E402
from kubeapi.fixtures import KubeApi  # noqa: E402

# An ordinary pod of a cluster: two containers, requests and limits, env, a label.
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"generateName": "web-", "namespace": "default", "labels": {"app": "web"}},
       "spec": {"containers": [
           {"name": "app", "image": "registry.invalid/app:1",
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                          "limits": {"memory": "64Mi"}},
            "env": [{"name": "MODE", "value": "serve"}, {"name": "PORT", "value": "8080"}]},
           {"name": "sidecar", "image": "registry.invalid/sidecar:1"}]}}
PLURAL = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
          "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
          "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}


def chart_sets() -> dict[str, list[dict[str, Any]]]:
    objs = [o for o in copy.deepcopy(render("default")) if o["kind"] in PLURAL]
    for o in objs:
        if o["kind"] == "MutatingWebhookConfiguration":
            o["webhooks"][0]["clientConfig"] = {"url": "https://127.0.0.1:1/mutate"}
    hook = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    policies = [o for o in objs if o["kind"] != "MutatingWebhookConfiguration"]
    return {"none": [], "webhook configuration": hook, "policies": policies, "both": objs}


async def measure(a: argparse.Namespace) -> dict[str, list[float]]:
    assets = find_assets(os.environ.get("KUBEBUILDER_ASSETS"))
    if assets is None:
        raise SystemExit("admission_tax: set KUBEBUILDER_ASSETS (docs/development.md)")
    assets = dataclasses.replace(assets, kube_controller_manager=None, kube_scheduler=None)
    plane = ControlPlane(assets, Path(tempfile.mkdtemp(prefix="admission-tax-"))).start()
    try:
        pid = next(p.popen.pid for p in plane.processes if p.name == "kube-apiserver")
        api = KubeApi(plane.version, plane.url, plane.kubeconfig, control_plane=plane)
        sets, out = chart_sets(), {}
        async with api.http() as http:
            async def call(method: str, path: str, body: Any = None, **params: str) -> Any:
                r = await http.request(method, path, params=params or None,
                                       content=None if body is None else json.dumps(body),
                                       headers={"Content-Type": "application/json"})
                assert r.status_code in (200, 201), (path, r.status_code, r.text[:500])
                return r

            async def burst(n: int) -> None:
                gate = asyncio.Semaphore(16)

                async def one() -> None:
                    async with gate:
                        await call("POST", "/api/v1/namespaces/default/pods", POD, dryRun="All")
                await asyncio.gather(*(one() for _ in range(n)))

            for rnd in range(a.rounds):
                for name, objs in sets.items():
                    paths = []
                    for o in objs:
                        base = f"/apis/{o['apiVersion']}/{PLURAL[o['kind']]}"
                        await call("POST", base, o)
                        paths.append(f"{base}/{o['metadata']['name']}")
                    await asyncio.sleep(3)  # kube-apiserver loads them within about a second
                    await burst(a.pods // 10)  # warm
                    profile = None
                    if a.profile and name == "policies" and rnd == a.rounds - 1:
                        profile = asyncio.create_task(http.get(
                            "/debug/pprof/profile", params={"seconds": "5"}, timeout=60))
                        await asyncio.sleep(0.2)
                    before = cpu_seconds(pid)
                    await burst(a.pods)
                    out.setdefault(name, []).append(
                        round((cpu_seconds(pid) - before) / a.pods * 1000, 3))
                    if profile is not None:
                        a.profile.write_bytes((await profile).content)
                    for path in paths:
                        await call("DELETE", path)
                    await asyncio.sleep(3)
        return {"kube_apiserver": plane.version, "cpu_count": os.cpu_count(),
                "pods_per_round": a.pods, "ms_per_create": out}  # type: ignore[dict-item]
    finally:
        plane.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", type=Path)
    print(json.dumps(asyncio.run(measure(ap.parse_args()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

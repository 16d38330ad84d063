"""The worked demo of docs/demo.md: example pods through the whole cluster side, no GPU cluster.
Owns: `DemoCluster` (on the test's API server, either backend, each started as the real code:
the webhook over HTTPS behind a MutatingWebhookConfiguration, the extender, the kube-scheduler
driver configured from deploy/scheduler/kube-scheduler-config.yaml, and a node agent with 2 fake
GPUs registered with the kubelet emulator), `Trip` (what a user can check of one pod at each
step) and `render` (the page's blocks, with host paths, UIDs and times made stable).
Does not: re-implement a server; it wires tests/kubeapi, tests/kubelet and the services.
The webhook's reply is recorded by a TLS tap between the API server and the webhook, so the
page shows the patch that was really applied.
Tests: tests/integration/test_demo_pods_end_to_end.py; by hand: python examples/demo.py"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # kubeapi and kubelet, when run as a script

from gpuslice import codec, handoff  # noqa: E402
from gpuslice.kube.client import dict_view  # noqa: E402
from gpuslice.scheduler.config import LeaderElection, SchedulerConfig  # noqa: E402
from gpuslice.scheduler.service import Extender  # noqa: E402
from gpuslice.webhook.certgen import certgen  # noqa: E402
from gpuslice.webhook.command import Server  # noqa: E402
from gpuslice.webhook.config import WebhookConfig  # noqa: E402
from kubeapi.raw import node_body  # noqa: E402
from kubeapi.scheduler_driver import DriverConfig, SchedulerDriver  # noqa: E402
from kubelet.emulator import mounts_of  # noqa: E402
from kubelet.nodeharness import Node, running_node, wait_for  # noqa: E402
from kubelet.pods import NODE  # noqa: E402

EXAMPLES = ROOT / "examples" / "pods"
# the order of the page; each pod is placed next to those before it (binpack)
PODS = ("hami.yaml", "hami-multi-gpu.yaml", "hami-two-containers.yaml", "volcano.yaml",
        "gpu-manager.yaml")
WEBHOOK = "gpuslice-webhook"  # the Service (certificate names); the configuration is "gpuslice"
SPLIT_COUNT = 10  # slices per GPU: room for every example pod at once


@dataclass
class Trip:
    """One pod's way through the cluster, as a user would look at it."""

    file: str
    kubectl: str  # what `kubectl create -f FILE` printed (warnings included)
    patch: list[dict[str, Any]] = field(default_factory=list)  # the webhook's JSON Patch
    pod: dict[str, Any] = field(default_factory=dict)  # as stored once allocated
    allocate: dict[str, Any] = field(default_factory=dict)  # container -> Allocate answer


class _Tap:
    """HTTPS in front of the webhook that records each AdmissionReview reply it passes on."""

    def __init__(self, certs: Path, target: str) -> None:
        self.target, self.replies = target, []
        self.server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server_tls.load_cert_chain(certs / "tls.crt", certs / "tls.key")
        self.client_tls = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        self.runner: web.AppRunner | None = None

    async def start(self) -> int:
        app = web.Application()
        app.router.add_post("/mutate", self._forward)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.server_tls)
        await site.start()
        return int(self.runner.addresses[0][1])

    async def _forward(self, request: web.Request) -> web.Response:
        async with aiohttp.ClientSession() as http, http.post(
                self.target, data=await request.read(), ssl=self.client_tls,
                headers={"Content-Type": "application/json"}) as reply:
            body = await reply.json()
        self.replies.append(body)
        return web.json_response(body, status=reply.status)


class DemoCluster:
    """`async with DemoCluster(kube_api) as cluster: trip = await cluster.trip(path)`."""

    def __init__(self, kube_api: Any, *, bypass_namespaces: tuple[str, ...] = ()) -> None:
        self.kube_api = kube_api
        self.bypass_namespaces = bypass_namespaces  # the webhook's bypassNamespaces
        self.client = kube_api.async_client()
        self._stack = contextlib.AsyncExitStack()
        self.node: Node | None = None

    async def __aenter__(self) -> DemoCluster:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def _start(self) -> None:
        stack = self._stack
        stack.push_async_callback(self.client.close)
        self.node = await stack.enter_async_context(running_node(self.kube_api,
                                                                 splitCount=SPLIT_COUNT))
        await self._kubelet_reports_capacity()
        await self._start_webhook(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        client = self.kube_api.async_client()
        stack.push_async_callback(client.close)
        extender = Extender(SchedulerConfig(leader_election=LeaderElection(enabled=False)),
                            client)
        port = await extender.start()
        stack.push_async_callback(extender.stop)
        await wait_for(lambda: extender.starting() is None, "the extender's caches to sync")
        await wait_for(lambda: extender.state.has_inventory(NODE),
                       "the extender to see the node's inventory")
        entry = _extender_entry(f"http://127.0.0.1:{port}")
        self.driver = await stack.enter_async_context(SchedulerDriver(
            self.kube_api.kubeconfig, DriverConfig.from_extender(entry, seed=1)))

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _kubelet_reports_capacity(self) -> None:
        """What the kubelet does once plugins register: device counts into the node status."""
        from lightkube.resources.core_v1 import NodeStatus
        from lightkube.types import PatchType

        assert self.node is not None
        counts = {r: str(len(await self.node.kubelet.wait_devices(r)))
                  for r in self.node.agent.cfg.resources}
        await self.client.patch(NodeStatus, NODE, {"status": node_body(NODE, None, counts)[
            "status"]}, patch_type=PatchType.MERGE)

    async def _start_webhook(self, certs: Path) -> None:
        from lightkube import ApiError
        from lightkube.generic_resource import create_global_resource

        await certgen(service=WEBHOOK, namespace="gpuslice-system", ips=["127.0.0.1"],
                      out_dir=str(certs))
        server = Server(WebhookConfig(address="127.0.0.1", port=0,
                                      cert_file=str(certs / "tls.crt"),
                                      key_file=str(certs / "tls.key"),
                                      bypass_namespaces=list(self.bypass_namespaces)),
                        client=self.kube_api.async_client())
        await server.start()
        self._stack.push_async_callback(server.stop)
        self.tap = _Tap(certs, f"https://127.0.0.1:{server.port}/mutate")
        tap_port = await self.tap.start()
        assert self.tap.runner is not None
        self._stack.push_async_callback(self.tap.runner.cleanup)
        # the chart's webhook configuration, pointed at this process instead of its Service
        config = _chart_webhook_configuration(f"https://127.0.0.1:{tap_port}/mutate")
        mwc = create_global_resource("admissionregistration.k8s.io", "v1",
                                     "MutatingWebhookConfiguration",
                                     "mutatingwebhookconfigurations")
        await self.client.create(mwc.from_dict(config))
        await certgen(service=WEBHOOK, namespace="gpuslice-system", ips=["127.0.0.1"],
                      out_dir=str(certs), webhook_config="gpuslice", client=self.client)

        async def called() -> bool:  # a real kube-apiserver picks the configuration up in ~1 s
            from lightkube.resources.core_v1 import Pod

            probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
                     "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                              "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
            try:
                got = await self.client.create(dict_view(Pod)(probe), namespace="default",
                                               dry_run=True)
            except ApiError as e:  # it may still use the configuration without the caBundle
                if "failed calling webhook" not in (e.status.message or ""):  # certgen wrote
                    raise
                return False
            return (got["metadata"].get("labels") or {}).get(handoff.MANAGED_LABEL) == "true"

        await wait_for(called, "kube-apiserver to call the webhook")

    async def create(self, path: Path, *, check: bool = True) -> str:
        """`kubectl create -f path`, as a user runs it; what kubectl printed (`check`: it
        must succeed)."""
        # in a thread: the webhook kube-apiserver calls meanwhile runs on this event loop
        done = await asyncio.to_thread(self.kube_api.kubectl, "create", "-f", str(path),
                                       check=False)
        out = (done.stderr + done.stdout).strip()
        assert done.returncode == 0 or not check, out
        return out

    async def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        from lightkube.resources.core_v1 import Pod

        return dict(await self.client.get(dict_view(Pod), name, namespace=namespace))

    async def trip(self, path: Path) -> Trip:
        """Create the pod, wait for the scheduler to bind it, let the kubelet admit it."""
        assert self.node is not None
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        seen = len(self.tap.replies)
        trip = Trip(file=str(path.relative_to(ROOT)), kubectl=await self.create(path))
        for reply in self.tap.replies[seen:]:
            if reply["response"].get("patch"):
                trip.patch = json.loads(base64.b64decode(reply["response"]["patch"]))

        async def bound() -> bool:
            pod = await self.pod(name)
            return bool(pod["spec"].get("nodeName")) and codec.ASSIGNMENT_ANNOTATION in (
                pod["metadata"].get("annotations") or {})

        try:
            await wait_for(bound, f"pod {name} bound with an assignment")
        except AssertionError as exc:  # say why, as `kubectl describe pod` would
            why = [m for key, m in self.driver.stats.failures if key.endswith("/" + name)]
            raise AssertionError(f"{exc}; the scheduler said: {why[-1:]}") from None
        replies = await self.node.kubelet.admit(await self.pod(name))
        trip.allocate = dict(replies)
        want = ",".join(r.container for r in handoff.device_requests(await self.pod(name)))

        async def allocated() -> bool:
            ann = (await self.pod(name))["metadata"].get("annotations") or {}
            return ann.get(handoff.ALLOCATED) == want

        await wait_for(allocated, f"pod {name} marked allocated={want}")
        trip.pod = await self.pod(name)
        return trip


def _extender_entry(url: str) -> dict[str, Any]:
    """The extenders[] entry of the shipped KubeSchedulerConfiguration, at `url`."""
    config = yaml.safe_load((ROOT / "deploy" / "scheduler" / "kube-scheduler-config.yaml")
                            .read_text())
    return {**config["extenders"][0], "urlPrefix": url}


def _chart_webhook_configuration(url: str) -> dict[str, Any]:
    """The webhook configuration the chart installs (default values), with a URL client."""
    hook = {"name": "pods.gpuslice.io", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded", "clientConfig": {"url": url},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [
                {"key": "gpuslice.io/webhook", "operator": "NotIn", "values": ["disabled"]},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": ["kube-system", "gpuslice-system"]}]},
            "objectSelector": {"matchExpressions": [
                {"key": "gpuslice.io/webhook", "operator": "NotIn", "values": ["disabled"]}]}}
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "metadata": {"name": "gpuslice"},
            "webhooks": [hook]}


@contextlib.asynccontextmanager
async def demo(kube_api: Any) -> AsyncIterator[tuple[DemoCluster, list[Trip]]]:
    """Every example pod of PODS, one after the other, on one cluster."""
    async with DemoCluster(kube_api) as cluster:
        yield cluster, [await cluster.trip(EXAMPLES / name) for name in PODS]


# ---- the page's blocks ---------------------------------------------------------------------

def stable(text: str, trip: Trip, state_dir: str) -> str:
    """Host paths, the pod's UID and the bind time as a reader's cluster would show them."""
    text = text.replace(state_dir, "/var/lib/gpuslice")
    text = text.replace(trip.pod["metadata"]["uid"], "<pod-uid>")
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", "<bind time>", text)


def render(trips: list[Trip], state_dir: str) -> dict[str, str]:
    """Block name (`<file> <step>`) -> the text docs/demo.md shows for it."""
    blocks = {}
    for t in trips:
        ann = t.pod["metadata"].get("annotations") or {}
        assignment = json.dumps(json.loads(ann[codec.ASSIGNMENT_ANNOTATION]), indent=2)
        lines = []
        for container, reply in t.allocate.items():
            lines.append(f"container {container}:")
            lines += [f"  env {k}={v}" for k, v in sorted(reply.envs.items())]
            lines += [f"  mount {host} -> {path}{' (ro)' if ro else ''}"
                      for path, host, ro in mounts_of(reply)]
            lines += [f"  device {d.host_path}" for d in reply.devices]
        lines.append(f"{handoff.ALLOCATED}: {ann[handoff.ALLOCATED]}")
        steps = {
            "kubectl": f"$ kubectl create -f {t.file}\n{t.kubectl}",
            "webhook": "\n".join(json.dumps(op) for op in t.patch),
            "extender": f"spec.nodeName: {t.pod['spec']['nodeName']}\n"
                        f"{handoff.BOUND_AT}: {ann[handoff.BOUND_AT]}\n"
                        f"{codec.ASSIGNMENT_ANNOTATION}: {assignment}",
            "node-agent": "\n".join(lines)}
        blocks.update({f"{t.file} {step}": stable(text, t, state_dir)
                       for step, text in steps.items()})
    return blocks

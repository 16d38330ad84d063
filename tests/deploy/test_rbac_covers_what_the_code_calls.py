"""The chart's RBAC grants exactly what the code calls: each service runs its real code through
its usual flows against the in-process API server with a client whose bearer token names it;
every request it made must be allowed by the rules the rendered chart (default values) gives
its ServiceAccount, and every (resource, verb) those rules grant must have been used, or be
listed below with the reason it is needed outside these flows.
Only the chart's own Roles and ClusterRoles count as a service's grant: the extender's
ServiceAccount is also bound to system:kube-scheduler, system:volume-scheduler and
extension-apiserver-authentication-reader, for the kube-scheduler in its pod; the extender's
code must not lean on them, so it is held to the chart's own roles alone.
Test infrastructure (the test's admin client, the kubelet emulator) sends no token: ignored."""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import User
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Node, Pod, Secret
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice
from rbac import Access, Rule, access, rules_for
from test_chart import config_file, find, render

from gpuslice import codec, handoff
from gpuslice.dra import DRIVER
from gpuslice.kube.client import FIELD_MANAGER, dict_view
from gpuslice.node import settings as node_settings
from gpuslice.node.agent import Agent
from gpuslice.node.nvml import FakeBackend
from gpuslice.scheduler import config as scheduler_config
from gpuslice.scheduler.service import Extender
from gpuslice.webhook import config as webhook_config
from gpuslice.webhook.certgen import certgen, write_dir
from gpuslice.webhook.certs import ensure
from gpuslice.webhook.command import Server
from kubeapi.dra_allocator import StandInAllocator
from kubelet.dra import DraKubelet
from kubelet.emulator import Kubelet, short_dir
from kubelet.nodeharness import agent_paths, started_agent, wait_for
from kubelet.pods import NODE, container, gpu, pod

sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "scheduler"))
from sched_helpers import create, node_obj, pod_obj

NS = "gpuslice-system"  # the release namespace test_chart renders into
SAMPLE = (Path(__file__).parents[1] / "unit" / "webhook" / "samples" /
          "admissionreview-pod-create.request.json").read_bytes()

# (group, resource, verb) granted for callers other than the service's own code
NEEDED_ELSEWHERE = {
    "extender": {
        ("coordination.k8s.io", "leases", "create"): "kube-scheduler in the extender's pod "
        "creates its Lease (named after the release, so system:kube-scheduler does not cover it)",
        ("coordination.k8s.io", "leases", "update"): "kube-scheduler renews its Lease; the "
        "extender only reads it (leaderElection.follow)",
    },
    "node-agent": {
        ("", "events", "patch"): "kube.events turns a repeat (same object, reason and message "
        "within 10 minutes) into a patch of the first Event; the agent reports each violation, "
        "mismatch and swap once, so only a rare repeat (the same two pods swapped again) does",
    },
}
NEEDED_ELSEWHERE_WITH_DRA = {  # the same, for the chart rendered with dra.enabled
    "node-agent": {
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"): "kube-apiserver "
        ">= 1.36 authorizes each write of a claim's status.devices on this synthetic "
        "subresource as well (the patch the DRA plugin sends); the test API server does not",
    },
}
OUTSIDE_ROLES = {  # bound roles the chart does not define (for kube-scheduler)
    "extender": {"system:kube-scheduler", "system:volume-scheduler",
                 "extension-apiserver-authentication-reader"},
}


# ---- the check -----------------------------------------------------------------------------

def service_account(objs: list[dict[str, Any]], kind: str, suffix: str) -> str:
    """The ServiceAccount the chart's workload runs as."""
    return find(objs, kind, suffix)["spec"]["template"]["spec"]["serviceAccountName"]


def uncovered(used: list[Access], rules: list[Rule],
              elsewhere: dict[tuple[str, str, str], str]) -> tuple[list[str], list[str]]:
    """(requests no rule allows, grants no request used and no reason excuses)."""
    denied = sorted({str(a) for a in used if not any(r.allows(a) for r in rules)})
    unused = [f"{verb} {resource}{'.' + group if group else ''} from {rule}"
              for rule in rules for group, resource, verb in rule.grants()
              if (group, resource, verb) not in elsewhere and not any(
                  rule.allows(a) and (a.group, a.resource, a.verb) == (group, resource, verb)
                  for a in used)]
    return denied, unused


def check(kube_api: Any, component: str, account: str, case: str = "default",
          group: str | None = None) -> None:
    """`group`: judge only the rules and requests of that API group (a flow of one feature)."""
    rules, outside = rules_for(render(case), account, NS)
    if group is not None:
        rules = [r for r in rules if group in r.groups]
    assert outside == OUTSIDE_ROLES.get(component, set()), (
        f"{component}: roles bound from outside the chart changed: {sorted(outside)}")
    mine = [r for r in kube_api.server.requests
            if r.authorization == f"Bearer {token(component)}"]
    other = [f"{r.method} {r.path}" for r in mine if access(r.method, r.path, r.query) is None]
    assert not other, f"{component}: non-resource requests, which the chart grants none: {other}"
    used = [a for r in mine if (a := access(r.method, r.path, r.query)) is not None
            and group in (None, a.group)]
    assert used, f"{component}: no request carried its token; is its client the one built here?"
    needed = {**NEEDED_ELSEWHERE.get(component, {}),
              **(NEEDED_ELSEWHERE_WITH_DRA.get(component, {}) if case == "DRA" else {})}
    elsewhere = {k: v for k, v in needed.items() if group in (None, k[0])}
    lost = [f"{verb} {resource}: {why}" for (group, resource, verb), why in elsewhere.items()
            if not any((group, resource, verb) in set(r.grants()) for r in rules)]
    assert not lost, f"{component}: the chart no longer grants what is needed elsewhere: {lost}"
    denied, unused = uncovered(used, rules, elsewhere)
    assert not denied, (
        f"{component} (ServiceAccount {NS}/{account}) made requests that the chart's roles do "
        f"not allow: {'; '.join(denied)}. Add these verbs to its role in "
        "deploy/helm/gpuslice/templates/ (rbac.yaml, webhook-certs.yaml)")
    assert not unused, (
        f"{component} (ServiceAccount {NS}/{account}) is granted what its code never used: "
        f"{'; '.join(unused)}. Remove the verb from the chart, or list it in NEEDED_ELSEWHERE "
        "with the reason it is needed")


def token(component: str) -> str:
    return f"gpuslice-test-{component}"


def client_as(kube_api: Any, component: str) -> AsyncClient:
    """A client like the service's own (make_client), authenticated as `component` alone."""
    if kube_api.server is None:
        pytest.skip("needs the in-process API server: it records who made each request")
    admin = kube_api.config().get()
    config = KubeConfig.from_one(cluster=admin.cluster, user=User(token=token(component)))
    return AsyncClient(config, field_manager=FIELD_MANAGER)


@contextlib.asynccontextmanager
async def clients(kube_api: Any, component: str) -> AsyncIterator[tuple[AsyncClient,
                                                                        AsyncClient]]:
    """(the test's admin client, the component's client), both closed at the end; the
    release namespace exists."""
    admin, mine = kube_api.async_client(), client_as(kube_api, component)
    try:
        await admin.create(dict_view(Namespace)({"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": NS}}))
        yield admin, mine
    finally:
        await mine.close()
        await admin.close()


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---- the services' flows --------------------------------------------------------------------

async def test_the_extender_is_granted_exactly_what_it_calls(kube_api, tmp_path):
    faults = kube_api.need_faults()
    objs = render("default")
    cfg = scheduler_config.load(config_file(objs, "-scheduler", "scheduler.yaml", tmp_path))
    le = cfg.leader_election
    assert le.enabled and le.follow, "the chart runs the extender following kube-scheduler"
    cfg = msgspec.structs.replace(cfg, metrics_address="", leader_election=msgspec.structs.replace(
        le, identity="sched-pod", retry_period_seconds=0.05))
    async with clients(kube_api, "extender") as (admin, mine):
        await admin.create(dict_view(Lease)({  # kube-scheduler in this pod leads
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": le.lease_name, "namespace": le.lease_namespace},
            "spec": {"holderIdentity": "sched-pod_1234", "leaseDurationSeconds": 30,
                     "renewTime": now()}}))
        await create(admin, node_obj("gpu-1", gpus=1))
        pods = {name: await create(admin, pod_obj(name, mem=mem))
                for name, mem in (("fits", 4096), ("too-big", 65536), ("doomed", 4096))}
        ext = Extender(cfg, mine)
        port = await ext.start()
        try:
            await wait_for(lambda: ext.starting() is None and ext.is_leader(),
                           "caches and lease")
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                async def verb(name: str, body: dict[str, Any]) -> Any:
                    async with http.post(f"/{name}", json=body) as r:
                        assert r.status == 200, await r.text()
                        return await r.json()

                async def bind(name: str) -> str:
                    return (await verb("bind", {
                        "PodName": name, "PodNamespace": "default", "Node": "gpu-1",
                        "PodUID": pods[name]["metadata"]["uid"]}))["Error"]

                for name, fits in (("fits", ["gpu-1"]), ("too-big", []), ("too-big", [])):
                    got = await verb("filter", {"Pod": pods[name], "NodeNames": ["gpu-1"]})
                    assert got["NodeNames"] == fits  # the second NoGPUFit aggregates
                assert await bind("fits") == ""
                faults.fail_next(2 * cfg.bind_attempts, code=500, message="etcd is on fire",
                                 method="POST", resource="pods", name="doomed",
                                 subresource="binding")
                for _ in range(2):  # rolled back each time; the second BindFailed aggregates
                    assert "etcd is on fire" in await bind("doomed")
        finally:
            await ext.stop()
        assert (await admin.get(dict_view(Pod), "fits", namespace="default"))["spec"][
            "nodeName"] == "gpu-1"
    check(kube_api, "extender", service_account(objs, "Deployment", "-scheduler"))


@contextlib.asynccontextmanager
async def agent_on_node(client: AsyncClient, objs: list[dict[str, Any]],
                        tmp_path: Path) -> AsyncIterator[tuple[Agent, Kubelet, FakeBackend]]:
    """The node agent with the chart's configuration (host paths moved to a temporary folder)
    and 2 fake GPUs, registered with the kubelet emulator."""
    base = Path(short_dir())
    cfg = node_settings.load(config_file(objs, "-node-agent", "node-agent.yaml", tmp_path),
                             environ={"GPUSLICE_NODE_NODE_NAME": NODE}, flags={
        **agent_paths(base), "splitCount": 4, "verifyIntervalSeconds": 0.1})
    if cfg.dra.enabled:  # the chart's DRA host paths, moved too
        cfg = msgspec.structs.replace(cfg, dra=msgspec.structs.replace(
            cfg.dra, plugin_dir=str(base / "plugin"), registry_dir=str(base / "registry"),
            cdi_dir=str(base / "cdi")))
    async with started_agent(cfg, client, base) as running:
        yield running


async def test_the_node_agent_is_granted_exactly_what_it_calls(kube_api, tmp_path):
    objs = render("default")
    async with clients(kube_api, "node-agent") as (admin, mine):
        await admin.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node",
                                            "metadata": {"name": NODE}}))
        bound = dict(await admin.create(dict_view(Pod)(pod(
            "bound", [container("main")], {"main": [gpu(0)]}, at=time.time() - 1))))
        async with agent_on_node(mine, objs, tmp_path) as (agent, kubelet, backend):
            async def published() -> bool:
                node = await admin.get(dict_view(Node), NODE)
                return codec.INVENTORY_ANNOTATION in (node["metadata"].get("annotations") or {})

            await wait_for(published, "the inventory on the node")
            await kubelet.wait_devices("nvidia.com/gpu")
            await kubelet.admit(bound)

            async def allocated() -> bool:
                got = await admin.get(dict_view(Pod), "bound", namespace="default")
                return got["metadata"]["annotations"].get(handoff.ALLOCATED) == "main"

            await wait_for(allocated, "the allocated mark")
            await agent._verify_once()
            backend.set_processes(gpu(0), {4_000_000: 512 << 20})  # in no region slot
            await agent._watchdog_once()  # a LimitViolation event on the node
            await agent.cluster.events.flush()
    check(kube_api, "node-agent", service_account(objs, "DaemonSet", "-node-agent"))


async def test_the_node_agent_with_dra_is_granted_exactly_what_it_calls(kube_api, tmp_path):
    """The DRA flows: publish the slice, prepare a claim (status.devices), unprepare, remove
    the slice at uninstall; the device-plugin flows' grants are covered by the test above."""
    objs = render("DRA")
    async with clients(kube_api, "node-agent") as (admin, mine):
        await admin.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": NODE, "labels": {"gpuslice.io/gpu-path": "dra"}}}))  # a DRA node
        await admin.create(dict_view(DeviceClass)(find(objs, "DeviceClass")))
        async with agent_on_node(mine, objs, tmp_path) as (agent, _, backend):
            async def published() -> bool:
                found = [s async for s in admin.list(dict_view(ResourceSlice))]
                return bool(found)

            await wait_for(published, "the node's ResourceSlice")
            dra = DraKubelet(Path(agent.cfg.dra.registry_dir))
            await dra.start()
            try:
                await dra.wait_registered(DRIVER)
                claim = dict(await admin.create(dict_view(ResourceClaim)({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": "share", "namespace": "default"},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                        "deviceClassName": DRIVER,
                        "capacity": {"requests": {"memory": "1Gi", "cores": "30"}}}}]}}}),
                    namespace="default"))
                assert await StandInAllocator(admin).allocate_pending() == (1, 0)
                assert not (await dra.prepare(DRIVER, claim))[claim["metadata"]["uid"]].error

                async def reported() -> bool:
                    got = await admin.get(dict_view(ResourceClaim), "share", namespace="default")
                    return bool((got.get("status") or {}).get("devices"))

                await wait_for(reported, "status.devices of the prepared claim")
                assert not (await dra.unprepare(DRIVER, claim))[claim["metadata"]["uid"]].error
            finally:
                await dra.stop()
            sick = backend.devices()[1].uuid  # a health change
            await agent.publisher.publish([msgspec.structs.replace(g, healthy=g.uuid != sick)
                                           for g in agent.gpus()])
            await agent.publisher.remove()  # what --remove-dra-slices does
    check(kube_api, "node-agent", service_account(objs, "DaemonSet", "-node-agent"), "DRA",
          group="resource.k8s.io")


async def test_the_webhook_is_granted_exactly_what_it_calls(kube_api, tmp_path):
    objs = render("default")
    cfg = webhook_config.load(config_file(objs, "-webhook", "webhook.yaml", tmp_path))
    assert cfg.check_namespace_labels, "the chart's webhook reads namespace labels"
    write_dir(tmp_path, ensure(None, ["localhost"], ["127.0.0.1"])[0])
    cfg = msgspec.structs.replace(cfg, address="127.0.0.1", port=0,
                                  cert_file=str(tmp_path / "tls.crt"),
                                  key_file=str(tmp_path / "tls.key"))
    async with clients(kube_api, "webhook") as (admin, mine):
        await admin.create(dict_view(Namespace)({"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": "team-a"}}))
        server = Server(cfg, client=mine)
        await server.start()
        try:
            review = SAMPLE.replace(b"example.com/gpu-slice", b"nvidia.com/gpumem").replace(
                b'"namespace": "default"', b'"namespace": "team-a"')
            tls = aiohttp.TCPConnector(ssl=ssl.create_default_context(
                cafile=str(tmp_path / "ca.crt")))
            async with aiohttp.ClientSession(connector=tls) as http, http.post(
                    f"https://127.0.0.1:{server.port}/mutate", data=review,
                    headers={"Content-Type": "application/json"}) as r:
                reply = json.loads(await r.read())["response"]
            assert reply["allowed"] and json.loads(base64.b64decode(reply["patch"]))
        finally:
            await server.stop()
    check(kube_api, "webhook", service_account(objs, "Deployment", "-webhook"))


def certgen_args(objs: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    """The chart's certgen Job of `phase` ("pre", "post"), as certgen() keywords."""
    job = find(objs, "Job", f"-certgen-{phase}")["spec"]["template"]["spec"]
    args = dict(a.removeprefix("--").split("=", 1) for a in job["containers"][0]["args"][1:])
    kw: dict[str, Any] = {"service": args["service"], "namespace": args["namespace"],
                          "days": int(args["days"]), "secret": args["secret"]}
    if "webhook-config" in args:
        kw["webhook_config"] = args["webhook-config"]
    return kw


async def test_certgen_is_granted_exactly_what_it_calls(kube_api):
    objs = render("default")
    pre, post = certgen_args(objs, "pre"), certgen_args(objs, "post")
    mwc = find(objs, "MutatingWebhookConfiguration")
    async with clients(kube_api, "certgen") as (admin, mine):
        assert "created" in (await certgen(**pre, client=mine))[-1]  # pre-install
        await admin.create(dict_view(MutatingWebhookConfiguration)(mwc))  # helm installs it
        assert "updated" in (await certgen(**post, client=mine))[1]  # post-install: caBundle
        garbled = {"data": {"tls.crt": base64.b64encode(b"garbage").decode()}}
        await admin.patch(dict_view(Secret), pre["secret"], garbled, namespace=NS)
        assert "updated" in (await certgen(**pre, client=mine))[-1]  # pre-upgrade: renewed
    check(kube_api, "certgen", service_account(objs, "Job", "-certgen-pre"))


# ---- the check can fail -----------------------------------------------------------------------

def test_a_request_without_a_rule_and_a_grant_without_a_request_are_both_named():
    rule = Rule("ClusterRole/x (ClusterRoleBinding/x)", None, frozenset({""}),
                frozenset({"pods"}), frozenset({"get", "patch"}), frozenset())
    used = [access("GET", "/api/v1/namespaces/default/pods/p", {}),
            access("POST", "/api/v1/namespaces/default/pods/p/binding", {})]
    denied, unused = uncovered([a for a in used if a], [rule], {})
    assert denied == ["create pods/binding 'p' in namespace default"]
    assert unused == ["patch pods from ClusterRole/x (ClusterRoleBinding/x): apiGroups=[''] "
                      "resources=['pods'] verbs=['get', 'patch']"]


@pytest.mark.parametrize(("method", "path", "query", "want"), [
    ("GET", "/api/v1/pods", {}, Access("list", "", "pods", "", "")),
    ("GET", "/api/v1/pods", {"watch": "true"}, Access("watch", "", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/a/pods", {}, Access("watch", "", "pods", "a", "")),
    ("GET", "/api/v1/namespaces/a", {}, Access("get", "", "namespaces", "", "a")),
    ("PUT", "/api/v1/namespaces/a/status", {}, Access("update", "", "namespaces/status", "",
                                                      "a")),
    ("PATCH", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/m", {},
     Access("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "m")),
    ("DELETE", "/apis/coordination.k8s.io/v1/namespaces/a/leases", {},
     Access("deletecollection", "coordination.k8s.io", "leases", "a", "")),
    ("GET", "/version", {}, None),
])
def test_requests_map_to_rbac_attributes_as_kube_apiserver_maps_them(method, path, query, want):
    assert access(method, path, query) == want


def test_role_rules_apply_in_their_namespace_and_resource_names_never_cover_create():
    rule = Rule("Role/r (RoleBinding/r)", "ns", frozenset({""}), frozenset({"secrets"}),
                frozenset({"create", "get"}), frozenset({"tls"}))
    assert rule.allows(Access("get", "", "secrets", "ns", "tls"))
    assert not rule.allows(Access("get", "", "secrets", "other", "tls"))
    assert not rule.allows(Access("get", "", "secrets", "ns", "other"))
    assert not rule.allows(Access("create", "", "secrets", "ns", ""))

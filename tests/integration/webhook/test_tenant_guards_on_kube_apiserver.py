"""The chart's admission objects on the real kube-apiserver v1.36, each attack tried as a tenant
would: the ValidatingAdmissionPolicy (placement-policy.yaml) and the webhook's matchConditions
(webhook.yaml), as `helm template` renders them.

Real-only: the in-process API server evaluates neither ValidatingAdmissionPolicies nor
matchConditions (docs/development.md), and both are CEL that only kube-apiserver can say it
accepts. Users are impersonated (the admin may): a tenant `alice`, gpuslice's service accounts,
a node; each also in system:masters, so RBAC lets the request through to admission and what
refuses it is the policy under test.

Items of "No tenant can forge, bypass or inherit a slice": 1 (no gpuslice.io/* key but
gpuslice's, on create or update, GPU pod or not), 5 (no NVIDIA_VISIBLE_DEVICES other than
void/none), 6 (a pod without a GPU is created while the webhook is down)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gpuslice import codec, model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))  # the chart's render
from test_chart import render

pytestmark = pytest.mark.kube_backends("kube-apiserver")

NS = "gpuslice-system"  # the release namespace test_chart.render renders for (release "t")
AGENT = f"system:serviceaccount:{NS}:t-gpuslice-node-agent"
EXTENDER = f"system:serviceaccount:{NS}:t-gpuslice-scheduler"
FORGED = codec.encode_assignment(model.PodAssignment(node="gpu-node-1", containers=(
    model.ContainerAssignment(container="c", slices=(
        model.GPUSlice(uuid="GPU-gpu-node-1-0", memory_mib=1 << 20, cores=100),)),)))


def rendered() -> list[dict[str, Any]]:
    """The chart with default values, as tests/deploy/test_chart.py renders it (once a run); a
    copy, since the tests here edit what they apply."""
    return copy.deepcopy(render("default"))


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (got,) = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return got


def pod(name: str, *, namespace: str = "default", limits: dict[str, str] | None = None,
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        env: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "registry.invalid/pause:1"}
    if limits:
        c["resources"] = {"limits": limits}
    if env:
        c["env"] = env
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [c], **spec}}


class Api:
    """Raw calls as the admin or, impersonated, as another user (in system:masters, so RBAC
    never is what refuses)."""

    def __init__(self, kube_api: Any) -> None:
        self.kube_api = kube_api

    async def call(self, method: str, path: str, body: Any = None, *, user: str | None = None,
                   content_type: str = "application/json", node: str | None = None,
                   **params: str) -> tuple[int, Any]:
        headers = {"Content-Type": content_type}
        if user is not None:
            headers |= {"Impersonate-User": user, "Impersonate-Group": "system:masters"}
        if node is not None:  # what a pod-bound token of a pod on `node` carries
            headers["Impersonate-Extra-authentication.kubernetes.io%2fnode-name"] = node
        async with self.kube_api.http() as http:
            reply = await http.request(method, path, params=params or None, headers=headers,
                                       content=None if body is None else json.dumps(body))
        return reply.status_code, reply.json()

    async def create(self, body: dict[str, Any], *, user: str | None = "alice",
                     **params: str) -> tuple[int, Any]:
        ns = body["metadata"].get("namespace", "default")
        return await self.call("POST", f"/api/v1/namespaces/{ns}/pods", body, user=user,
                               **params)

    async def patch(self, name: str, patch: dict[str, Any], *, user: str | None = "alice",
                    subresource: str = "", namespace: str = "default",
                    node: str | None = None) -> tuple[int, Any]:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}" + (
            f"/{subresource}" if subresource else "")
        return await self.call("PATCH", path, patch, user=user, node=node,
                               content_type="application/strategic-merge-patch+json")

    async def admin_create(self, kind_path: str, body: dict[str, Any]) -> None:
        code, reply = await self.call("POST", kind_path, body)
        assert code == 201, reply


REFUSED = (403, 422)  # what kube-apiserver answers for a request admission denies


def refused(code: int, reply: Any, *words: str) -> str:
    assert code in REFUSED, (code, reply)
    message = reply["message"]
    for word in words:
        assert word in message, message
    return message


def webhook_unreachable(code: int, reply: Any) -> None:
    """failurePolicy Fail: kube-apiserver answers 500 and names the webhook it could not call."""
    assert code == 500, (code, reply)
    assert 'failed calling webhook "pods.gpuslice.io"' in reply["message"], reply


@pytest.fixture
async def api(kube_api) -> Api:
    return Api(kube_api)


@contextlib.asynccontextmanager
async def enforced(api: Api, name: str, probe: Callable[[], Awaitable[int]]
                   ) -> AsyncIterator[Api]:
    """The chart's ValidatingAdmissionPolicy `name` and its binding, in force once `probe()`
    (an attack, dry run: its status code) is refused; removed afterwards, until the probe is
    not refused (the test tier's reset does not delete policies, and these bind the admin too)."""
    objs = rendered()
    policy = one(objs, "ValidatingAdmissionPolicy", name)
    binding = one(objs, "ValidatingAdmissionPolicyBinding", name)
    base = "/apis/admissionregistration.k8s.io/v1"
    await api.admin_create(f"{base}/validatingadmissionpolicies", policy)
    await api.admin_create(f"{base}/validatingadmissionpolicybindings", binding)
    try:
        status: dict[str, Any] = {}
        for _ in range(300):  # kube-apiserver type-checks the policy, then enforces it
            _, got = await api.call("GET", f"{base}/validatingadmissionpolicies/{name}")
            status = got.get("status") or {}
            if status.get("observedGeneration") == got["metadata"]["generation"] \
                    and await probe() in REFUSED:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"the policy never took effect: {status}")
        warnings = (status.get("typeChecking") or {}).get("expressionWarnings")
        assert not warnings, "\n".join(w["fieldRef"] + ": " + w["warning"] for w in warnings)
        yield api
    finally:
        for kind, obj in (("validatingadmissionpolicybindings", binding),
                          ("validatingadmissionpolicies", policy)):
            await api.call("DELETE", f"{base}/{kind}/{obj['metadata']['name']}")
        for _ in range(300):  # kube-apiserver stops enforcing it a moment after the delete
            if await probe() not in REFUSED:
                break
            await asyncio.sleep(0.1)


@pytest.fixture
async def guarded(kube_api, api) -> AsyncIterator[Api]:
    """placement-policy.yaml's pod policy in force."""
    async def probe() -> int:
        code, _ = await api.create(pod("probe", annotations={"gpuslice.io/assignment": FORGED}),
                                   dryRun="All")
        return code
    async with enforced(api, "t-gpuslice-placement-annotations", probe) as guarded_api:
        yield guarded_api


async def exists(api: Api, name: str, namespace: str = "default") -> bool:
    code, _ = await api.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
    return code == 200


# --- item 1: the keys gpuslice believes ------------------------------------------------------

async def test_a_pod_without_a_gpu_cannot_be_created_managed_with_a_forged_assignment(guarded):
    attack = pod("miner", labels={"gpuslice.io/managed": "true"},
                 annotations={"gpuslice.io/assignment": FORGED,
                              "gpuslice.io/bound-at": "2026-11-26T00:00:00.000000Z"})
    message = refused(*await guarded.create(attack),
                      "gpuslice.io/gang-size; the others (assignment, bound-at, allocated) "
                      "are written by gpuslice")
    assert "ValidatingAdmissionPolicy 't-gpuslice-placement-annotations'" in message
    assert not await exists(guarded, "miner")
    code, reply = await guarded.create(pod("labelled", labels={"gpuslice.io/managed": "true"}))
    refused(code, reply, "gpuslice.io/managed=true is set by gpuslice's webhook on pods that "
                         "ask for a GPU")


@pytest.mark.parametrize(("why", "meta"), [
    ("opted out of the webhook", {"labels": {"gpuslice.io/webhook": "disabled"}}),
    ("pretending to be a mirror pod", {"annotations": {"kubernetes.io/config.mirror": "x"}}),
])
async def test_pods_the_webhook_never_sees_are_held_to_the_same_rule(guarded, why, meta):
    attack = pod("sneaky", limits={"nvidia.com/gpu": "1"}, nodeName="gpu-node-1")
    attack["metadata"].setdefault("labels", {}).update(meta.get("labels", {}))
    attack["metadata"]["annotations"] = {**meta.get("annotations", {}),
                                         "gpuslice.io/assignment": FORGED}
    refused(*await guarded.create(attack), "gpuslice.io/node-policy")


async def test_a_node_may_create_the_mirror_pod_of_its_static_pod_as_written(guarded):
    mirror = pod("static-gpu-node-1", limits={"nvidia.com/gpu": "1"}, nodeName="gpu-node-1",
                 annotations={"kubernetes.io/config.mirror": "x", "gpuslice.io/assignment":
                              FORGED})
    code, reply = await guarded.create(mirror, user="system:node:gpu-node-1")
    assert code == 201, reply


async def test_what_a_tenant_may_write_is_created(guarded):
    ok = pod("tuned", labels={"gpuslice.io/webhook": "enabled"},
             annotations={"gpuslice.io/node-policy": "spread", "gpuslice.io/gpu-policy": "binpack",
                          "gpuslice.io/gang": "train"})
    code, reply = await guarded.create(ok)
    assert code == 201, reply
    # a GPU pod as the webhook leaves it: the managed label is right there
    code, reply = await guarded.create(pod("gpu", limits={"nvidia.com/gpu": "1"},
                                           labels={"gpuslice.io/managed": "true"}))
    assert code == 201, reply


@pytest.mark.parametrize(("key", "where", "words"), [
    ("gpuslice.io/assignment", "annotations", "assignment, bound-at and allocated are written "
                                              "by gpuslice only"),
    ("gpuslice.io/allocated", "annotations", "written by gpuslice only"),
    ("gpuslice.io/node-policy", "annotations", "changed by gpuslice only"),
    ("gpuslice.io/gang", "annotations", "changed by gpuslice only"),
    ("gpuslice.io/managed", "labels", "changed by gpuslice only"),
    ("gpuslice.io/webhook", "labels", "changed by gpuslice only"),
])
@pytest.mark.parametrize("subresource", ["", "status"])
async def test_nobody_but_gpuslice_adds_changes_or_removes_a_key_after_creation(
        guarded, key, where, words, subresource):
    code, reply = await guarded.create(pod("running", limits={"nvidia.com/gpu": "1"},
                                           labels={"gpuslice.io/managed": "true"}))
    assert code == 201, reply
    forged = FORGED if key == "gpuslice.io/assignment" else "x"
    add = {"metadata": {where: {key: forged}}}
    refused(*await guarded.patch("running", add, subresource=subresource), words)
    remove = {"metadata": {"labels": {"gpuslice.io/managed": None}}}
    refused(*await guarded.patch("running", remove, subresource=subresource),
            "changed by gpuslice only")
    code, reply = await guarded.patch("running", {"metadata": {"labels": {"team": "a"}}},
                                      subresource=subresource)
    assert code == 200, reply  # everything else stays the tenant's


async def test_the_node_agent_and_the_extender_may_write_the_placement(guarded):
    code, reply = await guarded.create(pod("placed", limits={"nvidia.com/gpu": "1"},
                                           labels={"gpuslice.io/managed": "true"},
                                           nodeName="gpu-node-1"))
    assert code == 201, reply
    for user, node, ann in ((EXTENDER, None, {"gpuslice.io/assignment": FORGED}),
                            (AGENT, "gpu-node-1", {"gpuslice.io/allocated": "c"})):
        code, reply = await guarded.patch("placed", {"metadata": {"annotations": ann}},
                                          user=user, node=node)
        assert code == 200, (user, reply)
    # the node agent only on its own node's pods (tests/deploy/test_node_agent_scope_on_
    # kube_apiserver.py: the same with real pod-bound tokens)
    for node in ("gpu-node-2", None):
        refused(*await guarded.patch("placed", {"metadata": {"annotations": {
            "gpuslice.io/allocated": "c,d"}}}, user=AGENT, node=node),
            "written by gpuslice only")
    refused(*await guarded.patch("placed", {"metadata": {"annotations": {
        "gpuslice.io/allocated": "c,d"}}}, user=f"system:serviceaccount:{NS}:default"),
        "written by gpuslice only")  # another account of the same namespace is no one special


# --- item 5: the NVIDIA container toolkit's device list ---------------------------------------

@pytest.mark.parametrize(("why", "env"), [
    ("every GPU", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
    ("one GPU by index", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]),
    ("empty (all, for legacy CUDA images)", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}]),
    ("from a ConfigMap", [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
        "configMapKeyRef": {"name": "gpus", "key": "list"}}}]),
    ("void, then all", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
])
async def test_a_container_without_a_slice_cannot_name_gpus_for_the_toolkit(guarded, why, env):
    refused(*await guarded.create(pod("taker", env=env)),
            "NVIDIA_VISIBLE_DEVICES may only be void or none")
    sidecar = pod("sidecar", limits={"nvidia.com/gpu": "1"})
    sidecar["spec"]["initContainers"] = [{"name": "s", "image": "registry.invalid/pause:1",
                                          "restartPolicy": "Always", "env": env}]
    refused(*await guarded.create(sidecar), "NVIDIA_VISIBLE_DEVICES may only be void or none")


async def test_hiding_the_gpus_passes_and_exempt_namespaces_keep_the_toolkit_path(guarded):
    for value in ("void", "none"):
        code, reply = await guarded.create(pod(f"hidden-{value}", env=[
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]))
        assert code == 201, reply
    for ns in ("kube-system", NS):  # the node agent asks the toolkit for every GPU
        if ns == NS:
            await guarded.call("POST", "/api/v1/namespaces", {
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        code, reply = await guarded.create(pod("agent", namespace=ns, env=[
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]))
        assert code == 201, (ns, reply)


async def test_kubectl_debug_cannot_add_a_container_that_takes_every_gpu(guarded):
    code, reply = await guarded.create(pod("target"))
    assert code == 201, reply
    _, current = await guarded.call("GET", "/api/v1/namespaces/default/pods/target")
    debug = {"name": "debugger", "image": "registry.invalid/busybox:1",
             "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    current["spec"]["ephemeralContainers"] = [debug]
    code, reply = await guarded.call(
        "PUT", "/api/v1/namespaces/default/pods/target/ephemeralcontainers", current,
        user="alice")
    refused(code, reply, "NVIDIA_VISIBLE_DEVICES may only be void or none")
    debug["env"] = []
    code, reply = await guarded.call(
        "PUT", "/api/v1/namespaces/default/pods/target/ephemeralcontainers", current,
        user="alice")
    assert code == 200, reply


# --- item 6: the webhook's matchConditions ----------------------------------------------------

def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


@pytest.fixture
async def webhook_down(kube_api, api) -> AsyncIterator[Api]:
    """The chart's MutatingWebhookConfiguration, its service swapped for a URL where nothing
    listens: the webhook is down (every replica gone)."""
    config = one(rendered(), "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{closed_port()}/mutate"}
    await api.admin_create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                           config)
    for _ in range(100):  # kube-apiserver picks up new webhook configurations within ~1 s
        code, _ = await api.create(pod("probe", limits={"nvidia.com/gpu": "1"}), dryRun="All")
        if code != 201:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("kube-apiserver never called the (dead) webhook")
    yield api
    await api.call("DELETE", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                   + config["metadata"]["name"])


async def test_while_the_webhook_is_down_only_gpu_pods_wait_for_it(webhook_down):
    for plain in (pod("web"), pod("tuned", annotations={"gpuslice.io/node-policy": "spread"}),
                  pod("ganged", annotations={"gpuslice.io/gang": "train"}),
                  pod("hidden", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]),
                  pod("other", limits={"cpu": "1", "example.com/fpga": "1"}),
                  pod("gpu-in-kube-system", namespace="kube-system",
                      limits={"nvidia.com/gpu": "1"})):
        code, reply = await webhook_down.create(plain)
        assert code == 201, (plain["metadata"]["name"], reply)
    for limits in ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpumem": "4096"},
                   {"volcano.sh/vgpu-number": "1"}, {"tencent.com/vcuda-core": "50"}):
        webhook_unreachable(*await webhook_down.create(pod("gpu", limits=limits)))
    init_gpu = pod("init-gpu")
    init_gpu["spec"]["initContainers"] = [{"name": "i", "image": "registry.invalid/pause:1",
                                           "resources": {"requests": {"nvidia.com/gpu": "1"},
                                                         "limits": {"nvidia.com/gpu": "1"}}}]
    webhook_unreachable(*await webhook_down.create(init_gpu))


async def test_while_the_webhook_is_down_what_it_refuses_still_waits_for_it(webhook_down):
    """Without the ValidatingAdmissionPolicy (Kubernetes < 1.30, or placementPolicy.enabled
    false) the webhook is the only guard of these: they still go to it."""
    for attack in (pod("forged", annotations={"gpuslice.io/assignment": FORGED}),
                   pod("labelled", labels={"gpuslice.io/managed": "true"}),
                   pod("taker", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])):
        webhook_unreachable(*await webhook_down.create(attack))


async def test_the_control_without_match_conditions_every_pod_waits(kube_api, api):
    """What the issue describes: the same configuration without matchConditions gates every
    pod of every covered namespace on the webhook."""
    config = one(rendered(), "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    del hook["matchConditions"]
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{closed_port()}/mutate"}
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    await api.admin_create(path, config)
    try:
        for _ in range(100):
            code, reply = await api.create(pod("web"), dryRun="All")
            if code != 201:
                break
            await asyncio.sleep(0.1)
        webhook_unreachable(code, reply)
    finally:
        await api.call("DELETE", f"{path}/{config['metadata']['name']}")


# --- a Binding's annotations: merged into the pod by kube-apiserver --------------------------

async def bind(api: Api, name: str, annotations: dict[str, str] | None, *, user: str | None,
               **params: str) -> tuple[int, Any]:
    body = {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "annotations": annotations or {}},
            "target": {"kind": "Node", "name": "gpu-node-1"}}
    if annotations is None:
        del body["metadata"]["annotations"]
    return await api.call("POST", f"/api/v1/namespaces/default/pods/{name}/binding", body,
                          user=user, **params)


@pytest.fixture
async def bindings_guarded(kube_api, api) -> AsyncIterator[Api]:
    """placement-policy.yaml's Binding policy in force."""
    code, reply = await api.create(pod("target", limits={"nvidia.com/gpu": "1"},
                                       labels={"gpuslice.io/managed": "true"}), user=None)
    assert code == 201, reply

    async def probe() -> int:
        code, _ = await bind(api, "target", {"gpuslice.io/assignment": FORGED}, user="alice",
                             dryRun="All")
        return code
    async with enforced(api, "t-gpuslice-binding-annotations", probe) as guarded_api:
        yield guarded_api


async def test_a_binding_cannot_write_a_forged_assignment_into_a_gpu_pod(bindings_guarded):
    """Whoever may create pods/binding (another scheduler, a role given too widely) is no
    placer: the pod UPDATE policy never sees a Binding, this one does."""
    api = bindings_guarded
    for user in ("alice", "system:kube-scheduler"):
        refused(*await bind(api, "target", {"gpuslice.io/assignment": FORGED,
                                            "gpuslice.io/bound-at": "2026-11-27T00:00:00Z"},
                            user=user), "only by gpuslice's scheduler")
    _, got = await api.call("GET", "/api/v1/namespaces/default/pods/target")
    assert not got["spec"].get("nodeName")
    assert "gpuslice.io/assignment" not in (got["metadata"].get("annotations") or {})


@pytest.mark.parametrize(("user", "annotations"), [
    ("system:kube-scheduler", None),  # any scheduler's plain Binding
    ("alice", {"example.com/note": "x"}),  # annotations of other owners pass
    (EXTENDER, {"gpuslice.io/assignment": FORGED}),  # how gpuslice binds
])
async def test_other_bindings_pass(bindings_guarded, user, annotations):
    code, reply = await bind(bindings_guarded, "target", annotations, user=user)
    assert code == 201, reply



async def test_the_control_without_the_policy_a_binding_forges_the_assignment(api):
    """Why the policy exists: kube-apiserver merges a Binding's annotations into the pod."""
    code, reply = await api.create(pod("victim", limits={"nvidia.com/gpu": "1"},
                                       labels={"gpuslice.io/managed": "true"}), user=None)
    assert code == 201, reply
    code, reply = await bind(api, "victim", {"gpuslice.io/assignment": FORGED}, user="alice")
    assert code == 201, reply
    _, got = await api.call("GET", "/api/v1/namespaces/default/pods/victim")
    assert got["metadata"]["annotations"]["gpuslice.io/assignment"] == FORGED
    assert got["spec"]["nodeName"] == "gpu-node-1"

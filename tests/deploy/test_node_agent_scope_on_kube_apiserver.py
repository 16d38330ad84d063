"""Each node agent writes only its own node's objects, proven on the real kube-apiserver v1.36
with real tokens: the chart's RBAC (DRA render: its widest), its two ValidatingAdmissionPolicies
(node-agent-policy.yaml and placement-policy.yaml, as `helm template` renders them), and
service-account tokens from the TokenRequest API, bound to an agent pod on node gpu-a as the
kubelet mounts them. Nobody is impersonated: what RBAC allows and the policies refuse is what
a real agent would meet.

Item 8 of "No tenant can forge, bypass or inherit a slice": one GPU node's agent cannot rewrite
another node's pods, Node or ResourceSlice; it may still write its own; the extender still
binds. Real-only: the in-process API server evaluates no ValidatingAdmissionPolicy."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import pytest
from test_chart import render

pytestmark = pytest.mark.kube_backends("kube-apiserver")

NS = "gpuslice-system"  # test_chart.render's namespace, release "t"
AGENT_SA, EXTENDER_SA = "t-gpuslice-node-agent", "t-gpuslice-scheduler"
POLICIES = ("t-gpuslice-node-agent-scope", "t-gpuslice-placement-annotations")
NODE_KEY = "authentication.kubernetes.io/node-name"
SCOPE = "may write only its own Node, the pods bound to it and its ResourceSlices"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MERGE = "application/merge-patch+json"


@dataclass
class Cluster:
    kube_api: Any
    tokens: dict[str, str]  # who -> bearer token

    async def call(self, method: str, path: str, body: Any = None, *, who: str | None = None,
                   content_type: str = "application/json", **params: str) -> tuple[int, Any]:
        """As the admin (who=None) or with the token of `who`."""
        content = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type}
        if who is None:
            async with self.kube_api.http() as http:
                reply = await http.request(method, path, params=params or None,
                                           headers=headers, content=content)
        else:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
            async with httpx.AsyncClient(base_url=self.kube_api.url, verify=False) as http:
                reply = await http.request(method, path, params=params or None,
                                           headers=headers, content=content)
        return reply.status_code, reply.json()

    async def admin(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        code, reply = await self.call("POST", path, body)
        assert code == 201, (path, reply)
        return reply

    async def patch(self, path: str, patch: dict[str, Any], who: str,
                    **params: str) -> tuple[int, Any]:
        return await self.call("PATCH", path, patch, who=who, content_type=MERGE, **params)


def pod(name: str, namespace: str, *, node: str | None = None, sa: str | None = None,
        gpu: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "registry.invalid/pause:1"}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        meta["labels"] = {"gpuslice.io/managed": "true"}
    spec: dict[str, Any] = {"containers": [container]}
    if node:
        spec["nodeName"] = node
    if sa:
        spec["serviceAccountName"] = sa
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def path_of(obj: dict[str, Any]) -> str:
    """Where the admin creates one of the chart's objects."""
    group, _, version = obj["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    plural = {"ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
              "ClusterRoleBinding": "clusterrolebindings",
              "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
              "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[
        obj["kind"]]
    ns = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"


def chart_objects(policies: tuple[str, ...]) -> list[dict[str, Any]]:
    """The agent's and the extender's accounts and cluster RBAC, and the named policies."""
    wanted = {("ServiceAccount", AGENT_SA), ("ServiceAccount", EXTENDER_SA),
              ("ClusterRole", AGENT_SA), ("ClusterRoleBinding", AGENT_SA),
              ("ClusterRole", EXTENDER_SA),
              *((k, p) for p in policies for k in ("ValidatingAdmissionPolicy",
                                                   "ValidatingAdmissionPolicyBinding"))}
    objs = [copy.deepcopy(o) for o in render("DRA")
            if (o["kind"], o["metadata"]["name"]) in wanted]
    objs += [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": EXTENDER_SA},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": EXTENDER_SA},
              "subjects": [{"kind": "ServiceAccount", "name": EXTENDER_SA,
                            "namespace": NS}]}]
    assert len(objs) == len(wanted) + 1, sorted(o["metadata"]["name"] for o in objs)
    return objs


async def token(cluster: Cluster, sa: str, bound_pod: dict[str, Any] | None) -> str:
    spec: dict[str, Any] = {"audiences": [], "expirationSeconds": 3600}
    if bound_pod is not None:  # as the kubelet asks for the token it mounts in the pod
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod",
                                  "name": bound_pod["metadata"]["name"],
                                  "uid": bound_pod["metadata"]["uid"]}
    reply = await cluster.admin(f"/api/v1/namespaces/{NS}/serviceaccounts/{sa}/token",
                                {"apiVersion": "authentication.k8s.io/v1",
                                 "kind": "TokenRequest", "spec": spec})
    return reply["status"]["token"]


async def deployed(kube_api: Any, policies: tuple[str, ...]) -> AsyncIterator[Cluster]:
    cluster = Cluster(kube_api, {})
    objs = chart_objects(policies)
    await cluster.admin("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": NS}})
    try:
        for obj in objs:
            await cluster.admin(path_of(obj), obj)
        for node in ("gpu-a", "gpu-b"):
            await cluster.admin("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                  "metadata": {"name": node}})
        agent_a = await cluster.admin(f"/api/v1/namespaces/{NS}/pods",
                                      pod("agent-a", NS, node="gpu-a", sa=AGENT_SA))
        extender = await cluster.admin(f"/api/v1/namespaces/{NS}/pods",
                                       pod("extender", NS, sa=EXTENDER_SA))
        cluster.tokens = {"agent-a": await token(cluster, AGENT_SA, agent_a),
                          "agent-unbound": await token(cluster, AGENT_SA, None),
                          "extender": await token(cluster, EXTENDER_SA, extender)}
        for name, node in (("work-a", "gpu-a"), ("work-b", "gpu-b"), ("pending", None)):
            await cluster.admin("/api/v1/namespaces/default/pods",
                                pod(name, "default", node=node, gpu=True))
        await in_force(cluster, policies)
        yield cluster
    finally:
        for obj in reversed(objs):
            if "namespace" not in obj["metadata"]:
                await cluster.call("DELETE", f"{path_of(obj)}/{obj['metadata']['name']}")


async def in_force(cluster: Cluster, policies: tuple[str, ...]) -> None:
    """Each policy type-checked without a warning, then enforced: kube-apiserver picks up
    policies a moment after they are created."""
    for name in policies:
        for _ in range(300):
            _, got = await cluster.call("GET", f"{ADMISSION}/validatingadmissionpolicies/{name}")
            status = got.get("status") or {}
            if status.get("observedGeneration") == got["metadata"]["generation"]:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"{name} was never type-checked: {got}")
        warnings = (status.get("typeChecking") or {}).get("expressionWarnings")
        assert not warnings, "\n".join(w["fieldRef"] + ": " + w["warning"] for w in warnings)
    # what each policy alone refuses, dry-run: agent-a on a Node, the admin on a placement
    probes = {POLICIES[0]: ("/api/v1/nodes/gpu-b", "agent-a"),
              POLICIES[1]: ("/api/v1/namespaces/default/pods/work-b", None)}
    for name in policies:
        path, who = probes[name]
        for _ in range(300):
            code, reply = await cluster.call("PATCH", path, {"metadata": {"annotations": {
                "gpuslice.io/allocated": "c"}}}, who=who, content_type=MERGE, dryRun="All")
            if code in (403, 422) and name in reply["message"]:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"{name} never took effect: {code} {reply}")


@pytest.fixture
async def cluster(kube_api) -> AsyncIterator[Cluster]:
    """As the chart installs it: both policies."""
    async for c in deployed(kube_api, POLICIES):
        yield c


@pytest.fixture
async def scope_only(kube_api) -> AsyncIterator[Cluster]:
    """node-agent-policy.yaml's policy alone: what it refuses by itself."""
    async for c in deployed(kube_api, POLICIES[:1]):
        yield c


@pytest.fixture
async def placement_only(kube_api) -> AsyncIterator[Cluster]:
    """nodeAgent.ownNodeOnly's policy not applied: the placement policy alone."""
    async for c in deployed(kube_api, POLICIES[1:]):
        yield c


def refused(code: int, reply: Any, *words: str) -> str:
    assert code in (403, 422), (code, reply)  # a policy's denial: 422 Invalid, reason unset
    for word in words:
        assert word in reply["message"], reply["message"]
    return reply["message"]


async def test_the_agents_token_names_its_node_on_this_kube_apiserver(cluster):
    """The key the policies read, as kube-apiserver v1.36 sets it for a pod-bound token
    (ServiceAccountTokenPodNodeInfo, GA in 1.32); an unbound token has none."""
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    code, reply = await cluster.call("POST", path, review, who="agent-a")
    assert code == 201, reply
    user = reply["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{NS}:{AGENT_SA}"
    assert user["extra"][NODE_KEY] == ["gpu-a"]
    code, reply = await cluster.call("POST", path, review, who="agent-unbound")
    assert code == 201, reply
    assert NODE_KEY not in (reply["status"]["userInfo"].get("extra") or {})


async def test_an_agent_writes_its_own_nodes_pods_and_node(cluster):
    code, reply = await cluster.patch("/api/v1/namespaces/default/pods/work-a", {
        "metadata": {"annotations": {"gpuslice.io/allocated": "c"}}}, "agent-a")
    assert code == 200, reply
    code, reply = await cluster.patch("/api/v1/nodes/gpu-a", {
        "metadata": {"annotations": {"gpuslice.io/inventory": "{}"}}}, "agent-a")
    assert code == 200, reply


@pytest.mark.parametrize(("what", "path", "patch"), [
    ("a pod's allocated mark", "/api/v1/namespaces/default/pods/work-b",
     {"metadata": {"annotations": {"gpuslice.io/allocated": "c"}}}),
    ("a pod's assignment", "/api/v1/namespaces/default/pods/work-b",
     {"metadata": {"annotations": {"gpuslice.io/assignment": "forged"}}}),
    ("a pod not bound yet", "/api/v1/namespaces/default/pods/pending",
     {"metadata": {"annotations": {"gpuslice.io/assignment": "forged"}}}),
    ("the Node's inventory", "/api/v1/nodes/gpu-b",
     {"metadata": {"annotations": {"gpuslice.io/inventory": "{}"}}}),
])
async def test_an_agent_cannot_write_another_nodes_objects(cluster, what, path, patch):
    message = refused(*await cluster.patch(path, patch, "agent-a"))
    assert SCOPE in message or "written by gpuslice only" in message, message


@pytest.mark.parametrize(("what", "path", "patch"), [
    ("a pod's allocated mark", "/api/v1/namespaces/default/pods/work-b",
     {"metadata": {"annotations": {"gpuslice.io/allocated": "c"}}}),
    ("a pod's label", "/api/v1/namespaces/default/pods/work-b",
     {"metadata": {"labels": {"team": "x"}}}),
    ("a pod not bound yet", "/api/v1/namespaces/default/pods/pending",
     {"metadata": {"annotations": {"gpuslice.io/assignment": "forged"}}}),
    ("the Node's inventory", "/api/v1/nodes/gpu-b",
     {"metadata": {"annotations": {"gpuslice.io/inventory": "{}"}}}),
])
async def test_the_scope_policy_alone_refuses_another_nodes_objects(scope_only, what, path,
                                                                    patch):
    message = refused(*await scope_only.patch(path, patch, "agent-a"), SCOPE)
    assert "the node agent of node gpu-a" in message
    assert "t-gpuslice-node-agent-scope" in message


async def test_an_agent_changes_nothing_but_gpuslice_annotations_even_on_its_own_node(cluster):
    for path, patch in (
            ("/api/v1/nodes/gpu-a", {"metadata": {"labels": {"gpuslice.io/gpu-path": "dra"}}}),
            ("/api/v1/nodes/gpu-a", {"spec": {"unschedulable": True}}),
            ("/api/v1/nodes/gpu-a", {"metadata": {"annotations": {"team": "x"}}}),
            ("/api/v1/namespaces/default/pods/work-a", {"metadata": {"labels": {"a": "b"}}}),
            ("/api/v1/namespaces/default/pods/work-a",
             {"spec": {"activeDeadlineSeconds": 1}})):
        refused(*await cluster.patch(path, patch, "agent-a"),
                "the node agent changes only gpuslice.io/ annotations")


async def test_an_agent_token_that_names_no_node_writes_nothing(cluster):
    """A token not bound to the agent's pod (a TokenRequest without boundObjectRef, or a legacy
    Secret token) could be used from anywhere: it is refused, fail closed."""
    refused(*await cluster.patch("/api/v1/nodes/gpu-a", {"metadata": {"annotations": {
        "gpuslice.io/inventory": "{}"}}}, "agent-unbound"), "carries no node name")


@pytest.mark.parametrize("node", ["gpu-a", "gpu-b"])
async def test_an_agent_publishes_only_its_own_nodes_resource_slice(cluster, node):
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.gpuslice.io"},
            "spec": {"driver": "gpu.gpuslice.io", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": []}}
    path = "/apis/resource.k8s.io/v1/resourceslices"
    code, reply = await cluster.call("POST", path, body, who="agent-a")
    if node == "gpu-a":
        assert code == 201, reply
        moved = {**reply, "spec": {**reply["spec"], "nodeName": "gpu-b"}}
        code, reply = await cluster.call("PUT", f"{path}/{body['metadata']['name']}", moved,
                                         who="agent-a")  # the owner check reads the stored
        assert code == 422 and "field is immutable" in reply["message"], reply  # node: so
        code, reply = await cluster.call("DELETE", f"{path}/{body['metadata']['name']}",
                                         who="agent-a")
        assert code == 200, reply
        return
    refused(code, reply, SCOPE)
    await cluster.admin(path, body)  # the node's own agent made it
    refused(*await cluster.call("DELETE", f"{path}/{body['metadata']['name']}",
                                who="agent-a"), SCOPE)
    await cluster.call("DELETE", f"{path}/{body['metadata']['name']}")


async def test_the_extender_still_binds_with_its_assignment(cluster):
    binding = {"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": "pending", "namespace": "default",
                            "annotations": {"gpuslice.io/assignment": "{}"}},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-b"}}
    code, reply = await cluster.call("POST", "/api/v1/namespaces/default/pods/pending/binding",
                                     binding, who="extender")
    assert code == 201, reply
    _, got = await cluster.call("GET", "/api/v1/namespaces/default/pods/pending")
    assert got["spec"]["nodeName"] == "gpu-b"
    assert got["metadata"]["annotations"]["gpuslice.io/assignment"] == "{}"
    # and the agent of gpu-b's neighbour still cannot touch it once it is there
    refused(*await cluster.patch("/api/v1/namespaces/default/pods/pending", {"metadata": {
        "annotations": {"gpuslice.io/allocated": "c"}}}, "agent-a"), "t-gpuslice-")


async def test_the_placement_policy_alone_exempts_an_agent_only_on_its_own_node(placement_only):
    """With nodeAgent.ownNodeOnly's policy absent (say, deleted), the placement rule still
    holds each agent to its own node's pods."""
    code, reply = await placement_only.patch("/api/v1/namespaces/default/pods/work-a", {
        "metadata": {"annotations": {"gpuslice.io/allocated": "c"}}}, "agent-a")
    assert code == 200, reply
    message = refused(*await placement_only.patch("/api/v1/namespaces/default/pods/work-b", {
        "metadata": {"annotations": {"gpuslice.io/allocated": "c"}}}, "agent-a"),
        "written by gpuslice only")
    assert "t-gpuslice-placement-annotations" in message


def agent_client(cluster: Cluster, who: str) -> Any:
    """A lightkube client as the agent's code makes one, with `who`'s token."""
    from lightkube import AsyncClient, KubeConfig

    config = KubeConfig.from_dict({
        "apiVersion": "v1", "kind": "Config", "current-context": "agent",
        "clusters": [{"name": "c", "cluster": {"server": cluster.kube_api.url,
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": cluster.tokens[who]}}],
        "contexts": [{"name": "agent", "context": {"cluster": "c", "user": "u"}}]})
    return AsyncClient(config=config)


async def test_the_agents_own_write_calls_pass_on_its_node_and_fail_on_another(cluster):
    """The functions the agent writes with (kube.patch for the inventory, the allocated mark
    and swaps; dra.publisher for its slice), with its pod-bound token."""
    from lightkube.resources.core_v1 import Node, Pod

    from gpuslice import model
    from gpuslice.dra.publisher import SlicePublisher
    from gpuslice.kube import errors
    from gpuslice.kube.patch import patch_metadata, update_metadata
    from gpuslice.node.settings import DraConfig

    client = agent_client(cluster, "agent-a")

    def allocated(_obj: Any) -> dict[str, Any]:
        return {"annotations": {"gpuslice.io/allocated": "c"}}

    await patch_metadata(client, Node, "gpu-a", annotations={"gpuslice.io/inventory": "{}"})
    assert await update_metadata(client, Pod, "work-a", allocated, namespace="default")
    gpus = [model.GPU(uuid="GPU-a-0", model="NVIDIA H100", memory_mib=81920)]
    await SlicePublisher(client, "gpu-a", DraConfig()).publish(gpus)
    for attempt in (
            patch_metadata(client, Node, "gpu-b", annotations={"gpuslice.io/inventory": "{}"}),
            update_metadata(client, Pod, "work-b", allocated, namespace="default"),
            SlicePublisher(client, "gpu-b", DraConfig()).publish(gpus)):
        with pytest.raises(errors.APIError, match="t-gpuslice-"):
            await attempt

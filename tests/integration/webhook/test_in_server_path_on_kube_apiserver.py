"""The in-server path (the chart's gpu-pod-policy.yaml) on the real kube-apiserver v1.36: a
pod admitted without a webhook call comes out exactly as the webhook (webhook/admit.py) would
have left it, and every other pod still reaches the webhook.

The chart's MutatingAdmissionPolicy and MutatingWebhookConfiguration are applied as `helm
template` renders them, but the webhook's URL points where nothing listens (failurePolicy
Fail): a pod kube-apiserver sends to the webhook fails with "failed calling webhook", so each
create says which way it went. Pods are generated around the edge of the simple shape (every
dialect's resources, values in and out of range, requests that differ, other schedulers,
gpuslice.io/ and dialect keys, the node agent's env, GPU init containers). For each, the pod as
the webhook would receive it (the same create, dry run, in a namespace that neither path
serves) goes through admit() and its JSON patch; a pod the policy admitted must equal that.

Real-only: the in-process API server evaluates no admission policy and no matchConditions."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from gpuslice.webhook import admit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))  # the chart's render
# apply_patch: a JSON patch as kube-apiserver applies it
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "webhook"))
from test_chart import render
from test_tenant_guards_on_kube_apiserver import Api, one
from webhook_pods import apply_patch

pytestmark = pytest.mark.kube_backends("kube-apiserver")

POLICY = "t-gpuslice-gpu-pods"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
SERVED, ASIDE = "tenant", "opted-out"  # namespaces: both paths serve the first, neither the other
NOBODY = "https://127.0.0.1:1/mutate"  # no webhook listens here
SIMPLE = {"nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "10"}


def pod(name: str, namespace: str, limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                     "resources": {"limits": limits}}], **spec}}


def went_to_webhook(code: int, reply: Any) -> bool:
    return code == 500 and 'failed calling webhook "pods.gpuslice.io"' in reply.get("message", "")


@contextlib.asynccontextmanager
async def in_server_path(api: Api) -> AsyncIterator[None]:
    """The chart's policy, its binding and its webhook configuration (pointed at NOBODY), in
    force once a simple pod is mutated without the webhook and another one reaches it."""
    objs = copy.deepcopy(render("default"))
    policy = one(objs, "MutatingAdmissionPolicy", POLICY)
    binding = one(objs, "MutatingAdmissionPolicyBinding", POLICY)
    hook = one(objs, "MutatingWebhookConfiguration")
    hook["webhooks"][0]["clientConfig"] = {"url": NOBODY}
    hook["webhooks"][0]["timeoutSeconds"] = 1
    made = [("mutatingadmissionpolicies", policy), ("mutatingadmissionpolicybindings", binding),
            ("mutatingwebhookconfigurations", hook)]
    for ns, labels in ((SERVED, {}), (ASIDE, {"gpuslice.io/webhook": "disabled"})):
        await api.admin_create("/api/v1/namespaces", {
            "metadata": {"name": ns, "labels": labels}})
    for kind, obj in made:
        await api.admin_create(f"{ADMISSION}/{kind}", obj)
    try:
        for _ in range(300):  # kube-apiserver picks both up within about a second
            code, got = await api.create(pod("probe", SERVED, SIMPLE), user=None, dryRun="All")
            other = await api.create(pod("other", SERVED, {"nvidia.com/gpumem": "4Gi"}),
                                     user=None, dryRun="All")
            if code == 201 and got["spec"]["schedulerName"] == "gpuslice-scheduler" and \
                    went_to_webhook(*other):
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"the in-server path never took effect: {code} {got}")
        yield
    finally:
        for kind, obj in reversed(made):
            await api.call("DELETE", f"{ADMISSION}/{kind}/{obj['metadata']['name']}")


# --- pods around the edge of the simple shape ------------------------------------------------

VALUES = ("0", "1", "2", "16", "17", "10", "100", "101", "4096", "1048576", "1048577", "4k",
          "1Gi", "50")
NAMES = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
         "nvidia.com/gpucores", "nvidia.com/priority", "volcano.sh/vgpu-number",
         "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores", "tencent.com/vcuda-core",
         "tencent.com/vcuda-memory", "cpu")
ENV = ([{"name": "FOO", "value": "1"}], [{"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"}],
       [{"name": "GPUSLICE_COMPUTE_PHASE", "value": "0"}],
       [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
       [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
       [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])
LABELS = ({"app": "x"}, {"gpuslice.io/managed": "true"}, {"gpuslice.io/managed": "no"},
          {"gpuslice.io/webhook": "disabled"}, {"gpuslice.io/other": "1"})
ANNOTATIONS = ({"a": "b"}, {"gpuslice.io/node-policy": "spread"},
               {"gpuslice.io/node-policy": "nonsense"}, {"nvidia.com/use-gputype": "H100"},
               {"hami.io/gpu-scheduler-policy": "binpack"}, {"volcano.sh/vgpu-mode": "mig"},
               {"gpuslice.io/assignment": "forged"})
SCHEDULERS = ("default-scheduler", "gpuslice-scheduler", "other-scheduler")
SHAPES = (SIMPLE, {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "8192"},
          {"volcano.sh/vgpu-memory": "2048"}, {"volcano.sh/vgpu-number": "1",
                                               "volcano.sh/vgpu-cores": "0"},
          {"nvidia.com/gpu": "1"}, {"nvidia.com/gpumem-percentage": "100"}, {"cpu": "1"})
INIT = ([{"name": "init", "image": "registry.invalid/pause:1"}],
        [{"name": "init", "image": "registry.invalid/pause:1",
          "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        [{"name": "init", "image": "registry.invalid/pause:1",
          "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}])
# What may take a pod off the simple shape: (what, option), applied by change()
CHANGES = [*(("env", x) for x in ENV), *(("labels", x) for x in LABELS),
           *(("annotations", x) for x in ANNOTATIONS),
           *(("schedulerName", x) for x in SCHEDULERS), ("nodeName", "gpu-node-1"),
           *(("initContainers", x) for x in INIT),
           *(("requests", x) for x in ("same", "other", "only"))]


def base(*shapes: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "containers": [{"name": f"c{i}", "image": "registry.invalid/pause:1",
                        "resources": {"limits": dict(shape)}} for i, shape in enumerate(shapes)]}}


def change(body: dict[str, Any], what: str, option: Any, at: int = 0) -> None:
    """One change of CHANGES to `body` (container `at` for env and requests)."""
    c = body["spec"]["containers"][at]
    limits = c["resources"].get("limits") or {}
    if what == "env":
        c["env"] = copy.deepcopy(option)
    elif what in ("labels", "annotations"):
        body["metadata"][what] = dict(option)
    elif what == "requests" and option == "same":
        c["resources"]["requests"] = dict(limits)
    elif what == "requests" and option == "other" and limits:
        name = sorted(limits)[0]
        c["resources"]["requests"] = {**limits, name: "3" if limits[name] != "3" else "4"}
    elif what == "requests" and option == "only":
        c["resources"] = {"requests": limits}
    elif what != "requests":
        body["spec"][what] = copy.deepcopy(option)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """A pod of simple shapes (a container without a GPU among them, at times), then up to
    three changes, each of which may take it off the simple shape: CHANGES, or a resource of a
    container set to a value of VALUES."""
    shapes = draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=2))
    body = base(*shapes)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(shapes) - 1))
        if draw(st.integers(0, 3)) == 0:
            body["spec"]["containers"][at]["resources"].setdefault("limits", {})[
                draw(st.sampled_from(NAMES[:-1]))] = draw(st.sampled_from(VALUES))
        else:
            change(body, *draw(st.sampled_from(CHANGES)), at=at)
    return body


def in_namespace(body: dict[str, Any], ns: str) -> dict[str, Any]:
    return {**body, "metadata": {**body["metadata"], "namespace": ns}}


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """What admission decides about a pod: its spec, labels and annotations."""
    meta = obj["metadata"]
    return {"spec": obj["spec"], "labels": meta.get("labels"),
            "annotations": meta.get("annotations")}


@pytest.fixture
async def served(kube_api) -> AsyncIterator[Api]:
    """The in-server path in force, for every example of a test (set up once)."""
    api = Api(kube_api)
    async with in_server_path(api):
        yield api


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=pods())
async def test_a_pod_admitted_without_the_webhook_is_as_the_webhook_leaves_it(served, body):
    await check(served, body)


async def check(api: Api, body: dict[str, Any]) -> str:
    """Which way `body` went (to the webhook, refused, admitted in the server), after checking
    that a pod admitted in the server is what the webhook would have made of it."""
    code, got = await api.create(in_namespace(body, SERVED), user=None, dryRun="All")
    if went_to_webhook(code, got):
        return event("to the webhook")  # the webhook decides, as before the in-server path
    seen_code, seen = await api.create(in_namespace(body, ASIDE), user=None, dryRun="All")
    if seen_code != 201:  # kube-apiserver's own validation refuses it, in both namespaces
        assert code == seen_code, (code, got, seen)
        return event("refused by kube-apiserver")
    assert code == 201, (code, got)
    seen["metadata"]["namespace"] = SERVED  # the pod as the webhook would have received it
    decision = admit.admit("CREATE", seen, {"kubernetes.io/metadata.name": SERVED},
                           admit.Options())
    assert decision.allowed, f"admitted without the webhook, which refuses it: " \
                             f"{decision.message}\n{body}"
    assert stored(got) == stored(apply_patch(seen, decision.patch)), body
    return event("admitted in the server" + (", mutated" if decision.patch else ""))


def event(what: str) -> str:
    if currently_in_test_context():
        hypothesis.event(what)
    return what


async def test_every_value_at_the_edge_of_each_range_is_decided_as_the_webhook_decides(served):
    """Each resource of each dialect alone and beside a valid one, with every value of VALUES
    (the ranges' edges and past them): the examples above meet these only by chance."""
    outcomes = set()
    for name in NAMES[:-1]:
        for value in VALUES:
            for beside in ({}, {"nvidia.com/gpumem": "4096"}, {"volcano.sh/vgpu-memory": "1"}):
                limits = {**beside, name: value}
                body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                        "spec": {"containers": [{"name": "c", "image": "registry.invalid/p:1",
                                                 "resources": {"limits": limits}}]}}
                outcomes.add(await check(served, body))
    assert outcomes >= {"to the webhook", "admitted in the server, mutated"}, outcomes


async def test_each_change_alone_is_decided_as_the_webhook_decides(served):
    """Every change of CHANGES on every shape, one at a time, on the GPU container and on a
    container without a GPU beside it."""
    outcomes = set()
    for shape in SHAPES[:-1]:
        for what, option in CHANGES:
            for shapes, at in (((shape,), 0), ((shape, {"cpu": "1"}), 1)):
                body = base(*shapes)
                change(body, what, option, at=at)
                outcomes.add(await check(served, body))
    assert outcomes >= {"to the webhook", "admitted in the server, mutated"}, outcomes

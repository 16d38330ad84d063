"""End to end through the API (either backend; a real kube-apiserver with KUBEBUILDER_ASSETS):
certgen sets the caBundle of a URL-configured webhook, and pods created through the API come
back mutated, denied with our lines, or untouched when their namespace opts out. The
ValidatingAdmissionPolicy of docs/webhook.md needs a real kube-apiserver (CEL)."""

from __future__ import annotations

import asyncio

import pytest
from lightkube import ApiError
from lightkube.models.admissionregistration_v1 import (
    MutatingWebhook,
    RuleWithOperations,
    WebhookClientConfig,
)
from lightkube.models.meta_v1 import LabelSelector, LabelSelectorRequirement, ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Namespace, Pod

from gpuslice.webhook import config
from gpuslice.webhook.certgen import certgen
from gpuslice.webhook.command import Server

OPT_OUT = LabelSelector(matchExpressions=[LabelSelectorRequirement(
    key="gpuslice.io/webhook", operator="NotIn", values=["disabled"])])


def gpu_pod(name: str, limits: dict[str, str], namespace: str = "default") -> Pod:
    return Pod.from_dict({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                 "resources": {"limits": limits}}]}})


@pytest.fixture
async def webhook(kube_api, tmp_path):
    client = kube_api.async_client()
    cfg = config.WebhookConfig(address="127.0.0.1", port=0, cert_file=str(tmp_path / "tls.crt"),
                               key_file=str(tmp_path / "tls.key"), check_namespace_labels=True,
                               bypass_namespaces=["gpu-operator"])
    await certgen(service="unused", namespace="default", ips=["127.0.0.1"],
                  out_dir=str(tmp_path))
    server = Server(cfg, client=kube_api.async_client())
    await server.start()
    await client.create(MutatingWebhookConfiguration(
        metadata=ObjectMeta(name="gpuslice-webhook"), webhooks=[MutatingWebhook(
            name="pods.gpuslice.io", admissionReviewVersions=["v1"], sideEffects="None",
            failurePolicy="Fail", timeoutSeconds=5,
            clientConfig=WebhookClientConfig(url=f"https://127.0.0.1:{server.port}/mutate"),
            rules=[RuleWithOperations(apiGroups=[""], apiVersions=["v1"],
                                      operations=["CREATE"], resources=["pods"])],
            namespaceSelector=OPT_OUT)]))  # no objectSelector, as the chart's
    done = await certgen(service="unused", namespace="default", ips=["127.0.0.1"],
                         out_dir=str(tmp_path), webhook_config="gpuslice-webhook",
                         client=client)
    assert done[1].endswith("updated (1 webhook)")
    for _ in range(100):  # kube-apiserver picks up new webhook configurations within ~1 s
        try:
            probe = await client.create(gpu_pod("probe", {"nvidia.com/gpu": "1"}),
                                        dry_run=True)
        except ApiError as exc:  # still the configuration without certgen's caBundle
            if "failed calling webhook" not in exc.status.message:
                raise
        else:
            if (probe.metadata.labels or {}).get("gpuslice.io/managed") == "true":
                break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("kube-apiserver never called the webhook")
    yield client
    await server.stop()
    await client.close()


async def test_a_gpu_pod_is_stored_as_the_webhook_patched_it(webhook):
    pod = await webhook.create(gpu_pod("train", {"nvidia.com/gpumem": "4096"}))
    assert pod.spec.schedulerName == "gpuslice-scheduler"
    assert pod.metadata.labels["gpuslice.io/managed"] == "true"
    c = pod.spec.containers[0]
    assert c.resources.limits == {"nvidia.com/gpumem": "4096", "nvidia.com/gpu": "1"}
    assert c.env is None, "the webhook adds no env"


async def test_an_invalid_pod_is_refused_with_every_line(webhook):
    with pytest.raises(ApiError) as caught:
        await webhook.create(gpu_pod("bad", {"nvidia.com/gpucores": "150",
                                             "nvidia.com/gpumem": "4Gi"}))
    assert caught.value.status.code == 422
    first, second = caught.value.status.message.splitlines()
    assert first.startswith('admission webhook "pods.gpuslice.io" denied the request: '
                            'container "c": nvidia.com/gpumem=4Gi: ')
    assert second.startswith('container "c": nvidia.com/gpucores=150: above 100')


async def test_a_namespace_that_opts_out_gets_its_pods_untouched(webhook):
    await webhook.create(Namespace(metadata=ObjectMeta(
        name="research", labels={"gpuslice.io/webhook": "disabled"})))
    pod = await webhook.create(gpu_pod("free", {"nvidia.com/gpumem": "4096"}, "research"))
    assert pod.spec.schedulerName == "default-scheduler"
    assert "gpuslice.io/managed" not in (pod.metadata.labels or {})


def _skipping(name: str, how: str, namespace: str = "default") -> Pod:
    pod = gpu_pod(name, {"nvidia.com/gpu": "1"}, namespace)
    if how == "label":
        pod.metadata.labels = {"gpuslice.io/webhook": "disabled"}
    elif how == "scheduler":
        pod.spec.schedulerName = "my-scheduler"
    else:
        pod.spec.nodeName = "gpu-node-1"
    return pod


@pytest.mark.parametrize("how", ["label", "scheduler", "node"])
async def test_a_gpu_pod_that_would_skip_gpuslice_is_refused_outside_bypass_namespaces(webhook,
                                                                                         how):
    """Issue 20, item 2: such a pod would reach a GPU node's kubelet with no assignment."""
    with pytest.raises(ApiError) as caught:
        await webhook.create(_skipping(f"skip-{how}", how))
    assert caught.value.status.code == 422
    assert 'admission webhook "pods.gpuslice.io" denied the request: pod: ' in \
        caught.value.status.message
    await webhook.create(Namespace(metadata=ObjectMeta(name="gpu-operator")))
    pod = await webhook.create(_skipping(f"skip-{how}", how, "gpu-operator"))
    assert "gpuslice.io/managed" not in (pod.metadata.labels or {}), "left alone there"


async def test_the_documented_policy_keeps_placement_annotations_to_gpuslice(kube_api,
                                                                               tmp_path):
    """docs/webhook.md's ValidatingAdmissionPolicy, applied as written: the admin (not a
    gpuslice service account) cannot add an assignment to a pod after creation."""
    import re
    from pathlib import Path

    from lightkube.types import PatchType

    if not kube_api.is_real:
        pytest.skip("the in-process API server does not evaluate ValidatingAdmissionPolicies")
    doc = (Path(__file__).parents[3] / "docs" / "webhook.md").read_text()
    policy = next(b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S)
                  if "ValidatingAdmissionPolicy" in b)
    (tmp_path / "policy.yaml").write_text(policy)
    kube_api.kubectl("apply", "-f", str(tmp_path / "policy.yaml"))
    client = kube_api.async_client()
    try:
        await client.create(gpu_pod("plain", {"cpu": "1"}))
        refused = False
        for _ in range(100):  # the policy takes effect after kube-apiserver type-checks it
            # adding the annotation, then taking it away while the policy was not yet in effect:
            # either change is refused once it is (CI once saw the removal refused)
            for value in ("forged", None):
                try:
                    await client.patch(Pod, "plain", {"metadata": {"annotations": {
                        "gpuslice.io/assignment": value}}}, namespace="default",
                        patch_type=PatchType.MERGE)
                except ApiError as exc:
                    assert "written by gpuslice only" in exc.status.message
                    refused = True
                    break
            if refused:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the policy never refused the forged annotation")
        await client.patch(Pod, "plain", {"metadata": {"annotations": {"team": "a"}}},
                           namespace="default", patch_type=PatchType.MERGE)  # others allowed
    finally:
        # the test tier's reset does not delete policies, and this one binds the admin too;
        # kube-apiserver stops enforcing a deleted policy only when its informer catches up, so
        # wait for that, or the next test meets this policy's denials
        kube_api.kubectl("delete", "-f", str(tmp_path / "policy.yaml"), "--ignore-not-found")
        for _ in range(100):
            try:
                await client.patch(Pod, "plain", {"metadata": {"annotations": {
                    "gpuslice.io/assignment": "forged"}}}, namespace="default",
                    patch_type=PatchType.MERGE)
                break
            except ApiError as exc:
                if exc.status.code == 404:  # the pod was never made: nothing to probe with
                    break
                await asyncio.sleep(0.1)
        for _ in range(100):  # ... and the Binding policy the block also holds
            async with kube_api.http() as http:
                reply = await http.post(
                    "/api/v1/namespaces/default/pods/plain/binding", params={"dryRun": "All"},
                    json={"apiVersion": "v1", "kind": "Binding", "metadata": {
                        "name": "plain", "annotations": {"gpuslice.io/assignment": "x"}},
                        "target": {"kind": "Node", "name": "n"}})
            if reply.status_code not in (403, 422):
                break
            await asyncio.sleep(0.1)
        await client.close()


async def test_a_pod_without_a_gpu_cannot_arrive_with_a_forged_assignment(webhook):
    """Item 1, through the API into the webhook (this configuration has no matchConditions,
    so every pod reaches it, on both backends; the chart's own configuration is tried on the
    real server in test_tenant_guards_on_kube_apiserver.py)."""
    from gpuslice import codec, model

    forged = codec.encode_assignment(model.PodAssignment(node="gpu-node-1", containers=(
        model.ContainerAssignment(container="c", slices=(
            model.GPUSlice(uuid="GPU-0", memory_mib=1 << 20, cores=100),)),)))
    attack = gpu_pod("miner", {"cpu": "1"})
    attack.metadata.labels = {"gpuslice.io/managed": "true"}
    attack.metadata.annotations = {"gpuslice.io/assignment": forged}
    with pytest.raises(ApiError) as caught:
        await webhook.create(attack)
    assert caught.value.status.code == 422
    assert "pod: annotation gpuslice.io/assignment: written by gpuslice" in \
        caught.value.status.message
    assert "pod: label gpuslice.io/managed='true'" in caught.value.status.message


async def test_a_sidecar_cannot_take_every_gpu_of_the_node(webhook):
    """Item 5: a container without a slice naming NVIDIA_VISIBLE_DEVICES=all."""
    from lightkube.models.core_v1 import Container, EnvVar

    attack = gpu_pod("greedy", {"nvidia.com/gpumem": "4096"})
    attack.spec.containers.append(Container(name="sidecar", image="registry.invalid/pause:1",
                                            env=[EnvVar(name="NVIDIA_VISIBLE_DEVICES",
                                                        value="all")]))
    with pytest.raises(ApiError) as caught:
        await webhook.create(attack)
    assert 'container "sidecar": env NVIDIA_VISIBLE_DEVICES=\'all\': the NVIDIA container ' \
        "toolkit would give" in caught.value.status.message
    plain = gpu_pod("hidden", {"cpu": "1"})
    plain.spec.containers[0].env = [EnvVar(name="NVIDIA_VISIBLE_DEVICES", value="void")]
    assert (await webhook.create(plain)).metadata.name == "hidden"

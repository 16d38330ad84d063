"""Attacks on the keys gpuslice believes and on the toolkit's device list, tried on the admission
decision itself: any pod the webhook sees, GPU or not, is denied when it carries a gpuslice.io/*
annotation or label gpuslice did not set, or names NVIDIA_VISIBLE_DEVICES in a container without
a slice. (The chart's ValidatingAdmissionPolicy says the same in kube-apiserver for pods that
never reach the webhook: tests/integration/webhook/test_tenant_guards_on_kube_apiserver.py.)"""

from __future__ import annotations

import json

import pytest
from webhook_pods import admitted, container, gpu_pod

from gpuslice import codec, model
from gpuslice.webhook.admit import Options, Result, admit

OPTIONS = Options()
GPU = container("gpu", limits={"nvidia.com/gpumem": "4096"})
CPU = container("web", limits={"cpu": "1"})


def decide(pod, options=OPTIONS, **kw):
    return admit("CREATE", pod, {}, options, **kw)


def forged(node="gpu-node-1", mib=1 << 20):
    """An assignment as the extender writes one, naming a GPU node, over-large."""
    return codec.encode_assignment(model.PodAssignment(node=node, containers=(
        model.ContainerAssignment(container="web", slices=(
            model.GPUSlice(uuid="GPU-gpu-node-1-0", memory_mib=mib, cores=100),)),)))


# --- item 1: a pod with no GPU must not lock a GPU node ------------------------------------

def test_a_pod_without_a_gpu_cannot_arrive_managed_with_a_forged_assignment():
    pod = gpu_pod(CPU, labels={"gpuslice.io/managed": "true"},
                  annotations={"gpuslice.io/assignment": forged(),
                               "gpuslice.io/bound-at": "2026-11-26T00:00:00.000000Z"})
    decision = decide(pod)
    assert decision.result is Result.DENIED
    assert decision.message.splitlines() == [
        "pod: annotation gpuslice.io/assignment: written by gpuslice when it places the pod; "
        "remove it",
        "pod: annotation gpuslice.io/bound-at: written by gpuslice when it places the pod; "
        "remove it",
        "pod: label gpuslice.io/managed='true': set by gpuslice's webhook on the GPU pods it "
        "admits for its scheduler, and this pod is not one; remove it"]


@pytest.mark.parametrize(("where", "key"), [
    ("annotations", "gpuslice.io/allocated"), ("annotations", "gpuslice.io/inventory"),
    ("annotations", "gpuslice.io/anything-new"), ("labels", "gpuslice.io/managed"),
    ("labels", "gpuslice.io/anything-new")])
@pytest.mark.parametrize("pod_containers", [[CPU], [container(limits={"nvidia.com/gpu": "0"})]],
                         ids=["no GPU resource", "nvidia.com/gpu: 0"])
def test_no_pod_without_a_slice_may_carry_a_gpuslice_key(where, key, pod_containers):
    decision = decide(gpu_pod(*pod_containers, **{where: {key: "x"}}))
    assert decision.result is Result.DENIED, decision
    assert f"{where[:-1]} {key}" in decision.message


def test_a_gpu_pod_left_to_another_scheduler_cannot_carry_an_assignment_either():
    """Before, such a pod was skipped (another scheduler's) without a look at its keys; the
    extender and the node agent would still have believed its assignment."""
    pod = gpu_pod(GPU, labels={"gpuslice.io/managed": "true"},
                  annotations={"gpuslice.io/assignment": forged()})
    pod["spec"]["schedulerName"] = "volcano"
    decision = decide(pod)
    assert decision.result is Result.DENIED
    assert "gpuslice.io/assignment" in decision.message and "gpuslice.io/managed" in \
        decision.message


def test_a_gpu_pod_may_carry_only_the_keys_meant_for_tenants():
    pod = gpu_pod(GPU, labels={"gpuslice.io/webhook": "enabled", "gpuslice.io/team": "a"},
                  annotations={"gpuslice.io/gpu-policy": "spread", "gpuslice.io/node-policy":
                               "binpack", "gpuslice.io/priority-boost": "1"})
    lines = decide(pod).message.splitlines()
    assert lines == [
        "pod: annotation gpuslice.io/priority-boost: gpuslice.io/ annotations are written by "
        "gpuslice only (a pod may set gpuslice.io/node-policy, gpuslice.io/gpu-policy, "
        "gpuslice.io/gang and gpuslice.io/gang-size); remove it",
        "pod: label gpuslice.io/team: gpuslice.io/ labels are set by gpuslice only (a pod may "
        "set gpuslice.io/webhook); remove it"]


def test_what_tenants_may_write_passes_on_any_pod():
    meta = {"labels": {"gpuslice.io/webhook": "enabled"},
            "annotations": {"gpuslice.io/gpu-policy": "spread"}}
    assert decide(gpu_pod(CPU, **meta)).result is Result.ALLOWED
    assert decide(gpu_pod(GPU, **meta)).result is Result.PATCHED


def test_the_managed_label_the_webhook_set_itself_passes_a_second_time():
    """reinvocationPolicy IfNeeded: the webhook sees its own label again."""
    once = admitted(gpu_pod(GPU))
    assert once["metadata"]["labels"]["gpuslice.io/managed"] == "true"
    assert decide(once).result is Result.ALLOWED


def test_keys_that_would_break_the_one_problem_a_line_format_are_quoted():
    decision = decide(gpu_pod(CPU, annotations={"gpuslice.io/x\nfake line": "1"}))
    (line,) = decision.message.splitlines()
    assert line.startswith('pod: annotation "gpuslice.io/x\\nfake line": ')


def test_a_configured_opt_out_label_is_the_only_gpuslice_label_a_tenant_may_set():
    options = Options(opt_out_key="gpuslice.io/admission", opt_out_value="off")
    assert decide(gpu_pod(CPU, labels={"gpuslice.io/admission": "on"}),
                  options).result is Result.ALLOWED
    decision = decide(gpu_pod(CPU, labels={"gpuslice.io/webhook": "on"}), options)
    assert decision.result is Result.DENIED and "gpuslice.io/admission" in decision.message


# --- item 5: NVIDIA_VISIBLE_DEVICES in a container without a slice ---------------------------

def _env(name="NVIDIA_VISIBLE_DEVICES", value="all", **entry):
    return [{"name": name, "value": value, **entry}]


@pytest.mark.parametrize("value", ["all", "0", "0,1", "GPU-aaaa", "", "$(WANTED)", " void"])
def test_a_sidecar_of_a_gpu_pod_cannot_name_gpus_for_the_toolkit(value):
    pod = gpu_pod(GPU, container("sidecar", env=_env(value=value)))
    decision = decide(pod)
    assert decision.result is Result.DENIED
    (line,) = decision.message.splitlines()
    assert line.startswith(f'container "sidecar": env NVIDIA_VISIBLE_DEVICES={value!r}: the '
                           "NVIDIA container toolkit would give this container the GPUs it "
                           "names")


def test_a_pod_without_any_gpu_cannot_take_every_gpu_of_its_node():
    pod = gpu_pod(container("miner", env=_env()))
    pod["spec"]["initContainers"] = [container("prep", env=_env(value="1"))]
    lines = decide(pod).message.splitlines()
    assert [line.split(":")[0] for line in lines] == ['container "prep"', 'container "miner"']


@pytest.mark.parametrize("source", [
    {"configMapKeyRef": {"name": "gpus", "key": "list"}},
    {"secretKeyRef": {"name": "gpus", "key": "list"}},
    {"fieldRef": {"fieldPath": "metadata.annotations['gpus']"}}])
def test_a_device_list_from_value_from_is_denied_since_its_value_is_unknown(source):
    pod = gpu_pod(GPU, container("sidecar", env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                                                  "valueFrom": source}]))
    decision = decide(pod)
    assert decision.result is Result.DENIED
    assert 'container "sidecar": env NVIDIA_VISIBLE_DEVICES from valueFrom:' in \
        decision.message


@pytest.mark.parametrize("value", ["void", "none"])
def test_hiding_the_gpus_is_allowed(value):
    """An image's ENV NVIDIA_VISIBLE_DEVICES=all (the CUDA images set it) is turned off this
    way in a pod without a GPU."""
    assert decide(gpu_pod(container("web", env=_env(value=value)))).result is Result.ALLOWED
    assert decide(gpu_pod(GPU, container("web", env=_env(value=value)))).result is \
        Result.PATCHED


def test_a_slice_container_may_not_set_the_device_list_at_all():
    decision = decide(gpu_pod(container("gpu", limits={"nvidia.com/gpumem": "4096"},
                                        env=_env(value="void"))))
    assert decision.message == ('container "gpu": env NVIDIA_VISIBLE_DEVICES: set by '
                                "gpuslice's node agent for the slice the pod is given; remove "
                                "it from the pod")


def test_variables_that_only_narrow_what_a_container_sees_pass():
    """CUDA_VISIBLE_DEVICES picks among the GPUs the container was given; the library caps by
    UUID whatever it says (docs/shim.md). envFrom keys cannot be seen here (docs/install.md:
    the toolkit setting closes that at the node)."""
    pod = gpu_pod(GPU, container("web", env=_env("CUDA_VISIBLE_DEVICES", "0,1"),
                                 envFrom=[{"configMapRef": {"name": "anything"}}]))
    assert decide(pod).result is Result.PATCHED


def test_other_schedulers_pods_are_held_to_the_device_list_rule_too():
    pod = gpu_pod(GPU, container("web", env=_env()))
    pod["spec"]["schedulerName"] = "volcano"
    assert decide(pod).result is Result.DENIED


def test_the_denial_reads_as_json_safe_text():
    decision = decide(gpu_pod(container("web", env=_env(value="x" * 500))))
    (line,) = decision.message.splitlines()
    assert len(line) <= 300
    json.dumps(decision.message)

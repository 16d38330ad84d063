"""A GPU pod that would skip gpuslice's placement is denied outside bypassNamespaces (issue 20,
item 2): the opt-out label a tenant sets on its own pod, another schedulerName, spec.nodeName."""

from __future__ import annotations

import pytest
from webhook_pods import container, gpu_pod

from gpuslice.webhook.admit import Options, Result, admit
from gpuslice.webhook.config import load

GPU = container(limits={"nvidia.com/gpu": "1"})
BYPASS = Options(bypass_namespaces=frozenset({"gpu-operator"}))


def _skipping(how: str, ns: str = "team") -> dict:
    pod = gpu_pod(GPU, namespace=ns)
    if how == "label":
        pod["metadata"]["labels"] = {"gpuslice.io/webhook": "disabled"}
    elif how == "scheduler":
        pod["spec"]["schedulerName"] = "my-scheduler"
    else:
        pod["spec"]["nodeName"] = "gpu-node-1"
    return pod


@pytest.mark.parametrize(("how", "field"), [
    ("label", "label gpuslice.io/webhook=disabled"),
    ("scheduler", "spec.schedulerName='my-scheduler'"),
    ("node", "spec.nodeName="),
])
def test_a_gpu_pod_that_would_skip_placement_is_denied_with_the_field_and_the_fix(how, field):
    d = admit("CREATE", _skipping(how), {}, BYPASS)
    assert d.result is Result.DENIED
    assert field in d.message and "remove" in d.message
    if how != "node":  # spec.nodeName keeps its own wording (test_admit_guards)
        assert "bypassNamespaces" in d.message and "namespace 'team'" in d.message


@pytest.mark.parametrize("how", ["label", "scheduler", "node"])
def test_the_same_pod_in_a_namespace_the_operator_lists_is_left_alone(how):
    d = admit("CREATE", _skipping(how, ns="gpu-operator"), {}, BYPASS)
    assert d.result is Result.SKIPPED and d.patch == ()


def test_the_request_namespace_wins_over_the_pods_own_field():
    pod = _skipping("label", ns="gpu-operator")  # a body may claim any namespace
    assert admit("CREATE", pod, {}, BYPASS, namespace="team").result is Result.DENIED


def test_a_bypass_namespace_still_refuses_what_no_pod_may_carry():
    pod = _skipping("scheduler", ns="gpu-operator")
    pod["metadata"]["annotations"] = {"gpuslice.io/assignment": "{}"}
    d = admit("CREATE", pod, {}, BYPASS)
    assert d.result is Result.DENIED and "gpuslice.io/assignment" in d.message


def test_a_pod_without_a_gpu_may_still_opt_out_anywhere():
    pod = gpu_pod(container(limits={"cpu": "1"}), labels={"gpuslice.io/webhook": "disabled"})
    assert admit("CREATE", pod, {}, Options()).result is Result.SKIPPED


def test_an_opted_out_namespace_is_the_operators_and_skips_every_pod():
    d = admit("CREATE", _skipping("label"), {"gpuslice.io/webhook": "disabled"}, Options())
    assert d.result is Result.SKIPPED


def test_a_mirror_pod_created_by_its_node_is_admitted_as_written():
    pod = _skipping("node")
    pod["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    d = admit("CREATE", pod, {}, Options(), user="system:node:gpu-node-1")
    assert d.result is Result.ALLOWED
    assert admit("CREATE", pod, {}, Options(), user="alice").result is Result.DENIED, \
        "only a node may create a mirror pod"


def test_bypass_namespaces_come_from_the_config_file(tmp_path):
    f = tmp_path / "webhook.yaml"
    f.write_text("bypassNamespaces: [gpu-operator, batch]\n")
    assert load(str(f)).options().bypass_namespaces == {"gpu-operator", "batch"}
    assert load(None).options().bypass_namespaces == frozenset(), "none by default"

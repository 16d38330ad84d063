"""The chart with webhook.config.dra.enabled (docs/dra.md, "Pods written for HAMi, Volcano or
GPU Manager"): the webhook's ServiceAccount gets what its DRA path calls (slices, templates,
the explainer's pods, claims and events), only then, and its MutatingWebhookConfiguration
says it has side effects except on dryRun (it creates templates)."""

from __future__ import annotations

import base64
import subprocess

import pytest
import yaml
from test_chart import CHART, find, helm

from gpuslice.webhook import config as webhook_config

DRA_RULES = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"],
     "verbs": ["create", "get"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
     "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]


def rendered(*values: str) -> list[dict]:
    done = subprocess.run([helm(), "template", "t", str(CHART), "--namespace",
                           "gpuslice-system", *values], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def test_the_dra_path_gets_its_rules_and_no_side_effects_on_dry_run(tmp_path):
    objs = rendered("--set", "webhook.config.dra.enabled=true",
                    "--set", "webhook.config.dra.defaultPath=dra")
    role = find(objs, "ClusterRole", "-webhook")
    assert role["rules"][1:] == DRA_RULES
    (hook,) = find(objs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["sideEffects"] == "NoneOnDryRun"
    (condition,) = hook["matchConditions"]
    assert "object.spec.resourceClaims.exists(r, has(r.resourceClaimName))" in " ".join(
        condition["expression"].split()), "a pod naming a claim reaches the webhook"
    text = find(objs, "ConfigMap", "-webhook")["data"]["webhook.yaml"]
    (tmp_path / "webhook.yaml").write_text(text)
    cfg = webhook_config.load(str(tmp_path / "webhook.yaml"))
    assert cfg.dra.enabled and cfg.options().dra.default_path == "dra"


def test_without_it_the_webhook_keeps_its_one_rule_and_no_side_effects():
    objs = rendered()
    assert find(objs, "ClusterRole", "-webhook")["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]
    (hook,) = find(objs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["sideEffects"] == "None"
    assert "resourceClaims" not in hook["matchConditions"][0]["expression"]


@pytest.mark.kube_backends("kube-apiserver")
async def test_kube_apiserver_accepts_the_dra_match_condition(kube_api):
    """The CEL of the matchConditions compiles in kube-apiserver v1.36 (a dry-run create)."""
    from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration

    objs = rendered("--set", "webhook.config.dra.enabled=true")
    mwc = find(objs, "MutatingWebhookConfiguration")
    mwc["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(b"unused").decode()
    client = kube_api.async_client()
    try:
        await client.create(MutatingWebhookConfiguration.from_dict(mwc), dry_run=True)
    finally:
        await client.close()

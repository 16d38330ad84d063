"""docs/webhook.md stays true: its MutatingWebhookConfiguration is a valid object whose selectors
use the configured opt-out label, and its key table lists exactly the config's keys."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import kubernetes_validate
import msgspec
import yaml

from gpuslice.webhook.config import WebhookConfig, load

DOC = (Path(__file__).parents[3] / "docs" / "webhook.md").read_text()


def _objects() -> list[dict]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC, re.S)
    return [o for block in blocks for o in yaml.safe_load_all(block)]


def _manifest() -> dict:
    (mwc,) = [o for o in _objects() if o["kind"] == "MutatingWebhookConfiguration"]
    return mwc


def test_every_documented_object_is_valid_for_kubernetes():
    kinds = []
    for obj in _objects():
        kubernetes_validate.validate(obj, "1.32.0", strict=True)
        kinds.append(obj["kind"])
    assert kinds == ["MutatingWebhookConfiguration",
                     *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2]


def test_the_admission_policy_guards_every_placement_annotation():
    from gpuslice.webhook.admit import PLACEMENT_ANNOTATIONS

    (policy,) = [o for o in _objects() if o["kind"] == "ValidatingAdmissionPolicy"
                 and o["metadata"]["name"] == "gpuslice-placement-annotations"]
    expression = policy["spec"]["validations"][0]["expression"]
    assert all(f"'{name}'" in expression for name in PLACEMENT_ANNOTATIONS)


def test_its_selectors_opt_out_with_the_default_label_and_only_pod_creates_are_sent():
    (hook,) = _manifest()["webhooks"]
    cfg = load(None)
    opt_out = {"key": cfg.opt_out_label, "operator": "NotIn", "values": [cfg.opt_out_value]}
    assert opt_out in hook["namespaceSelector"]["matchExpressions"]
    assert "objectSelector" not in hook, "a GPU pod labelled to opt out must reach the webhook"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["admissionReviewVersions"] == ["v1"] and hook["clientConfig"]["service"][
        "path"] == "/mutate"


def _section(title: str) -> str:
    return DOC.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_key_table_lists_every_config_key():
    documented = set(re.findall(r"^\| `([A-Za-z.]+)` \|", _section("Configuration"), re.M))
    keys = set()
    for f in msgspec.structs.fields(WebhookConfig):
        if f.encode_name in ("defaults", "dra"):  # sections: their keys
            keys |= {f"{f.encode_name}.{d.encode_name}" for d in msgspec.structs.fields(f.type)}
        else:
            keys.add(f.encode_name)
    assert documented == keys


def test_the_metric_table_lists_every_metric_served():
    from prometheus_client import CollectorRegistry

    from gpuslice.webhook.metrics import Metrics

    registry = CollectorRegistry()
    Metrics(registry, SimpleNamespace(not_after=0.0, reloads=0))  # type: ignore[arg-type]
    served = {m.name.removesuffix("_total") for m in registry.collect()}
    documented = set(re.findall(r"^\| `(gpuslice_\w+)", _section("Endpoints and metrics"), re.M))
    assert {d.removesuffix("_total") for d in documented} == served

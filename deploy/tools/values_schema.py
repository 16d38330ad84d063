"""Writes deploy/helm/gpuslice/values.schema.json: the chart's own keys, written here, and the
three services' config sections (`scheduler.config`, `webhook.config`, `nodeAgent.config`)
taken from the services' schemas, so the chart cannot accept a key the code would refuse.

    python3 deploy/tools/values_schema.py          # rewrite the file
    python3 deploy/tools/values_schema.py --check  # exit 1 if it is not current (CI test)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from gpuslice.node.settings import NodeConfig
from gpuslice.scheduler.config import SchedulerConfig
from gpuslice.webhook.config import DefaultsConfig, WebhookConfig

OUT = Path(__file__).resolve().parents[1] / "helm" / "gpuslice" / "values.schema.json"

STR: dict[str, Any] = {"type": "string"}
BOOL: dict[str, Any] = {"type": "boolean"}
PORT: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 65535}
MAP: dict[str, Any] = {"type": "object"}
LIST: dict[str, Any] = {"type": "array"}
LEVEL: dict[str, Any] = {"enum": ["debug", "info", "warning", "error"]}


def obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": props,
            "required": sorted(required or props)}


IMAGE = obj({"repository": STR, "tag": STR, "pullPolicy": {"enum": ["Always", "IfNotPresent",
                                                                   "Never"]}})
RESOURCES = obj({"requests": MAP, "limits": MAP}, required=())
PLACEMENT = {"nodeSelector": MAP, "tolerations": LIST, "affinity": MAP,
             "priorityClassName": STR}


def service_defs() -> dict[str, Any]:
    """$defs of the three config schemas; every Struct refuses unknown keys, as the code does."""
    defs: dict[str, Any] = {}
    for schema in (SchedulerConfig, WebhookConfig, NodeConfig, DefaultsConfig):
        got = msgspec.json.schema(schema)
        for name, d in got["$defs"].items():
            if d.get("type") == "object":
                d = {**d, "additionalProperties": False}
            defs[name] = d
    return defs


def schema() -> dict[str, Any]:
    ref = {name: {"$ref": f"#/$defs/{name}"} for name in ("SchedulerConfig", "WebhookConfig",
                                                          "NodeConfig", "DefaultsConfig")}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpuslice chart values (docs/configuration.md)",
        **obj({
            "schedulerName": STR,
            "defaults": ref["DefaultsConfig"],
            "inFlightTimeoutSeconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
            "images": obj({"controlPlane": IMAGE, "nodeAgent": IMAGE, "kubeScheduler": IMAGE}),
            "imagePullSecrets": LIST,
            "scheduler": obj({
                "replicas": {"type": "integer", "minimum": 1}, "port": PORT, "metricsPort": PORT,
                "weight": {"type": "integer", "minimum": 1, "maximum": 100},
                "httpTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m)$"},
                "ignorable": BOOL, "logLevel": LEVEL, "config": ref["SchedulerConfig"],
                "kubeSchedulerArgs": {"type": "array", "items": STR},
                "kubeSchedulerClient": obj({
                    "qps": {"type": "number", "exclusiveMinimum": 0},
                    "burst": {"type": "integer", "minimum": 1}}),
                "resources": obj({"extender": RESOURCES, "kubeScheduler": RESOURCES}),
                **PLACEMENT}),
            "webhook": obj({
                "replicas": {"type": "integer", "minimum": 1}, "port": PORT,
                "failurePolicy": {"enum": ["Fail", "Ignore"]},
                "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
                "optOutLabel": obj({"key": STR, "value": STR}),
                "excludeNamespaces": {"type": "array", "items": STR},
                "logLevel": LEVEL, "config": ref["WebhookConfig"],
                "certificates": obj({
                    "source": {"enum": ["certgen", "cert-manager"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 3650},
                    "certManager": obj({"issuerRef": MAP})}),
                "resources": RESOURCES, **PLACEMENT}),
            "nodeAgent": obj({
                "nodeSelector": MAP, "tolerations": LIST, "runtimeClassName": STR, "port": PORT,
                "logLevel": LEVEL,
                "hostPaths": obj({"devicePlugins": STR, "podResources": STR, "state": STR}),
                "config": ref["NodeConfig"], "resources": RESOURCES, "priorityClassName": STR,
                "ownNodeOnly": BOOL,
                "mig": obj({"enabled": BOOL, "nodeSelector": {**MAP, "minProperties": 1},
                            "profiles": MAP})}),
            "dra": obj({"enabled": BOOL, "extendedResourceName": STR,
                        "defaultPath": {"enum": ["dra", "device-plugin"]},
                        "hostPaths": obj({"plugins": STR, "registry": STR, "cdi": STR})}),
            "placementPolicy": obj({"enabled": BOOL}),
            "metrics": obj({"serviceMonitor": obj({"enabled": BOOL, "interval": STR,
                                                   "labels": MAP})}),
            "rbac": obj({"create": BOOL}),
        }),
        "$defs": service_defs(),
    }


def render() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    text = render()
    if sys.argv[1:] == ["--check"]:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            sys.exit(f"{OUT} is not current: run python3 deploy/tools/values_schema.py")
    else:
        OUT.write_text(text)

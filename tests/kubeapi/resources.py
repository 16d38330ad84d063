"""The resource types the test API server serves, and the discovery documents built from them.
Owns: the table (group, version, plural, kind, scope, subresources), /api, /apis, /api/v1 and
/apis/<group>/<version> documents good enough for kubectl and lightkube, and an OpenAPI v3
skeleton (paths and their GVKs, no schemas) from which kubectl learns that the server does
field validation itself, so it does not need schemas to validate client-side.
Does not: hold objects (store.py) or route requests (server.py).
Adding a type is one row in RESOURCES; nothing else knows the list.
Tests: tests/integration/kubeapi/test_kubectl_against_test_server.py (discovery through kubectl)"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    singular: str = field(default="")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How error messages name the type: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "pods", "Pod", True, ("status", "binding"), ("po",)),
    ResourceType("", "v1", "nodes", "Node", False, ("status",), ("no",)),
    ResourceType("", "v1", "namespaces", "Namespace", False, ("status",), ("ns",)),
    ResourceType("", "v1", "events", "Event", True, (), ("ev",)),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, (), ("cm",)),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, (), ("ev",)),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration", False,
    ),
    ResourceType(
        "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration", False,
    ),
    ResourceType("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    ResourceType("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, ("status",)),
    ResourceType("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate",
                 True),
    ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
)

BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (rt.group, rt.version, rt.plural): rt for rt in RESOURCES
}


def _resource_list(group: str, version: str) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for rt in RESOURCES:
        if (rt.group, rt.version) != (group, version):
            continue
        items.append({
            "name": rt.plural, "singularName": rt.singular or rt.kind.lower(),
            "namespaced": rt.namespaced, "kind": rt.kind, "verbs": VERBS,
            **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
        })
        for sub in rt.subresources:
            verbs = ["create"] if sub == "binding" else ["get", "patch", "update"]
            kind = "Binding" if sub == "binding" else rt.kind
            items.append({"name": f"{rt.plural}/{sub}", "singularName": "",
                          "namespaced": rt.namespaced, "kind": kind, "verbs": verbs})
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


def _groups() -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for rt in RESOURCES:
        if rt.group and (rt.group, rt.version) not in seen:
            seen.append((rt.group, rt.version))
    return seen


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}


def api_group_list() -> dict[str, Any]:
    groups = []
    for group, version in _groups():
        gv = {"groupVersion": f"{group}/{version}", "version": version}
        groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str) -> dict[str, Any] | None:
    for g in api_group_list()["groups"]:
        if g["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **g}
    return None


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    if group and (group, version) not in _groups():
        return None
    if not group and version != "v1":
        return None
    return _resource_list(group, version)


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_index() -> dict[str, Any]:
    gvs = [("", "v1"), *_groups()]
    return {"paths": {_gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}"}
                      for g, v in gvs}}


def openapi_v3(path: str) -> dict[str, Any] | None:
    """The document for one group-version: each object path with its PATCH operation (what
    kubectl reads to see `fieldValidation` is supported), no schemas."""
    found = [rt for rt in RESOURCES if _gv_path(rt.group, rt.version) == path]
    if not found:
        return None
    paths = {}
    for rt in found:
        ns = "/namespaces/{namespace}" if rt.namespaced else ""
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        param = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}
        operation = {"x-kubernetes-group-version-kind": gvk, "parameters": [param]}
        paths[f"/{path}{ns}/{rt.plural}/{{name}}"] = {"patch": operation, "put": operation}
        paths[f"/{path}{ns}/{rt.plural}"] = {"post": operation}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.36.0"},
            "paths": paths}

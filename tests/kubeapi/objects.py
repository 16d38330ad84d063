"""Per-kind rules of the test API server: defaults on create, validation (422), what an update
may change, which part a subresource writes, grace periods and managedFields.
Owns: the Pod rules a gpuslice component can trip over on a real server: defaults the
scheduler's extender bodies show (schedulerName, tolerations, requests from limits, phase,
qosClass), extended-resource validation (whole numbers, requests equal limits), an
immutable spec (only images, tolerations, activeDeadlineSeconds and schedulingGates change),
status written only through /status. Namespaces get their name label and phase.
Does not: store anything (store.py). managedFields list one entry per manager and operation
with the fields of that manager's last write (the real server tracks ownership per field).
Tests: tests/integration/kubeapi/test_resource_versions_and_conflicts.py and
test_object_lifecycle.py"""

from __future__ import annotations

import base64
import functools
import json
import re
import time
from typing import Any

from . import dra_validation, errors
from .resources import ResourceType

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (field, reason, message)

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")
_NATIVE = ("cpu", "memory", "ephemeral-storage", "storage", "pods")
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates",
                     "terminationGracePeriodSeconds")
_BOOKKEEPING = ("name", "namespace", "uid", "resourceVersion", "generation",
                "creationTimestamp", "managedFields", "deletionTimestamp",
                "deletionGracePeriodSeconds", "selfLink")
POD_DEFAULTS = {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst", "securityContext": {},
                "schedulerName": "default-scheduler", "priority": 0,
                "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"}
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]


def now_rfc3339() -> str:
    """Now in UTC to the second, as metadata timestamps are (formatted once a second)."""
    return _rfc3339(int(time.time()))


@functools.lru_cache(maxsize=1)
def _rfc3339(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def default(rt: ResourceType, obj: Obj) -> Obj:
    """Scheme defaults, applied to every object the server decodes (create and update)."""
    if rt.kind == "Secret":
        return {**obj, "type": obj.get("type") or "Opaque"}
    if rt.kind != "Pod":
        return obj
    spec = dict(obj.get("spec") or {})
    for kind in ("initContainers", "containers"):
        if isinstance(spec.get(kind), list):
            spec[kind] = [_default_container(c) for c in spec[kind] if isinstance(c, dict)]
    return {**obj, "spec": {**POD_DEFAULTS, **spec}}


def admit(rt: ResourceType, obj: Obj) -> Obj:
    """Built-in admission before webhooks: DefaultTolerationSeconds on new pods."""
    if rt.kind != "Pod":
        return obj
    spec = dict(obj.get("spec") or {})
    tolerations = list(spec.get("tolerations") or [])
    for default in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] and t.get("effect") in (None, "NoExecute")
                   for t in tolerations):
            tolerations.append(default)
    return {**obj, "spec": {**spec, "tolerations": tolerations}}


def prepare_create(rt: ResourceType, obj: Obj) -> Obj:
    """What only creation does after admission: fresh status, namespace bookkeeping."""
    if rt.kind == "Pod":
        spec = obj.get("spec") or {}
        return {**obj, "status": {"phase": "Pending", "qosClass": _qos(spec)}}
    if rt.kind == "Namespace":
        name = obj["metadata"].get("name", "")
        labels = {**(obj["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": name}
        return {**obj, "metadata": {**obj["metadata"], "labels": labels},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
    return obj


def _default_container(c: Obj) -> Obj:
    image = str(c.get("image", ""))
    latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
    out = {"terminationMessagePath": "/dev/termination-log",
           "terminationMessagePolicy": "File",
           "imagePullPolicy": "Always" if latest and "@" not in image else "IfNotPresent", **c}
    res = dict(c.get("resources") or {})
    limits = res.get("limits") or {}
    if limits:  # requests default to limits, resource by resource
        res["requests"] = {**limits, **(res.get("requests") or {})}
    out["resources"] = res
    return out


def _qos(spec: Obj) -> str:
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    guaranteed, any_set = True, False
    for c in containers:
        res = c.get("resources") or {}
        for name in ("cpu", "memory"):
            lim, req = (res.get("limits") or {}).get(name), (res.get("requests") or {}).get(name)
            any_set = any_set or lim is not None or req is not None
            guaranteed = guaranteed and lim is not None and (req is None or req == lim)
    return "BestEffort" if not any_set else "Guaranteed" if guaranteed else "Burstable"


def validate(rt: ResourceType, obj: Obj, *, stored_spec: bool = False) -> None:
    """Raise 422 Invalid listing every problem found, as field.ErrorList does.
    `stored_spec`: the spec equals the stored object's, which passed when it was written."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    causes: list[Cause] = _validate_meta(rt, meta)
    if rt.kind == "Pod" and not stored_spec:
        causes += _validate_pod_spec(obj.get("spec"))
    if rt.kind == "Secret":
        causes += _validate_secret_data(obj.get("data") or {})
    if rt.kind == "ResourceSlice":
        causes += [(field, "FieldValueInvalid", message)
                   for field, message in dra_validation.slice_problems(obj)]
    if causes:
        raise errors.invalid(rt, name, causes)


def _validate_meta(rt: ResourceType, meta: Obj) -> list[Cause]:
    causes: list[Cause] = []
    name = meta.get("name")
    pattern = _LABEL if rt.kind == "Namespace" else _SUBDOMAIN
    if not name:
        causes.append(("metadata.name", "FieldValueRequired",
                       "Required value: name or generateName is required"))
    elif not isinstance(name, str) or len(name) > 253 or not pattern.match(name):
        causes.append(("metadata.name", "FieldValueInvalid",
                       f'Invalid value: "{name}": a lowercase RFC 1123 '
                       f"{'label' if pattern is _LABEL else 'subdomain'} must consist of lower "
                       "case alphanumeric characters, '-' or '.', and must start and end with "
                       "an alphanumeric character"))
    for key, value in (meta.get("labels") or {}).items():
        if not _qualified_name(key):
            causes.append(("metadata.labels", "FieldValueInvalid",
                           f'Invalid value: "{key}": name part must consist of alphanumeric '
                           "characters, '-', '_' or '.'"))
        if not isinstance(value, str) or len(value) > 63 or (value and not _NAME.match(value)):
            causes.append(("metadata.labels", "FieldValueInvalid",
                           f'Invalid value: "{value}": a valid label must be an empty string '
                           "or consist of alphanumeric characters, '-', '_' or '.', and must "
                           "start and end with an alphanumeric character"))
    annotations = meta.get("annotations") or {}
    for key, value in annotations.items():
        if not _qualified_name(key):
            causes.append(("metadata.annotations", "FieldValueInvalid",
                           f'Invalid value: "{key}": name part must consist of alphanumeric '
                           "characters, '-', '_' or '.'"))
        if not isinstance(value, str):
            causes.append((f"metadata.annotations[{key}]", "FieldValueInvalid",
                           "Invalid value: annotation values must be strings"))
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 256 * 1024:
        causes.append(("metadata.annotations", "FieldValueTooLong",
                       "Too long: must have at most 262144 bytes"))
    return causes


def _qualified_name(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def _validate_secret_data(data: Obj) -> list[Cause]:
    causes: list[Cause] = []
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except ValueError:
            causes.append((f"data[{key}]", "FieldValueInvalid",
                           "Invalid value: illegal base64 data"))
    return causes


def _validate_pod_spec(spec: Any) -> list[Cause]:
    if not isinstance(spec, dict):
        return [("spec", "FieldValueRequired", "Required value")]
    causes: list[Cause] = []
    if not spec.get("containers"):
        causes.append(("spec.containers", "FieldValueRequired", "Required value"))
    seen: set[str] = set()
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            path = f"spec.{kind}[{i}]"
            name = c.get("name") if isinstance(c, dict) else None
            if not name:
                causes.append((f"{path}.name", "FieldValueRequired", "Required value"))
            elif name in seen:
                causes.append((f"{path}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
            elif not _LABEL.match(name) or len(name) > 63:
                causes.append((f"{path}.name", "FieldValueInvalid",
                               f'Invalid value: "{name}": a lowercase RFC 1123 label must '
                               "consist of lower case alphanumeric characters or '-'"))
            seen.add(name or "")
            if isinstance(c, dict):
                if not c.get("image"):
                    causes.append((f"{path}.image", "FieldValueRequired", "Required value"))
                causes += _validate_resources(c.get("resources") or {}, f"{path}.resources")
    return causes


def _validate_resources(res: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    for which, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            text = str(value)
            where = f"{path}.{which}[{name}]"
            if not _QUANTITY.match(text):
                causes.append((where, "FieldValueInvalid", f'Invalid value: "{text}": quantities '
                               "must match the regular expression "
                               "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
            elif _extended(name) and not re.fullmatch(r"\+?\d+", text):
                causes.append((where, "FieldValueInvalid",
                               f'Invalid value: "{text}": must be an integer'))
    for name, value in requests.items():
        if not _extended(name):
            continue
        if name not in limits:
            causes.append((f"{path}.limits", "FieldValueForbidden",
                           "Forbidden: Limit must be set for non overcommitable resources"))
        elif str(limits[name]) != str(value):
            causes.append((f"{path}.requests[{name}]", "FieldValueInvalid",
                           f'Invalid value: "{value}": must be equal to {name} limit of '
                           f"{limits[name]}"))
    return causes


def _extended(name: str) -> bool:
    return "/" in name and not name.split("/")[0].endswith("kubernetes.io") and \
        name not in _NATIVE and not name.startswith("requests.")


def check_update(rt: ResourceType, old: Obj, new: Obj) -> None:
    if rt.kind != "Pod":
        return
    if _frozen_pod_spec(old.get("spec") or {}) != _frozen_pod_spec(new.get("spec") or {}):
        raise errors.invalid(rt, old["metadata"]["name"], [(
            "spec", "FieldValueForbidden",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
            "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
            "(allow it to be set to 1 if it was previously negative)")])


def _frozen_pod_spec(spec: Obj) -> Obj:
    frozen = {k: v for k, v in spec.items() if k not in _MUTABLE_POD_SPEC}
    for kind in ("initContainers", "containers"):
        if isinstance(frozen.get(kind), list):
            frozen[kind] = [{k: v for k, v in c.items() if k != "image"}
                            for c in frozen[kind] if isinstance(c, dict)]
    return frozen


def merge_subresource(rt: ResourceType, old: Obj, new: Obj, subresource: str) -> Obj:
    """What a write may change: /status changes only status; the main resource never does
    (for types with a status subresource)."""
    if "status" not in rt.subresources:
        return new
    if subresource == "status":
        merged = {**old, "status": new.get("status")}
        return {k: v for k, v in merged.items() if v is not None}
    return {k: v for k, v in {**new, "status": old.get("status")}.items() if v is not None}


def grace_period(rt: ResourceType, obj: Obj, requested: Any) -> int:
    """Seconds a deletion waits for a kubelet: only bound pods wait (there is none here, so a
    bound pod stays terminating until deleted again with gracePeriodSeconds=0)."""
    if rt.kind != "Pod" or not (obj.get("spec") or {}).get("nodeName"):
        return 0
    if requested is not None:
        return max(0, int(requested))
    return int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))


def with_managed_fields(meta: Obj, obj: Obj, manager: str, operation: str,
                        subresource: str = "") -> Obj:
    """`meta` with the entry of `manager` replaced by the fields of `obj` (what it sent)."""
    entry: Obj = {
        "manager": manager or "unknown", "operation": operation,
        "apiVersion": obj.get("apiVersion", "v1"),
        "time": now_rfc3339(), "fieldsType": "FieldsV1",
        "fieldsV1": _fields_v1(obj, subresource),
    }
    if subresource:
        entry["subresource"] = subresource
    kept = [e for e in meta.get("managedFields") or [] if (
        e.get("manager"), e.get("operation"), e.get("subresource", "")) != (
        entry["manager"], operation, subresource)]
    return {**meta, "managedFields": [*kept, entry]}


def _fields_v1(obj: Obj, subresource: str) -> Obj:
    fields: Obj = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status") != (subresource == "status"):
            continue
        if key == "metadata":
            value = {k: v for k, v in value.items() if k not in _BOOKKEEPING}
            if not value:
                continue
        fields[f"f:{key}"] = _owned(value, top=True)
    return fields


def _owned(value: Any, top: bool = False) -> Obj:
    if isinstance(value, dict) and value:
        out: Obj = {} if top else {".": {}}
        for k, v in value.items():  # most values are leaves: {} without a call
            if k[:1] != "$":
                out["f:" + k] = _owned(v) if v and isinstance(v, dict | list) else {}
        return out
    if isinstance(value, list) and value and all(isinstance(i, dict) for i in value):
        key = next((k for k in ("name", "type", "containerPort", "mountPath")
                    if all(k in i for i in value)), None)
        if key:
            return {".": {}, **{"k:" + json.dumps({key: i[key]}, separators=(",", ":")):
                                _owned(i) for i in value}}
    return {}

"""Per-kind rules of the test API server: defaults on create, validation (422), what an update
may change, which part a subresource writes, graceful deletion and managedFields.
Owns: what the real decoder does to every body (quantities stored canonically, MicroTimes in
UTC, the zero values and defaults of Pods, Nodes, Secrets, webhook configurations and DRA
objects), the Pod rules a gpuslice component can trip over on a real server: defaults the
scheduler's extender bodies show (schedulerName, tolerations, requests from limits, phase,
qosClass), resource validation as validateResourceRequirements (by value: non-negative,
whole numbers and requests equal to limits for extended resources), an immutable spec
(only images, tolerations, activeDeadlineSeconds and schedulingGates change), status written
only through /status, rest.BeforeDelete's grace periods. Namespaces get their name label and
phase.
Does not: store anything (store.py). managedFields list one entry per manager and operation
with the fields of that manager's last write (the real server tracks ownership per field).
Tests: tests/integration/kubeapi/test_resource_versions_and_conflicts.py and
test_object_lifecycle.py"""

from __future__ import annotations

import base64
import calendar
import functools
import json
import re
import time
from typing import Any

from . import dra_validation, errors, microtime, quantity
from .quantity import QuantityError
from .resources import ResourceType

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (field, reason, message)

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_INTEGER_RESOURCES = frozenset({
    "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps",
    "persistentvolumeclaims", "services.nodeports", "services.loadbalancers"})
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
    """What decoding does to every object the server reads (create and update): scheme
    defaults, quantities in the text a real server stores ("3000" is "3k"), MicroTimes checked
    and in UTC. A value the real decoder refuses is a 400, worded as its."""
    kind = rt.kind
    try:
        if kind == "Pod":
            return _default_pod(obj)
        if kind == "Node":
            return _default_node(obj)
        if kind in _DRA_DEFAULTS:
            return _DRA_DEFAULTS[kind](obj)
        if kind == "Secret":
            return _default_secret(obj)
        if kind == "Lease":
            return _micro_times(obj, "spec", ("acquireTime", "renewTime"))
        if kind == "Event":
            return _default_event(rt, obj)
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            return _default_webhooks(obj, mutating=kind[0] == "M")
    except (QuantityError, microtime.ParseError) as e:
        raise errors.bad_request(f'{kind} in version "{rt.version}" cannot be handled as a '
                                 f"{kind}: {e}") from None
    return obj


def _default_pod(obj: Obj) -> Obj:
    spec = dict(obj.get("spec") or {})
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        if isinstance(spec.get(kind), list):
            spec[kind] = [_default_container(c) for c in spec[kind] if isinstance(c, dict)]
    if isinstance(spec.get("resources"), dict):  # pod-level resources
        spec["resources"] = _resources(spec["resources"])
    status = obj.get("status")
    if isinstance(status, dict) and status.get("conditions"):
        status = {**status, "conditions": _conditions(status["conditions"], _POD_CONDITION)}
        return {**obj, "spec": {**POD_DEFAULTS, **spec}, "status": status}
    return {**obj, "spec": {**POD_DEFAULTS, **spec}}


def _default_node(obj: Obj) -> Obj:
    """SetDefaults_NodeStatus (allocatable is the capacity unless given), the zero values a
    Go NodeStatus always shows, conditions with their null times, ResourceLists stored."""
    status = obj.get("status")
    status = dict(status) if isinstance(status, dict) else {}
    for name in ("capacity", "allocatable"):
        if isinstance(status.get(name), dict):
            status[name] = _quantities(status[name], milli=True)
    if "allocatable" not in status and isinstance(status.get("capacity"), dict):
        status["allocatable"] = status["capacity"]
    if status.get("conditions"):
        status["conditions"] = _conditions(status["conditions"], _NODE_CONDITION)
    status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 0}})
    status.setdefault("nodeInfo", _NODE_INFO)
    return {**obj, "status": status}


_NODE_INFO = {k: "" for k in ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage",
                              "containerRuntimeVersion", "kubeletVersion", "kubeProxyVersion",
                              "operatingSystem", "architecture")}
_NODE_CONDITION = {"lastHeartbeatTime": None, "lastTransitionTime": None}
_POD_CONDITION = {"lastProbeTime": None, "lastTransitionTime": None}


def _conditions(conditions: Any, times: Obj) -> Any:
    """Conditions as Go marshals them: the metav1.Time fields a writer left out are null."""
    if not isinstance(conditions, list):
        return conditions
    return [{**times, **c} if isinstance(c, dict) and not times.keys() <= c.keys() else c
            for c in conditions]


def _quantities(values: Any, *, milli: bool = False) -> Any:
    """A map of quantities as stored: canonical text, keys sorted (Go marshals maps so)."""
    if not isinstance(values, dict):
        return values
    return {k: quantity.stored(values[k], milli=milli) for k in sorted(values)}


def _resources(res: Obj) -> Obj:
    out = dict(res)
    for which in ("limits", "requests"):
        if isinstance(out.get(which), dict):
            out[which] = _quantities(out[which], milli=True)
    return out


def _default_secret(obj: Obj) -> Obj:
    """stringData is merged into data (base64) on write and never stored."""
    out = {**obj, "type": obj.get("type") or "Opaque"}
    strings = out.pop("stringData", None)
    if isinstance(strings, dict) and strings:
        out["data"] = {**(out.get("data") or {}), **{
            k: base64.b64encode(str(v or "").encode()).decode() for k, v in strings.items()}}
    return out


def _micro_times(obj: Obj, section: str | None, names: tuple[str, ...]) -> Obj:
    """metav1.MicroTime fields: exactly six fractional digits, returned in UTC."""
    part = obj.get(section) if section else obj
    if not isinstance(part, dict) or not any(isinstance(part.get(n), str) for n in names):
        return obj
    part = {**part, **{n: microtime.parse(part[n]) for n in names
                       if isinstance(part.get(n), str)}}
    return {**obj, section: part} if section else part


def _default_event(rt: ResourceType, obj: Obj) -> Obj:
    if rt.group:  # events.k8s.io/v1
        obj = {"deprecatedSource": {}, "deprecatedFirstTimestamp": None,
               "deprecatedLastTimestamp": None, **obj}
    else:
        obj = {"eventTime": None, "reportingComponent": "", "reportingInstance": "", **obj}
    obj = _micro_times(obj, None, ("eventTime",))
    if isinstance(obj.get("series"), dict):
        obj = _micro_times(obj, "series", ("lastObservedTime",))
    return obj


def _default_webhooks(obj: Obj, *, mutating: bool) -> Obj:
    hooks = obj.get("webhooks")
    if not isinstance(hooks, list):
        return obj
    defaults = {"failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {},
                "objectSelector": {}, "timeoutSeconds": 10,
                **({"reinvocationPolicy": "Never"} if mutating else {})}
    return {**obj, "webhooks": [{**defaults, **h} if isinstance(h, dict) else h
                                for h in hooks]}


def _default_slice(obj: Obj) -> Obj:
    """ResourceSlice: every quantity of devices and counters, as stored."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    spec = dict(spec)
    if isinstance(spec.get("devices"), list):
        spec["devices"] = [_device(d) for d in spec["devices"]]
    if isinstance(spec.get("sharedCounters"), list):
        spec["sharedCounters"] = [_counter_set(c) for c in spec["sharedCounters"]]
    return {**obj, "spec": spec}


def _device(device: Any) -> Any:
    if not isinstance(device, dict):
        return device
    out = dict(device)
    if isinstance(out.get("capacity"), dict):
        out["capacity"] = {name: _capacity(c) for name, c in sorted(out["capacity"].items())}
    if isinstance(out.get("consumesCounters"), list):
        out["consumesCounters"] = [_counter_set(c) for c in out["consumesCounters"]]
    return out


def _capacity(cap: Any) -> Any:
    if not isinstance(cap, dict):
        return cap
    out = dict(cap)
    if "value" in out:
        out["value"] = quantity.stored(out["value"])
    policy = out.get("requestPolicy")
    if isinstance(policy, dict):
        policy = dict(policy)
        if "default" in policy:
            policy["default"] = quantity.stored(policy["default"])
        if isinstance(policy.get("validRange"), dict):
            policy["validRange"] = {k: quantity.stored(v) if k in ("min", "max", "step") else v
                                    for k, v in policy["validRange"].items()}
        if isinstance(policy.get("validValues"), list):
            policy["validValues"] = [quantity.stored(v) for v in policy["validValues"]]
        out["requestPolicy"] = policy
    return out


def _counter_set(counters: Any) -> Any:
    if not isinstance(counters, dict) or not isinstance(counters.get("counters"), dict):
        return counters
    return {**counters, "counters": {
        name: {**c, "value": quantity.stored(c["value"])} if isinstance(c, dict) and
        "value" in c else c for name, c in sorted(counters["counters"].items())}}


def _default_claim(obj: Obj) -> Obj:
    obj = {**obj, "spec": _claim_spec(obj.get("spec"))}
    status = obj.get("status")
    devices = ((status or {}).get("allocation") or {}).get("devices") if isinstance(
        status, dict) and isinstance(status.get("allocation"), dict) else None
    if isinstance(devices, dict) and isinstance(devices.get("results"), list):
        results = [{**r, "consumedCapacity": _quantities(r["consumedCapacity"])}
                   if isinstance(r, dict) and isinstance(r.get("consumedCapacity"), dict)
                   else r for r in devices["results"]]
        allocation = {**status["allocation"], "devices": {**devices, "results": results}}
        obj["status"] = {**status, "allocation": allocation}
    return obj


def _default_claim_template(obj: Obj) -> Obj:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    return {**obj, "spec": {"metadata": {}, **spec, "spec": _claim_spec(spec.get("spec"))}}


def _claim_spec(spec: Any) -> Any:
    """SetDefaults_ExactDeviceRequest / _DeviceSubRequest: ExactCount of 1; quantities."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict) or not isinstance(devices.get("requests"), list):
        return spec
    requests = []
    for request in devices["requests"]:
        if isinstance(request, dict):
            request = dict(request)
            if isinstance(request.get("exactly"), dict):
                request["exactly"] = _exactly(request["exactly"])
            if isinstance(request.get("firstAvailable"), list):
                request["firstAvailable"] = [_exactly(r) if isinstance(r, dict) else r
                                             for r in request["firstAvailable"]]
        requests.append(request)
    return {**spec, "devices": {**devices, "requests": requests}}


def _exactly(request: Obj) -> Obj:
    out = dict(request)
    mode = out.get("allocationMode") or "ExactCount"
    out["allocationMode"] = mode
    if mode == "ExactCount" and not out.get("count"):
        out["count"] = 1
    capacity = out.get("capacity")
    if isinstance(capacity, dict) and isinstance(capacity.get("requests"), dict):
        out["capacity"] = {**capacity, "requests": _quantities(capacity["requests"])}
    if isinstance(out.get("tolerations"), list):
        out["tolerations"] = [{"operator": "Equal", **t} if isinstance(t, dict) else t
                              for t in out["tolerations"]]
    return out


_DRA_DEFAULTS = {"ResourceSlice": _default_slice, "ResourceClaim": _default_claim,
                 "ResourceClaimTemplate": _default_claim_template}
GENERATION = frozenset({"Pod", "ResourceSlice", "DeviceClass", "MutatingWebhookConfiguration",
                        "ValidatingWebhookConfiguration"})
"""The kinds whose metadata.generation kube-apiserver keeps (1 on create, +1 on a spec
change or a graceful deletion)."""


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
    if rt.kind == "ResourceClaim":  # status is written through /status only
        return {**obj, "status": {}}
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
    res = _resources(c.get("resources") or {})
    limits = res.get("limits") or {}
    if limits:  # requests default to limits, resource by resource
        requests = res.get("requests") or {}
        res["requests"] = {k: requests.get(k, limits.get(k)) for k in sorted({*limits,
                                                                             *requests})}
    out["resources"] = res
    if isinstance(c.get("ports"), list):
        out["ports"] = [{**p, "protocol": p.get("protocol") or "TCP"} if isinstance(p, dict)
                        else p for p in c["ports"]]
    return out


def _qos(spec: Obj) -> str:
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    guaranteed, any_set = True, False
    for c in containers:
        res = c.get("resources") or {}
        for name in ("cpu", "memory"):
            lim, req = (res.get("limits") or {}).get(name), (res.get("requests") or {}).get(name)
            any_set = any_set or lim is not None or req is not None
            guaranteed = guaranteed and lim is not None and (
                req is None or quantity.value_of(req) == quantity.value_of(lim))
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
    if rt.kind == "Node":
        status = obj.get("status") or {}
        for which in ("capacity", "allocatable"):
            for name, value in (status.get(which) or {}).items():
                causes += _quantity_value(name, value, f"status.{which}.{name}")
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
    """validateResourceRequirements: values, then requests against limits."""
    causes: list[Cause] = []
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    for name, value in limits.items():
        causes += _quantity_value(name, value, f"{path}.limits[{name}]")
    for name, value in requests.items():
        causes += _quantity_value(name, value, f"{path}.requests[{name}]")
        overcommit = _native(name) and not name.startswith("hugepages-")
        if name in limits:
            diff = _cmp(quantity.value_of(value), quantity.value_of(limits[name]))
            if diff and not overcommit:
                causes.append((f"{path}.requests", "FieldValueInvalid",
                               f'Invalid value: "{value}": must be equal to {name} limit of '
                               f"{limits[name]}"))
            elif diff > 0:
                causes.append((f"{path}.requests", "FieldValueInvalid",
                               f'Invalid value: "{value}": must be less than or equal to '
                               f"{name} limit of {limits[name]}"))
        elif not overcommit:
            causes.append((f"{path}.limits", "FieldValueRequired",
                           "Required value: Limit must be set for non overcommitable resources"))
    return causes


def _quantity_value(name: str, value: Any, where: str) -> list[Cause]:
    """ValidateResourceQuantityValue: not negative; whole for integer resources."""
    mantissa, exp = quantity.value_of(value)
    causes: list[Cause] = []
    if mantissa < 0:
        causes.append((where, "FieldValueInvalid",
                       f'Invalid value: "{value}": must be greater than or equal to 0'))
    if (name in _INTEGER_RESOURCES or _extended(name)) and exp < 0:
        causes.append((where, "FieldValueInvalid", f'Invalid value: "{value}": must be an '
                                                   "integer"))
    return causes


def _cmp(a: tuple[int, int], b: tuple[int, int]) -> int:
    (ma, ea), (mb, eb) = a, b
    if ea > eb:
        ma *= 10 ** (ea - eb)
    else:
        mb *= 10 ** (eb - ea)
    return (ma > mb) - (ma < mb)


def _native(name: str) -> bool:
    """IsNativeResource: no domain, or a kubernetes.io one (requests may be below limits for
    these, hugepages aside)."""
    return "/" not in name or "kubernetes.io/" in name


@functools.lru_cache(maxsize=1024)
def _extended(name: str) -> bool:
    """IsExtendedResourceName."""
    return not _native(name) and not name.startswith("requests.") and \
        _qualified_name("requests." + name)


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


RETURN_DELETED = frozenset({"Pod", "Namespace", "ResourceSlice", "ResourceClaim",
                            "ResourceClaimTemplate", "DeviceClass"})
"""Kinds whose DELETE answers with the object (the others answer with a Status)."""
PENDING: Obj = {}
"""graceful_deletion's answer for a pod already terminating that the request cannot hurry."""


def graceful_deletion(rt: ResourceType, obj: Obj, requested: int | None) -> Obj | None:
    """rest.BeforeDelete for pods (the only graceful kind served): `obj` with its
    deletionTimestamp and grace period set (None: delete it now, PENDING: leave it be).
    A pod that is not bound, or has finished, goes at once (grace 0); there is no kubelet, so
    a bound pod stays Terminating until deleted again with gracePeriodSeconds=0."""
    if rt.kind != "Pod":
        return None
    meta, now = obj["metadata"], time.time()
    if meta.get("deletionTimestamp"):
        current = meta.get("deletionGracePeriodSeconds")
        if not current:
            return None
        if requested is None or requested >= current:
            return PENDING
        when = _seconds(meta["deletionTimestamp"]) - current + requested
        period = requested
        if when < int(now):
            when, period = int(now), 1 if requested else 0
        return {**obj, "metadata": {**meta, "deletionTimestamp": _rfc3339(when),
                                    "deletionGracePeriodSeconds": period}}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    period = requested if requested is not None else int(
        spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName") or status.get("phase") in ("Failed", "Succeeded"):
        period = 0
    period = 1 if period < 0 else period
    stamped = {**meta, "deletionTimestamp": _rfc3339(int(now) + period),
               "deletionGracePeriodSeconds": period}
    if meta.get("generation"):
        stamped["generation"] = meta["generation"] + 1
    return {**obj, "metadata": stamped}


def mark_deleting(obj: Obj) -> Obj:
    """markAsDeleting: a kind without graceful deletion that still has finalizers."""
    meta = obj["metadata"]
    if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
        return obj
    stamped = {**meta, "deletionTimestamp": meta.get("deletionTimestamp") or now_rfc3339(),
               "deletionGracePeriodSeconds": 0}
    if not meta.get("deletionTimestamp") and meta.get("generation"):
        stamped["generation"] = meta["generation"] + 1
    return {**obj, "metadata": stamped}


def _seconds(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def with_managed_fields(meta: Obj, obj: Obj, manager: str, operation: str,
                        subresource: str = "") -> Obj:
    """`meta` with the entry of `manager` replaced by the fields of `obj` (what it sent). A
    write that sets no field (a Node created with its status only) adds no entry: the real
    server drops empty ones, and leaves out managedFields when none is left."""
    fields = _fields_v1(obj, subresource)
    if not fields:
        if meta.get("managedFields"):
            return meta
        return {k: v for k, v in meta.items() if k != "managedFields"}
    entry: Obj = {
        "manager": manager or "unknown", "operation": operation,
        "apiVersion": obj.get("apiVersion", "v1"),
        "time": now_rfc3339(), "fieldsType": "FieldsV1",
        "fieldsV1": fields,
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

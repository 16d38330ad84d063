"""Type checks of request bodies, as Go's JSON decoding into typed structs does them.
Owns: the JSON type of the fields the server reads (metadata, pod and node fields, leases,
events, webhook configurations, the resource.k8s.io fields gpuslice uses): a string where a
string is due, a map of strings for labels, a list of objects for containers... null is
allowed anywhere (Go decodes it to zero).
Does not: check values (objects.py validates those, with 422).
On a mismatch: 400 BadRequest worded like the real one ("... cannot be handled as a Pod:
json: cannot unmarshal number into Go struct field PodSpec.spec.nodeName of type string":
the innermost Go struct, the path from the object, the Go type).
Tests: tests/integration/kubeapi/test_bad_requests_get_clear_statuses.py"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import errors
from .resources import ResourceType

STR, INT32, INT64, BOOL = "string", "int32", "int64", "bool"
STRMAP = "map[string]string"
STRLIST = "[]string"
QUANTITIES = "quantities"  # a map of quantities: objects.py reads the values (400 there)


def _is_str(v: Any) -> bool:
    return type(v) is str


_OK: dict[str, Callable[[Any], bool]] = {  # bodies are decoded JSON: exact builtin types
    INT32: lambda v: type(v) is int, INT64: lambda v: type(v) is int,
    BOOL: lambda v: v is True or v is False,
    STRMAP: lambda v: type(v) is dict and all(type(x) is str or x is None for x in v.values()),
    STRLIST: lambda v: type(v) is list and all(type(x) is str for x in v),
    QUANTITIES: lambda v: type(v) is dict, "map[string][]uint8": lambda v: type(v) is dict,
}


class Struct(dict[str, Any]):
    """The fields of one Go struct, and its name: the decoder's errors name the innermost
    struct ("Go struct field PodSpec.spec.nodeName of type string"). `plan`: (key, shape, the
    leaf's type check or None), walked on every write."""

    def __init__(self, go: str, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.go = go
        self.plan = tuple((k, sub, _OK.get(sub, _is_str) if isinstance(sub, str) else None)
                          for k, sub in fields.items())


def objects(go_list: str, item: Struct) -> tuple[str, Struct]:
    """A list of structs: its Go type ("[]v1.Container") and the item's fields."""
    return (go_list, item)


# Leaves are Go type names: int32/int64/bool, map[string]string, []string, quantities;
# anything else (string, v1.PodPhase, ...) must be a JSON string.
_META = Struct("ObjectMeta", {
    "name": STR, "generateName": STR, "namespace": STR, "uid": "types.UID",
    "resourceVersion": STR, "labels": STRMAP, "annotations": STRMAP, "finalizers": STRLIST,
    "ownerReferences": objects("[]v1.OwnerReference", Struct("OwnerReference", {
        "name": STR, "uid": "types.UID"})),
    "generation": INT64, "creationTimestamp": STR, "deletionTimestamp": STR})
_RESOURCES = Struct("ResourceRequirements", {"limits": QUANTITIES, "requests": QUANTITIES})
_CONTAINER = Struct("Container", {
    "name": STR, "image": STR, "resources": _RESOURCES,
    "env": objects("[]v1.EnvVar", Struct("EnvVar", {"name": STR, "value": STR})),
    "command": STRLIST, "args": STRLIST})


def _conditions(go: str, type_: str) -> tuple[str, Struct]:
    return objects(f"[]v1.{go}", Struct(go, {"type": type_, "status": "v1.ConditionStatus",
                                             "reason": STR, "message": STR}))


_SHAPES: dict[str, dict[str, Any]] = {
    "Pod": {"spec": Struct("PodSpec", {
                "containers": objects("[]v1.Container", _CONTAINER),
                "initContainers": objects("[]v1.Container", _CONTAINER),
                "nodeName": STR, "schedulerName": STR, "nodeSelector": STRMAP,
                "tolerations": objects("[]v1.Toleration", Struct("Toleration", {
                    "key": STR, "operator": "v1.TolerationOperator",
                    "effect": "v1.TaintEffect"})),
                "priority": INT32, "restartPolicy": "v1.RestartPolicy",
                "terminationGracePeriodSeconds": INT64}),
            "status": Struct("PodStatus", {
                "phase": "v1.PodPhase",
                "conditions": _conditions("PodCondition", "v1.PodConditionType")})},
    "Node": {"spec": Struct("NodeSpec", {
                "unschedulable": BOOL,
                "taints": objects("[]v1.Taint", Struct("Taint", {
                    "key": STR, "effect": "v1.TaintEffect"}))}),
             "status": Struct("NodeStatus", {
                 "capacity": QUANTITIES, "allocatable": QUANTITIES,
                 "conditions": _conditions("NodeCondition", "v1.NodeConditionType")})},
    "Lease": {"spec": Struct("LeaseSpec", {
        "holderIdentity": STR, "leaseDurationSeconds": INT32, "acquireTime": STR,
        "renewTime": STR, "leaseTransitions": INT32})},
    "Event": {"involvedObject": Struct("ObjectReference", {
                  "name": STR, "namespace": STR, "kind": STR, "uid": "types.UID"}),
              "reason": STR, "message": STR, "type": STR, "count": INT32},
    "ConfigMap": {"data": STRMAP},
    "Secret": {"data": "map[string][]uint8", "stringData": STRMAP, "type": "v1.SecretType"},
    "MutatingWebhookConfiguration": {"webhooks": objects(
        "[]v1.MutatingWebhook", Struct("MutatingWebhook", {"name": STR}))},
    "ValidatingWebhookConfiguration": {"webhooks": objects(
        "[]v1.ValidatingWebhook", Struct("ValidatingWebhook", {"name": STR}))},
}
_EXACT = Struct("ExactDeviceRequest", {
    "deviceClassName": STR, "allocationMode": "v1.DeviceAllocationMode", "count": INT64,
    "capacity": Struct("CapacityRequirements", {"requests": QUANTITIES})})
_CLAIM_SPEC = Struct("ResourceClaimSpec", {"devices": Struct("DeviceClaim", {
    "requests": objects("[]v1.DeviceRequest", Struct("DeviceRequest", {
        "name": STR, "exactly": _EXACT}))})})
_DEVICE_REF = {"driver": STR, "pool": STR, "device": STR, "shareID": "types.UID"}
_SHAPES.update({  # resource.k8s.io/v1: the fields gpuslice writes or reads
    "ResourceSlice": {"spec": Struct("ResourceSliceSpec", {
        "driver": STR, "nodeName": STR, "allNodes": BOOL,
        "pool": Struct("ResourcePool", {"name": STR, "generation": INT64,
                                        "resourceSliceCount": INT64}),
        "devices": objects("[]v1.Device", Struct("Device", {
            "name": STR, "allowMultipleAllocations": BOOL}))})},
    "ResourceClaim": {"spec": _CLAIM_SPEC, "status": Struct("ResourceClaimStatus", {
        "allocation": Struct("AllocationResult", {
            "devices": Struct("DeviceAllocationResult", {
                "results": objects("[]v1.DeviceRequestAllocationResult", Struct(
                    "DeviceRequestAllocationResult", {
                        "request": STR, **_DEVICE_REF, "consumedCapacity": QUANTITIES}))})}),
        "reservedFor": objects("[]v1.ResourceClaimConsumerReference", Struct(
            "ResourceClaimConsumerReference", {"resource": STR, "name": STR,
                                               "uid": "types.UID"})),
        "devices": objects("[]v1.AllocatedDeviceStatus", Struct(
            "AllocatedDeviceStatus", dict(_DEVICE_REF)))})},
    "ResourceClaimTemplate": {"spec": Struct("ResourceClaimTemplateSpec", {
        "spec": _CLAIM_SPEC})},
    "DeviceClass": {"spec": Struct("DeviceClassSpec", {
        "selectors": objects("[]v1.DeviceSelector", Struct("DeviceSelector", {
            "cel": Struct("CELDeviceSelector", {"expression": STR})})),
        "extendedResourceName": STR})},
})


def check(rt: ResourceType, obj: Any, old: Any = None) -> None:
    """Raise 400 on the first field of `obj` whose JSON type is wrong. `old`: an object that
    passed this check (the stored version, or the body as admission saw it); the parts `obj`
    shares with it (the same Python objects: patches and admission copy only what they change)
    are not walked again."""
    if not isinstance(obj, dict):
        raise _mismatch(rt, "", (), f"v1.{rt.kind}", obj)
    _walk(rt, _shape(rt.kind), obj, old, ())


@functools.cache
def _shape(kind: str) -> Struct:
    fields = {"apiVersion": STR, "kind": STR, "metadata": _META, **_SHAPES.get(kind, {})}
    if kind not in ("ConfigMap", "Secret", "Event"):
        fields.setdefault("spec", Struct(f"{kind}Spec", {}))
        fields.setdefault("status", Struct(f"{kind}Status", {}))
    return Struct(kind, fields)


def _walk(rt: ResourceType, shape: Struct, value: Any, old: Any,
          path: tuple[str, ...]) -> None:
    """`value` (not None) against `shape`; `path` is only joined into text for an error."""
    if not isinstance(old, dict):
        old = {}
    for key, sub, ok in shape.plan:
        v = value.get(key)
        if v is None or v is old.get(key):
            continue
        if ok is not None:
            if not ok(v):
                _leaf(rt, shape.go, (*path, key), sub, v)
        elif type(sub) is Struct:
            if type(v) is not dict:
                raise _mismatch(rt, shape.go, (*path, key), f"v1.{sub.go}", v)
            _walk(rt, sub, v, old.get(key), (*path, key))
        else:  # a list of structs: (Go list type, item struct)
            if type(v) is not list:
                raise _mismatch(rt, shape.go, (*path, key), sub[0], v)
            for item in v:
                if item is None:
                    continue
                if type(item) is not dict:
                    raise _mismatch(rt, shape.go, (*path, key), f"v1.{sub[1].go}", item)
                _walk(rt, sub[1], item, None, (*path, key))


def _leaf(rt: ResourceType, struct: str, where: tuple[str, ...], want: str, v: Any) -> None:
    """Raise the decoder's error for a leaf that failed its check."""
    if want in (INT32, INT64):
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif want == BOOL:
        ok = isinstance(v, bool)
    elif want in (STRMAP, STRLIST):
        container = dict if want == STRMAP else list
        if not isinstance(v, container):
            raise _mismatch(rt, struct, where, want, v)
        for x in (v.values() if container is dict else v):
            if x is not None and not isinstance(x, str):
                raise _mismatch(rt, struct, where, STR, x)
        return
    elif want == QUANTITIES:
        ok = isinstance(v, dict)
        want = "v1.ResourceList"
    elif want == "map[string][]uint8":
        ok = isinstance(v, dict)
    else:
        ok = isinstance(v, str)
    if not ok:
        raise _mismatch(rt, struct, where, want, v)


def _mismatch(rt: ResourceType, struct: str, path: tuple[str, ...], want: str, value: Any
              ) -> errors.ApiProblem:
    got = {bool: "bool", int: "number", float: "number", str: "string", list: "array",
           dict: "object"}.get(type(value), type(value).__name__)
    where = f"Go struct field {struct}.{'.'.join(path)}" if path else "Go value"
    return errors.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                              f"{rt.kind}: json: cannot unmarshal {got} into {where} of type "
                              f"{want}")

"""Type checks of request bodies, as Go's JSON decoding into typed structs does them.
Owns: the JSON type of the fields the server reads (metadata, pod and node fields, leases,
events, webhook configurations, the resource.k8s.io fields gpuslice uses): a string where a
string is due, a map of strings for labels, a list of objects for containers... null is
allowed anywhere (Go decodes it to zero).
Does not: check values (objects.py validates those, with 422).
On a mismatch: 400 BadRequest worded like the real one ("... cannot be handled as a Pod:
json: cannot unmarshal number into Go struct field ... of type string").
Tests: tests/integration/kubeapi/test_bad_requests_get_clear_statuses.py"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import errors
from .resources import ResourceType

STR, INT, BOOL, NUM = "string", "int64", "bool", "number"
STRMAP = "map[string]string"
STRLIST = "[]string"
QUANTITIES = "map[string]Quantity"  # values: strings or numbers


def objects(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("[]object", item)


_META = {"name": STR, "generateName": STR, "namespace": STR, "uid": STR,
         "resourceVersion": STR, "labels": STRMAP, "annotations": STRMAP,
         "finalizers": STRLIST, "ownerReferences": objects({"name": STR, "uid": STR}),
         "generation": INT, "creationTimestamp": STR, "deletionTimestamp": STR}
_RESOURCES = {"limits": QUANTITIES, "requests": QUANTITIES}
_CONTAINER = {"name": STR, "image": STR, "resources": _RESOURCES,
              "env": objects({"name": STR, "value": STR}), "command": STRLIST, "args": STRLIST}
_CONDITIONS = objects({"type": STR, "status": STR, "reason": STR, "message": STR})
_SHAPES: dict[str, dict[str, Any]] = {
    "Pod": {"spec": {"containers": objects(_CONTAINER), "initContainers": objects(_CONTAINER),
                     "nodeName": STR, "schedulerName": STR, "nodeSelector": STRMAP,
                     "tolerations": objects({"key": STR, "operator": STR, "effect": STR}),
                     "priority": INT, "restartPolicy": STR},
            "status": {"phase": STR, "conditions": _CONDITIONS}},
    "Node": {"spec": {"unschedulable": BOOL, "taints": objects({"key": STR, "effect": STR})},
             "status": {"capacity": QUANTITIES, "allocatable": QUANTITIES,
                        "conditions": _CONDITIONS}},
    "Lease": {"spec": {"holderIdentity": STR, "leaseDurationSeconds": INT,
                       "acquireTime": STR, "renewTime": STR, "leaseTransitions": INT}},
    "Event": {"involvedObject": {"name": STR, "namespace": STR, "kind": STR, "uid": STR},
              "reason": STR, "message": STR, "type": STR, "count": INT},
    "ConfigMap": {"data": STRMAP},
    "Secret": {"data": STRMAP, "stringData": STRMAP, "type": STR},
    "MutatingWebhookConfiguration": {"webhooks": objects({"name": STR})},
    "ValidatingWebhookConfiguration": {"webhooks": objects({"name": STR})},
}
_CLAIM_SPEC = {"devices": {"requests": objects({
    "name": STR, "exactly": {"deviceClassName": STR, "allocationMode": STR, "count": INT,
                             "capacity": {"requests": QUANTITIES}}})}}
_DEVICE_REF = {"driver": STR, "pool": STR, "device": STR, "shareID": STR}
_SHAPES.update({  # resource.k8s.io/v1: the fields gpuslice writes or reads
    "ResourceSlice": {"spec": {
        "driver": STR, "nodeName": STR, "allNodes": BOOL,
        "pool": {"name": STR, "generation": INT, "resourceSliceCount": INT},
        "devices": objects({"name": STR, "allowMultipleAllocations": BOOL})}},
    "ResourceClaim": {"spec": _CLAIM_SPEC, "status": {
        "allocation": {"devices": {"results": objects({
            "request": STR, **_DEVICE_REF, "consumedCapacity": QUANTITIES})}},
        "reservedFor": objects({"resource": STR, "name": STR, "uid": STR}),
        "devices": objects(_DEVICE_REF)}},
    "ResourceClaimTemplate": {"spec": {"spec": _CLAIM_SPEC}},
    "DeviceClass": {"spec": {"selectors": objects({"cel": {"expression": STR}}),
                             "extendedResourceName": STR}},
})


def check(rt: ResourceType, obj: Any, old: Any = None) -> None:
    """Raise 400 on the first field of `obj` whose JSON type is wrong. `old`: an object that
    passed this check (the stored version, or the body as admission saw it); the parts `obj`
    shares with it (the same Python objects: patches and admission copy only what they change)
    are not walked again."""
    if not isinstance(obj, dict):
        raise _mismatch(rt, (), "object", obj)
    _walk(rt, _shape(rt.kind), obj, old, ())


@functools.cache
def _shape(kind: str) -> dict[str, Any]:
    shape = {"apiVersion": STR, "kind": STR, "metadata": _META, **_SHAPES.get(kind, {})}
    if kind not in ("ConfigMap", "Secret", "Event"):
        shape.setdefault("spec", {})
        shape.setdefault("status", {})
    return shape


def _walk(rt: ResourceType, shape: Any, value: Any, old: Any, path: tuple[str, ...]) -> None:
    """`value` (not None) against `shape`; `path` is only joined into text for an error."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise _mismatch(rt, path, "object", value)
        if not isinstance(old, dict):
            old = {}
        for key, sub in shape.items():
            v = value.get(key)
            if v is None or v is old.get(key):
                continue
            if isinstance(sub, str):
                if not _LEAVES[sub](v):
                    raise _mismatch(rt, (*path, key), sub, v)
            else:
                _walk(rt, sub, v, old.get(key), (*path, key))
        return
    if not isinstance(value, list):  # a tuple: ("[]object", item shape)
        raise _mismatch(rt, path, "[]object", value)
    for item in value:
        if item is not None:
            _walk(rt, shape[1], item, None, path)


_LEAVES: dict[str, Callable[[Any], bool]] = {
    STR: lambda v: isinstance(v, str), BOOL: lambda v: isinstance(v, bool),
    INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
    STRMAP: lambda v: isinstance(v, dict) and all(
        isinstance(x, str) or x is None for x in v.values()),
    STRLIST: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    QUANTITIES: lambda v: isinstance(v, dict) and all(
        isinstance(x, str | int | float) and not isinstance(x, bool) for x in v.values()),
}


def _mismatch(rt: ResourceType, path: tuple[str, ...], want: str, value: Any
              ) -> errors.ApiProblem:
    got = {bool: "bool", int: "number", float: "number", str: "string", list: "array",
           dict: "object"}.get(type(value), type(value).__name__)
    where = f"Go struct field {rt.kind}.{'.'.join(path)}" if path else "Go value"
    return errors.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                              f"{rt.kind}: json: cannot unmarshal {got} into {where} of type "
                              f"{want}")

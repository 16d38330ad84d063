"""The three patch types kube-apiserver accepts, applied to plain JSON objects.
Owns: JSON merge patch (RFC 7386), JSON patch (RFC 6902, `test` included) and strategic
merge patch for the lists gpuslice and kubectl touch: lists of maps merged by key (conditions
and addresses by `type`; containers, env, volumes by `name`; ports by `containerPort`;
volumeMounts by `mountPath`), `finalizers` merged as a set, `$patch: replace|delete`,
`$deleteFromPrimitiveList/<f>`, `$retainKeys`; `$setElementOrder/<f>` is accepted and ignored.
Does not: know OpenAPI; a list not in MERGE_KEYS is replaced whole, as for atomic lists.
On bad input: PatchError (the server answers 422, or 400 for undecodable bodies).
Inputs are never modified: a result shares with its input the parts the patch leaves alone
(the store never changes an object in place).
Tests: tests/integration/kubeapi/test_three_patch_types.py"""

from __future__ import annotations

from typing import Any

import msgspec

MERGE_KEYS: dict[str, str] = {
    "conditions": "type", "addresses": "type",
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "imagePullSecrets": "name", "ownerReferences": "uid",
    "ports": "containerPort", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "hostAliases": "ip", "topologySpreadConstraints": "topologyKey",
}
SET_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """The patch cannot be applied; the message says where and why."""


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (a msgspec round trip: several times copy.deepcopy's speed)."""
    return msgspec.json.decode(msgspec.json.encode(value))


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy(patch)
    if patch.get("$patch") == "replace":
        return {k: _copy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and _all_maps(value):
            result[key] = _merge_list(result.get(key) or [], value, MERGE_KEYS[key], key)
        elif isinstance(value, list) and key in SET_LISTS:
            old = list(result.get(key) or [])
            result[key] = old + [v for v in value if v not in old]
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _all_maps(items: list[Any]) -> bool:
    return all(isinstance(i, dict) for i in items)


def _merge_list(old: list[Any], patch: list[dict[str, Any]], key: str, field: str) -> list[Any]:
    if any(p.get("$patch") == "replace" for p in patch):
        return [{k: v for k, v in p.items() if k != "$patch"} for p in patch
                if p.get("$patch") != "replace" or len(p) > 1]
    result = list(old)  # items are replaced, never changed in place
    for item in patch:
        if key not in item:
            raise PatchError(f"{field}: map in a merged list has no merge key {key!r}: {item}")
        at = next((i for i, o in enumerate(result)
                   if isinstance(o, dict) and o.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del result[at]
        elif at is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[at] = strategic_merge_patch(result[at], item)
    return result


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = target  # copied on write: each op copies the containers on its path, no more
    for n, op in enumerate(ops):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"operation {n}: needs 'op' and 'path': {op!r}")
        doc = _apply_op(doc, op)
    return doc


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise PatchError(f"path {path!r} is not a JSON pointer (a string)")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} is not a JSON pointer (must start with '/')")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    name, path = op["op"], op["path"]
    parts = _pointer(path)
    if name == "test":
        if _resolve(doc, parts, path) != op.get("value"):
            raise PatchError(f"testing value {path} failed: test failed")
        return doc
    if not isinstance(name, str):
        raise PatchError(f"unknown operation {name!r}")
    if name in ("move", "copy"):
        if "from" not in op:
            raise PatchError(f"{name} at {path}: missing 'from'")
        source = _pointer(op["from"])
        value = _copy(_resolve(doc, source, op["from"]))
        if name == "move":
            doc = _remove(doc, source, op["from"])
        return _add(doc, parts, value, path)
    if name in ("add", "replace") and "value" not in op:
        raise PatchError(f"{name} at {path}: missing 'value'")
    if name == "add":
        return _add(doc, parts, _copy(op["value"]), path)
    if name == "remove":
        return _remove(doc, parts, path)
    if name == "replace":
        doc = _remove(doc, parts, path)
        return _add(doc, parts, _copy(op["value"]), path)
    raise PatchError(f"unknown operation {name!r}")


def _writable(doc: Any, parts: list[str], path: str) -> tuple[Any, Any]:
    """(a copy of `doc`, the container at `parts` in it): every container on the way is a
    fresh shallow copy, so the caller may change that one without touching `doc`."""
    top = doc = _shallow(doc)
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            at: str | int = part
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            at = int(part)
        else:
            raise PatchError(f"path {path!r} does not exist")
        doc[at] = _shallow(doc[at])
        doc = doc[at]
    return top, doc


def _shallow(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value) \
        if isinstance(value, list) else value


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    doc, parent = _writable(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f"add at {path}: index out of range")
    else:
        raise PatchError(f"add at {path}: parent is not an object or array")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        return None
    doc, parent = _writable(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise PatchError(f"unable to remove nonexistent key: {last}: missing value at {path}")
    return doc

"""Helpers for the webhook's unit tests: pods in each dialect and a strict JSON Patch applier."""

from __future__ import annotations

import copy
from typing import Any

from gpuslice.webhook import admit


def gpu_pod(*containers: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """A pod as kube-apiserver hands it to admission (defaults applied, no labels)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team", **meta},
            "spec": {"containers": list(containers), "schedulerName": "default-scheduler"}}


def container(name: str = "c", limits: dict[str, Any] | None = None,
              requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    return {"name": name, "image": "registry.invalid/app", "resources": resources, **extra}


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 `add`/`replace` as kube-apiserver applies them: the parent must exist, `replace`
    needs the member, `add` on a list index inserts, `-` appends. Anything else fails."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert set(op) == {"op", "path", "value"}, f"unexpected keys in {op}"
        parts = [_unescape(p) for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            assert op["op"] == "add" and 0 <= index <= len(parent), op
            parent.insert(index, copy.deepcopy(op["value"]))
        else:
            assert isinstance(parent, dict), f"{op['path']}: parent is not an object"
            assert op["op"] == "add" or last in parent, f"replace of a missing member: {op}"
            parent[last] = copy.deepcopy(op["value"])
    return doc


def admitted(pod: dict[str, Any], options: admit.Options | None = None,
             namespace_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """admit, then apply its patch: the pod as kube-apiserver would store it."""
    decision = admit.admit("CREATE", pod, namespace_labels or {}, options or admit.Options())
    assert decision.allowed, decision.message
    return apply_patch(pod, decision.patch)

"""meta.k8s.io/v1 Table replies, which `kubectl get` asks for (server-side printing).
Owns: the columns per kind (NAME and AGE for all; STATUS, NODE for pods; STATUS for nodes).
Does not: change any non-Table reply.
Tests: tests/integration/kubeapi/test_kubectl_against_test_server.py"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from .resources import ResourceType

Obj = dict[str, Any]
_EXTRA: dict[str, list[tuple[str, Any]]] = {
    "Pod": [("Status", lambda o: _pod_status(o)), ("Node", lambda o: o["spec"].get("nodeName")
                                                   or "<none>")],
    "Node": [("Status", lambda o: _node_status(o))],
    "Namespace": [("Status", lambda o: (o.get("status") or {}).get("phase", ""))],
    "Lease": [("Holder", lambda o: (o.get("spec") or {}).get("holderIdentity", ""))],
}


def wanted(request: web.BaseRequest) -> bool:
    accept = request.headers.get("Accept", "")
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def table(rt: ResourceType, items: list[Obj], rv: str, token: str = "") -> Obj:
    extra = _EXTRA.get(rt.kind, [])
    columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name",
                "priority": 0}]
    columns += [{"name": n, "type": "string", "format": "", "description": n, "priority": 0}
                for n, _ in extra]
    columns.append({"name": "Age", "type": "string", "format": "", "description": "Age",
                    "priority": 0})
    rows = [{"cells": [o["metadata"]["name"], *(f(o) for _, f in extra), _age(o)],
             "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": o["metadata"]}} for o in items]
    meta = {"resourceVersion": rv, **({"continue": token} if token else {})}
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": columns, "rows": rows}


def _age(obj: Obj) -> str:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = int((datetime.now(UTC) - datetime.fromisoformat(created.replace("Z", "+00:00")))
                  .total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else \
        f"{seconds // 3600}h"


def _pod_status(pod: Obj) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return (pod.get("status") or {}).get("phase", "")


def _node_status(node: Obj) -> str:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return "Ready" if c.get("status") == "True" else "NotReady"
    return "Unknown"

"""Raw HTTP against either backend, for tests that check exact codes, bodies and streams.
Owns: small body builders (pod_body, node_body) and Raw (call, create, bind, watch_lines),
which the `raw` fixture hands out. lightkube stays the client for typed work; Raw is for what
it hides (Status bodies, the binding subresource's reply, watch lines as sent).
Tests: tests/integration/kubeapi/ use it throughout."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any


def pod_body(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}],
                     **spec}}


def node_body(name: str, labels: dict[str, str] | None = None,
              allocatable: dict[str, str] | None = None) -> dict:
    """A node as a kubelet registers it: Ready, with capacity (8 CPUs, 32Gi, 110 pods)."""
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", **(allocatable or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "status": {"capacity": resources, "allocatable": resources, "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "fake node, no kubelet"}]}}


def _ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def has_not_ready_taint(node: dict) -> bool:
    return any(t.get("key") == "node.kubernetes.io/not-ready"
               for t in (node.get("spec") or {}).get("taints") or [])


class Raw:
    """Plain HTTP against the API (exact codes and bodies), with the admin credentials."""

    def __init__(self, kube_api: Any) -> None:
        self.kube_api = kube_api

    async def call(self, method: str, path: str, body: Any = None,
                   content_type: str = "application/json", **params: str) -> tuple[int, Any]:
        async with self.kube_api.http() as http:
            reply = await http.request(
                method, path, params=params or None,
                content=None if body is None else json.dumps(body).encode(),
                headers={"Content-Type": content_type})
        return reply.status_code, reply.json()

    async def create(self, body: dict, namespace: str = "default") -> dict:
        """POST a core/v1 object; a Ready node is returned once it can take pods (below)."""
        plural = body["kind"].lower() + "s"
        path = (f"/api/v1/namespaces/{namespace}/{plural}" if body["kind"] != "Node"
                else "/api/v1/nodes")
        code, reply = await self.call("POST", path, body)
        assert code == 201, reply
        if body["kind"] == "Node" and _ready(body) and has_not_ready_taint(reply):
            return await self.schedulable(reply["metadata"]["name"])
        return reply

    async def schedulable(self, node: str, timeout: float = 15) -> dict:
        """The node once it has lost the `node.kubernetes.io/not-ready` taint. A real
        kube-apiserver gives every new Node that taint (admission: TaintNodesByCondition) and
        kube-controller-manager takes it off a Ready node within a second; until then a
        scheduler refuses the node. The in-process server never sets it."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            code, obj = await self.call("GET", f"/api/v1/nodes/{node}")
            assert code == 200, obj
            if not has_not_ready_taint(obj):
                return obj
            assert asyncio.get_running_loop().time() < deadline, \
                f"node {node} kept the not-ready taint for {timeout} s: {obj['spec']}"
            await asyncio.sleep(0.05)

    async def bind(self, name: str, node: str, namespace: str = "default",
                   **meta: str) -> tuple[int, Any]:
        """POST pods/NAME/binding. (lightkube's create(Pod.Binding) cannot decode the Status
        a real server answers with, so this goes raw.)"""
        return await self.call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, **meta},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    async def watch_lines(self, path: str, count: int, timeout: float = 10,
                          **params: str) -> list[dict]:
        """Open a watch on `path` and return its first `count` events."""
        events: list[dict] = []
        async with self.kube_api.http() as http:
            async def read() -> None:
                async with http.stream("GET", path, params={"watch": "true", **params},
                                       timeout=None) as reply:
                    async for line in reply.aiter_lines():
                        if line.strip():
                            events.append(json.loads(line))
                            if len(events) >= count:
                                return

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(read(), timeout)
        return events

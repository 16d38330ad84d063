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
        plural = body["kind"].lower() + "s"
        path = (f"/api/v1/namespaces/{namespace}/{plural}" if body["kind"] != "Node"
                else "/api/v1/nodes")
        code, reply = await self.call("POST", path, body)
        assert code == 201, reply
        return reply

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

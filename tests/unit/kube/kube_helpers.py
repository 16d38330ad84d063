"""Test helpers for tests/unit/kube: a lightkube AsyncClient whose requests a Python function
answers (httpx2.MockTransport), so unit tests need no server and can script any reply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User

Handler = Callable[[httpx2.Request], httpx2.Response]


def mock_client(handler: Handler) -> AsyncClient:
    """An AsyncClient for http://api.test whose every request `handler` answers (it may be
    an async function too)."""
    config = KubeConfig.from_one(cluster=Cluster(server="http://api.test"), user=User(),
                                 namespace="default")
    return AsyncClient(config, transport=httpx2.MockTransport(handler), field_manager="test")


def status(code: int, reason: str, message: str) -> httpx2.Response:
    """An error reply shaped like kube-apiserver's (a v1 Status)."""
    return httpx2.Response(code, json={
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})


def body(request: httpx2.Request) -> Any:
    return json.loads(request.content) if request.content else None


class Lines(httpx2.AsyncByteStream):
    """A streamed reply: JSON lines from an async or sync iterable (a watch stream)."""

    def __init__(self, items: Iterable[Any] | AsyncIterator[Any]) -> None:
        self.items = items

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if hasattr(self.items, "__aiter__"):
            async for item in self.items:
                yield _line(item)
        else:
            for item in self.items:
                yield _line(item)


def _line(item: Any) -> bytes:
    return item if isinstance(item, bytes) else json.dumps(item).encode() + b"\n"

"""Test helpers for tests/unit/kube: a lightkube AsyncClient whose requests a Python function
answers (httpx2.MockTransport), so unit tests need no server and can script any reply."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx2
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User

from gpuslice.kube.cache import Backoff

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


def pod(name: str, rv: int | str, *, uid: str | None = None, namespace: str = "ml",
        **extra: Any) -> dict[str, Any]:
    """A minimal pod as the API sends it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv),
                         "uid": uid or f"uid-{name}"}, **extra}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(rv: int) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                           "metadata": {"resourceVersion": str(rv)}}}


def gone(rv: int = 1) -> dict[str, Any]:
    return {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {rv} (500)", "reason": "Expired", "code": 410}}


class ScriptedAPI:
    """Answers list and watch requests for pods from scripts, one entry per request:
    lists: (items, resourceVersion) or an httpx2.Response or an Exception to raise;
    watches: a list of watch events (then the server ends the watch), a Response, or an
    Exception. When a script runs out, lists fail with 500 and watches stay open, silent."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists, self.watches = list(lists), list(watches)
        self.requests: list[httpx2.Request] = []
        self.idle = asyncio.Event()  # set when a watch finds its script exhausted

    @property
    def watch_versions(self) -> list[str | None]:
        return [r.url.params.get("resourceVersion") for r in self.requests
                if r.url.params.get("watch") == "true"]

    @property
    def list_count(self) -> int:
        return sum(1 for r in self.requests if r.url.params.get("watch") != "true")

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if request.url.params.get("watch") == "true":
            entry = self.watches.pop(0) if self.watches else None
            if entry is None:
                self.idle.set()
                return httpx2.Response(200, stream=Lines(_forever()))
        else:
            entry = self.lists.pop(0) if self.lists else status(500, "InternalError", "no more")
        if isinstance(entry, Exception):
            raise entry
        if isinstance(entry, httpx2.Response):
            return entry
        if request.url.params.get("watch") == "true":
            return httpx2.Response(200, stream=Lines(entry))
        items, rv = entry
        limit = int(request.url.params.get("limit", 0) or 0)
        start = int(request.url.params.get("continue", 0) or 0)
        page = items[start:start + limit] if limit else items
        metadata = {"resourceVersion": str(rv)}
        if limit and start + limit < len(items):
            metadata["continue"] = str(start + limit)
            self.lists.insert(0, entry)  # the next page comes from the same snapshot
        return httpx2.Response(200, json={"kind": "PodList", "apiVersion": "v1",
                                          "metadata": metadata, "items": page})


async def _forever() -> AsyncIterator[Any]:
    await asyncio.Event().wait()
    yield {}  # pragma: no cover - never reached


class RecordingBackoff(Backoff):
    """A Backoff whose delays are tiny (tests stay fast) but recorded as the real ones."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delays: list[float] = []

    def next_delay(self, at_least_s: float = 0.0) -> float:
        delay = super().next_delay(at_least_s)
        self.delays.append(delay)
        return delay / 1000


async def run_until_idle(informer: Any, api: ScriptedAPI, timeout_s: float = 5) -> None:
    """Run the informer until it has played every watch script, then stop it."""
    task = asyncio.create_task(informer.run())
    waiter = asyncio.create_task(api.idle.wait())
    await asyncio.wait({task, waiter}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    assert api.idle.is_set() or task.done(), "the informer got stuck before the scripts ended"
    informer.stop()
    await task  # re-raises what run() raised

"""Helpers for tests/integration/kube: what an informer's handler has learnt, and the server's
truth to compare it with."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from gpuslice.kube.cache import Backoff, Change, Informer
from gpuslice.kube.client import dict_view, make_client


class View:
    """The handler's picture: key -> resourceVersion, and every version delivered per key."""

    def __init__(self) -> None:
        self.objects: dict[str, str] = {}
        self.delivered: dict[str, list[int]] = defaultdict(list)
        self.changes: list[tuple[str, str]] = []

    def __call__(self, change: Change) -> None:
        self.changes.append((change.type, change.key))
        obj = change.new if change.new is not None else change.old
        rv = obj["metadata"]["resourceVersion"]
        if change.type == "DELETED":
            assert change.key in self.objects, f"DELETED {change.key} never added"
            del self.objects[change.key]
        else:
            assert (change.type == "ADDED") == (change.key not in self.objects), change
            self.objects[change.key] = rv
            self.delivered[change.key].append(int(rv))

    def went_backwards(self) -> dict[str, list[int]]:
        """Keys whose delivered versions did not strictly increase (should be none)."""
        return {k: v for k, v in self.delivered.items() if v != sorted(set(v))}


async def server_truth(client: AsyncClient, namespace: str = "default") -> dict[str, str]:
    return {f"{namespace}/{p['metadata']['name']}": p["metadata"]["resourceVersion"]
            async for p in client.list(dict_view(Pod), namespace=namespace)}


async def converge(view: View, client: AsyncClient, timeout_s: float = 10) -> dict[str, str]:
    """Wait until the handler's picture equals the server's pods; returns that picture."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        truth = await server_truth(client)
        if view.objects == truth:
            return truth
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the informer did not converge:\n view  {view.objects}\n"
                                 f" truth {truth}")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def running_informer(kube_api: Any, **kwargs: Any) -> AsyncIterator[
        tuple[Informer, View, AsyncClient]]:
    """A pod informer on the test API (through make_client, as the services build theirs),
    running in the background, synced, with a quick back-off; stopped on exit."""
    client = make_client(str(kube_api.kubeconfig))
    view = View()
    informer = Informer(client, Pod, handler=view,
                        backoff=Backoff(initial_s=0.02, cap_s=0.2), **kwargs)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        yield informer, view, client
    finally:
        informer.stop()
        await asyncio.wait_for(task, 10)
        await client.close()


def pod(name: str, **labels: str) -> Any:
    return dict_view(Pod)({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": name, "labels": labels},
                           "spec": {"containers": [{"name": "c", "image": "pause:1"}]}})

"""The node agent's pod store across a list (node/cluster.py): a pod the watch adds while the
list is on its way is kept, so the Allocate proof (node/allocate.py) still sees it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gpuslice.kube.cache import Change
from gpuslice.node.cluster import Cluster


def _pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}",
                         "resourceVersion": rv}, "spec": {"nodeName": "node-a"}}


class ListingClient:
    """lightkube's AsyncClient as far as Cluster.refresh uses it: `list` yields `items` and,
    half-way, lets the test deliver a watch event (the watch and the list run concurrently)."""

    def __init__(self, items: list[dict[str, Any]], meanwhile: Any) -> None:
        self.items, self.meanwhile = items, meanwhile

    async def list(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        for i, item in enumerate(self.items):
            if i == len(self.items) // 2:
                self.meanwhile()
            yield item


async def test_a_pod_the_watch_adds_during_a_list_is_kept_and_one_gone_is_dropped():
    old, gone, new = _pod("old", "5"), _pod("gone", "6"), _pod("new", "9")
    cluster = Cluster(None, "node-a")  # type: ignore[arg-type]
    for p in (old, gone):
        cluster._on_change(Change("ADDED", p["metadata"]["name"], None, p))
    cluster.client = ListingClient(  # type: ignore[assignment]
        [old, _pod("other", "7")],  # the list was read before `new` was bound (rv 9)
        lambda: cluster._on_change(Change("ADDED", "new", None, new)))
    assert await cluster.refresh()
    assert sorted(p["metadata"]["name"] for p in cluster.pods()) == ["new", "old", "other"]

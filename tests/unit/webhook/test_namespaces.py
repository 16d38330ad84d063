"""The namespace-label cache: one fetch per namespace per TTL, coalesced, None on failure."""

from __future__ import annotations

import asyncio

from gpuslice.kube import errors
from gpuslice.webhook.namespaces import NamespaceLabels


class FakeAPI:
    def __init__(self, labels=None, fail=None):
        self.labels, self.fail, self.calls = labels or {}, fail, []
        self.gate = asyncio.Event()
        self.gate.set()

    async def fetch(self, name):
        self.calls.append(name)
        await self.gate.wait()
        if self.fail:
            raise self.fail
        return self.labels.get(name, {})


async def test_labels_are_fetched_once_per_namespace_until_the_ttl_passes():
    now = [0.0]
    api = FakeAPI({"team": {"a": "b"}})
    cache = NamespaceLabels(api.fetch, ttl_s=30, clock=lambda: now[0])
    assert await cache.get("team") == {"a": "b"}
    assert await cache.get("team") == {"a": "b"}
    assert api.calls == ["team"]
    now[0] = 31
    await cache.get("team")
    assert api.calls == ["team", "team"], "after the TTL a relabelled namespace is seen"


async def test_concurrent_admissions_in_one_namespace_share_one_request():
    api = FakeAPI({"team": {"x": "y"}})
    api.gate.clear()
    cache = NamespaceLabels(api.fetch, ttl_s=30)
    waiting = [asyncio.ensure_future(cache.get("team")) for _ in range(50)]
    await asyncio.sleep(0)
    api.gate.set()
    assert await asyncio.gather(*waiting) == [{"x": "y"}] * 50
    assert api.calls == ["team"]


async def test_a_failed_lookup_returns_none_counts_it_and_is_retried_next_time(caplog):
    failures = []
    api = FakeAPI(fail=errors.Forbidden("namespace team: forbidden (HTTP 403)", code=403))
    cache = NamespaceLabels(api.fetch, ttl_s=30, on_error=lambda: failures.append(1))
    assert await cache.get("team") is None
    assert await cache.get("team") is None
    assert len(failures) == 2 and api.calls == ["team", "team"], "failures are not cached"
    assert "relying on the webhook configuration's namespaceSelector" in caplog.text


async def test_the_cache_holds_at_most_max_entries():
    api = FakeAPI()
    cache = NamespaceLabels(api.fetch, ttl_s=30, max_entries=3)
    for name in "abcd":
        await cache.get(name)
    await cache.get("a")
    assert api.calls == ["a", "b", "c", "d", "a"], "the oldest entry was dropped for d"

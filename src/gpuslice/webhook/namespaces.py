"""Namespace labels for the webhook's own opt-out check, fetched once per namespace per TTL.

Owns: a small cache in front of `GET /api/v1/namespaces/NAME` (one request in flight per
namespace however many pods arrive together; at most `max_entries` namespaces kept).
Does not: decide anything (admit.py), or replace the MutatingWebhookConfiguration's
namespaceSelector, which keeps opted-out namespaces from reaching the webhook at all.
Failure: when the lookup fails (API down, RBAC, timeout) `get` returns None, logs a warning
and counts it: admission then relies on the selector alone rather than failing pods.
RBAC: get on namespaces.
Tests: tests/unit/webhook/test_namespaces.py, tests/integration/webhook/test_webhook_over_https.py
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace

from gpuslice.kube import errors
from gpuslice.kube.client import dict_view

__all__ = ["NamespaceLabels", "fetch_with"]

log = logging.getLogger(__name__)

Fetch = Callable[[str], Awaitable[Mapping[str, str]]]


def fetch_with(client: AsyncClient) -> Fetch:
    """The labels of a namespace as the API server has them (kube.errors on failure)."""

    async def fetch(name: str) -> Mapping[str, str]:
        with errors.translate(f"namespace {name}"):
            ns = await client.get(dict_view(Namespace), name)
        labels = (ns.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    return fetch


class NamespaceLabels:
    """`await labels.get(name)` -> the namespace's labels, or None when they cannot be read."""

    def __init__(self, fetch: Fetch, *, ttl_s: float, max_entries: int = 10_000,
                 on_error: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch, self._ttl, self._max = fetch, ttl_s, max_entries
        self._on_error, self._clock = on_error, clock
        self._cache: dict[str, tuple[float, Mapping[str, str]]] = {}
        self._inflight: dict[str, asyncio.Task[Mapping[str, str]]] = {}

    async def get(self, name: str) -> Mapping[str, str] | None:
        hit = self._cache.get(name)
        if hit is not None and hit[0] > self._clock():
            return hit[1]
        task = self._inflight.get(name)
        if task is None:
            task = self._inflight[name] = asyncio.ensure_future(self._fetch(name))
            task.add_done_callback(lambda _: self._inflight.pop(name, None))
        try:
            labels = await asyncio.shield(task)
        except errors.APIError as exc:
            self._on_error()
            log.warning("cannot read the labels of namespace %s (%s); relying on the "
                        "webhook configuration's namespaceSelector for opt-out", name, exc,
                        extra={"namespace": name})
            return None
        if len(self._cache) >= self._max:
            self._cache.pop(next(iter(self._cache)))  # oldest insertion first
        self._cache[name] = (self._clock() + self._ttl, labels)
        return labels

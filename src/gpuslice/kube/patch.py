"""Writing gpuslice's annotations and labels onto pods and nodes, safely under concurrency.

Owns: `patch_metadata` (one JSON merge patch of metadata.annotations/labels; a None value
removes the key; with `resource_version` the server applies it only to that version, else
409 -> errors.Conflict: optimistic concurrency), `retry_on_conflict` (client-go's
RetryOnConflict: call again after a short jittered back-off), and `update_metadata` (read,
compute the change from the fresh object, guarded patch, retry: for read-modify-write such
as appending to gpuslice.io/allocated).
Does not: decide what to write (scheduler/, node/) or create Bindings (scheduler/bind.py).
Objects come back as plain dicts (client.dict_view). Failures: kube.errors.* only.
RBAC: patch on the resources patched (pods, nodes); update_metadata also reads them (get).
Tests: tests/unit/kube/test_patch.py, tests/integration/kube/test_patch_against_api.py
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from lightkube import AsyncClient
from lightkube.types import PatchType

from gpuslice.kube import errors
from gpuslice.kube.client import dict_view

__all__ = ["Changes", "patch_metadata", "retry_on_conflict", "update_metadata"]

T = TypeVar("T")
# {"annotations": {key: value or None}, "labels": {...}}: what update_metadata's `change` returns
Changes = Mapping[str, Mapping[str, str | None]]


def _describe(resource: type, name: str, namespace: str | None) -> str:
    kind = resource.__name__.lower()
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _metadata_patch(annotations: Mapping[str, str | None] | None,
                    labels: Mapping[str, str | None] | None,
                    resource_version: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for field, values in (("annotations", annotations), ("labels", labels)):
        if values is None:
            continue
        bad = [k for k, v in values.items() if v is not None and not isinstance(v, str)]
        if bad:
            raise TypeError(f"{field} {', '.join(bad)}: values must be strings (None removes)")
        metadata[field] = dict(values)
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}


async def patch_metadata(client: AsyncClient, resource: type, name: str, *,
                         namespace: str | None = None,
                         annotations: Mapping[str, str | None] | None = None,
                         labels: Mapping[str, str | None] | None = None,
                         resource_version: str | None = None) -> dict[str, Any]:
    """Merge-patch annotations and/or labels of one object; returns the object as patched.
    With `resource_version`, raises errors.Conflict if the object changed since then."""
    body = _metadata_patch(annotations, labels, resource_version)
    with errors.translate(f"patch {_describe(resource, name, namespace)}"):
        patched = await client.patch(dict_view(resource), name, body, namespace=namespace,
                                     patch_type=PatchType.MERGE)
    return dict(patched)


async def retry_on_conflict(fn: Callable[[], Awaitable[T]], *, attempts: int = 5,
                            backoff_s: float = 0.01, max_backoff_s: float = 1.0) -> T:
    """Await `fn()`; on errors.Conflict wait (backoff_s doubling, capped, with jitter so racing
    writers spread out) and call it again, up to `attempts` calls; then the last Conflict.
    `fn` must re-read what it depends on, or the retry repeats the same stale write."""
    if attempts < 1:
        raise ValueError(f"attempts={attempts}: must be at least 1")
    for attempt in range(attempts):
        try:
            return await fn()
        except errors.Conflict:
            if attempt == attempts - 1:
                raise
            delay = min(max_backoff_s, backoff_s * 2**attempt)
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


async def update_metadata(client: AsyncClient, resource: type, name: str,
                          change: Callable[[Mapping[str, Any]], Changes | None], *,
                          namespace: str | None = None,
                          attempts: int = 5) -> dict[str, Any] | None:
    """Read the object, let `change(obj)` say which annotations/labels to set (None: nothing
    to do), apply that guarded by the object's resourceVersion; on Conflict read again and
    repeat. Returns the patched object, or None when `change` asked for nothing.
    Raises errors.NotFound if the object is gone, errors.Conflict after `attempts` races."""
    what = _describe(resource, name, namespace)

    async def once() -> dict[str, Any] | None:
        with errors.translate(f"get {what}"):
            obj = dict(await client.get(dict_view(resource), name, namespace=namespace))
        changes = change(obj)
        if not changes:
            return None
        unknown = set(changes) - {"annotations", "labels"}
        if unknown:
            raise ValueError(f"update_metadata can change annotations and labels, not {unknown}")
        return await patch_metadata(
            client, resource, name, namespace=namespace, annotations=changes.get("annotations"),
            labels=changes.get("labels"),
            resource_version=obj.get("metadata", {}).get("resourceVersion"))

    return await retry_on_conflict(once, attempts=attempts)

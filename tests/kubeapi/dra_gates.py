"""DRA feature gates of the test API server: `consumable_capacity_off()` makes it store what a
kube-apiserver with `--feature-gates=DRAConsumableCapacity=false` stores (dra-samples
returned/e1-e3): the objects are accepted, but slices lose allowMultipleAllocations and every
requestPolicy, claims and templates lose capacity.requests. Nothing is rejected.
Works by wrapping objects.default (applied to every object the server decodes), for the
lifetime of the context; the in-process server only (a real one is started with its gates).
Tests: tests/integration/dra/test_publish_slices.py"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from . import objects
from .resources import ResourceType


def _drop(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    spec = obj.get("spec") or {}
    if rt.kind == "ResourceSlice":
        for device in spec.get("devices") or []:
            device.pop("allowMultipleAllocations", None)
            for capacity in (device.get("capacity") or {}).values():
                if isinstance(capacity, dict):
                    capacity.pop("requestPolicy", None)
    if rt.kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    if rt.kind in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in (spec.get("devices") or {}).get("requests") or []:
            for exact in (request.get("exactly"), *(request.get("firstAvailable") or [])):
                if isinstance(exact, dict):
                    exact.pop("capacity", None)
    return obj


@contextlib.contextmanager
def consumable_capacity_off() -> Iterator[None]:
    real = objects.default

    def default(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return _drop(rt, real(rt, obj))

    objects.default = default  # type: ignore[assignment]
    try:
        yield
    finally:
        objects.default = real  # type: ignore[assignment]

"""What the webhook's DRA translation needs from the API server: the published GPUs, and the
ResourceClaimTemplates its pods' claims come from.

Owns: `SliceInventory` (a watch of the ResourceSlices of gpuslice's driver -> dra.Inventory:
whether resource.k8s.io/v1 is served, whether any device accepts shares, the memory sizes a
percent request is translated for) and `Templates` (create a pod's templates before the pod is
admitted; one that exists already must hold the same spec, so a template someone else wrote
under our name never gives a pod other limits).
Does not: translate (dra.py) or decide (admit.py).
Failure: Templates.ensure raises TemplateError with what went wrong and what to do; the pod is
then denied (kube-apiserver shows the message) rather than admitted without its claims' source.
RBAC: list, watch resourceslices; create, get resourceclaimtemplates.
Tests: tests/integration/dra/test_dialects_through_dra.py
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import (
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from gpuslice.container.limits import MiB
from gpuslice.dra import DRIVER
from gpuslice.errors import GpusliceError
from gpuslice.kube import errors
from gpuslice.kube.cache import Change, Informer
from gpuslice.kube.client import dict_view
from gpuslice.quantity import QuantityError, parse_quantity
from gpuslice.webhook.dra import Inventory

__all__ = ["SliceInventory", "TemplateError", "Templates", "canonical", "foreign_claims",
           "inventory_of"]

log = logging.getLogger(__name__)


class TemplateError(GpusliceError):
    """A pod's ResourceClaimTemplate cannot be made; the pod is denied with this message."""


def inventory_of(slices: list[Mapping[str, Any]], driver: str = DRIVER) -> Inventory:
    """The Inventory of these ResourceSlices (those of `driver`)."""
    ours = [s for s in slices if (s.get("spec") or {}).get("driver") == driver]
    sizes: set[int] = set()
    sharing = False
    for s in ours:
        for d in (s.get("spec") or {}).get("devices") or ():
            sharing = sharing or bool(d.get("allowMultipleAllocations"))
            value = ((d.get("capacity") or {}).get("memory") or {}).get("value")
            with contextlib.suppress(QuantityError, TypeError):
                sizes.add(math.floor(parse_quantity(value, field="memory") / MiB))
    return Inventory(served=True, slices=len(ours), sharing=sharing,
                     memory_mib=tuple(sorted(sizes)))


class SliceInventory:
    """`current()`: the Inventory now (None until the first list, or while resource.k8s.io/v1
    cannot be listed: the translation then denies with why)."""

    def __init__(self, client: AsyncClient, driver: str = DRIVER) -> None:
        self.driver = driver
        self._cached: Inventory | None = None
        self.informer: Informer[dict[str, Any]] = Informer(
            client, dict_view(ResourceSlice), handler=self._changed, name="resourceslices")

    def _changed(self, _: Change[dict[str, Any]]) -> None:
        self._cached = None

    def current(self) -> Inventory | None:
        if not self.informer.synced.is_set():
            return None
        if self._cached is None:
            self._cached = inventory_of(list(self.informer.store.values()), self.driver)
        return self._cached

    async def run(self) -> None:
        await self.informer.run()

    def stop(self) -> None:
        self.informer.stop()


async def foreign_claims(client: AsyncClient, pod: Mapping[str, Any], namespace: str
                         ) -> list[str]:
    """One problem line per claim the pod names (resourceClaimName) that was made for another
    pod (its controller is that Pod: kube-controller-manager made it from a template).
    kube-scheduler v1.36 reserves such a claim for any pod of the namespace that names it, and
    the kubelet then gives that pod the owner's GPU share (the same CDI device, region and
    cap): a claim made for a pod is that pod's alone."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    name = str(((pod.get("metadata") or {}) if isinstance(pod, Mapping) else {}).get("name")
               or "")
    problems = []
    for e in entries if isinstance(entries, list) else ():
        claim = e.get("resourceClaimName") if isinstance(e, Mapping) else None
        if not isinstance(claim, str) or not claim:
            continue
        try:
            with errors.translate(f"get resourceclaim {namespace}/{claim}"):
                got = await client.get(dict_view(ResourceClaim), claim, namespace=namespace)
        except errors.NotFound:
            continue  # not there yet: a claim the user will create (then it has no owner pod)
        except errors.APIError as exc:  # cannot tell: refuse rather than risk another's share
            problems.append(f"pod: spec.resourceClaims {e.get('name')}: cannot read "
                            f"resourceclaim {claim} ({exc}); retry, or check the webhook's "
                            "RBAC (get resourceclaims)")
            continue
        owner = next((o for o in (got.get("metadata") or {}).get("ownerReferences") or ()
                      if o.get("controller") and o.get("kind") == "Pod"), None)
        if owner is not None and owner.get("name") != name:
            problems.append(
                f"pod: spec.resourceClaims {e.get('name')}: resourceClaimName={claim} was made "
                f"for pod {owner.get('name')} (from its template) and holds that pod's GPU "
                "share; name a ResourceClaimTemplate or a ResourceClaim of your own")
    return problems


def canonical(template_spec: Mapping[str, Any]) -> Any:
    """A ResourceClaimTemplate's spec as kube-apiserver stores it and as the webhook writes it
    alike: the API adds an empty `metadata` and canonicalises quantities (4096Mi -> 4Gi), so
    capacity requests compare by value."""
    spec = dict(template_spec)
    if not spec.get("metadata"):
        spec.pop("metadata", None)

    def by_value(node: Any, key: str = "") -> Any:
        if isinstance(node, Mapping):
            if key == "requests" and all(isinstance(v, str | int) for v in node.values()):
                with contextlib.suppress(QuantityError):
                    return {k: parse_quantity(v, field=k) for k, v in node.items()}
            return {k: by_value(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [by_value(v) for v in node]
        return node
    return by_value(spec)


class Templates:
    """Create a pod's ResourceClaimTemplates; those made or checked recently are not asked
    for again (a burst of pods of one shape costs one create)."""

    def __init__(self, client: AsyncClient, *, remember_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.remember_s, self.clock = client, remember_s, clock
        self._known: dict[tuple[str, str], float] = {}
        self._inflight: dict[tuple[str, str], asyncio.Task[None]] = {}

    async def ensure(self, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        if self._known.get(key, -math.inf) > self.clock():
            return
        task = self._inflight.get(key)
        if task is None:  # pods of one shape arriving together share one create
            task = self._inflight[key] = asyncio.ensure_future(self._make(body))
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        await asyncio.shield(task)
        self._known[key] = self.clock() + self.remember_s

    async def _make(self, body: Mapping[str, Any]) -> None:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        what = f"ResourceClaimTemplate {ns}/{name}"
        try:
            with errors.translate(f"create {what}"):
                await self.client.create(dict_view(ResourceClaimTemplate)(dict(body)),
                                         namespace=ns)
            return
        except errors.Conflict:
            pass  # made for an earlier pod of this shape: it must say the same
        except errors.APIError as exc:
            raise TemplateError(f"{what}: cannot create it ({exc}); the pod's GPU claims come "
                                "from it: check the webhook's RBAC (create "
                                "resourceclaimtemplates) and retry") from None
        try:
            with errors.translate(f"get {what}"):
                got = await self.client.get(dict_view(ResourceClaimTemplate), name,
                                            namespace=ns)
        except errors.APIError as exc:
            raise TemplateError(f"{what}: exists but cannot be read ({exc}); retry") from None
        if canonical(got.get("spec") or {}) != canonical(body["spec"]):
            raise TemplateError(
                f"{what}: exists with another spec than gpuslice's webhook gives this shape "
                "(templates named gpuslice-<hash> are the webhook's); delete it, and the next "
                "pod recreates it")

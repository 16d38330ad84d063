"""The node's ResourceSlice on the API server: written when the GPUs change, read back, removed
at uninstall. Called by the node agent (node/agent.py) at start and on every health change.
Owns: create-or-update of `<node>-<driver>` (409 -> re-read and retry; the pool generation
+1 only when the devices change), the read-back check, and `remove()` (every slice of this
driver on this node).
Gate off: a server with DRAConsumableCapacity off stores the slice WITHOUT
allowMultipleAllocations and requestPolicy, silently; devices become exclusive. The read-back
sees it: ERROR log + Warning event on the Node (once per episode) + `problem` (the node
agent's readiness string) until a later publish reads the fields back.
Does not: decide which GPUs to publish (node/inventory.py: hidden, health, memoryScaling) or
the slice's shape (slices.py).
Failure: API errors leave as kube.errors types (Conflict after `attempts` races).
RBAC: resourceslices get/list/create/update/delete; events create/patch.
Tests: tests/integration/dra/test_publish_slices.py"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceSlice

from gpuslice import model
from gpuslice.dra import slices
from gpuslice.kube import errors
from gpuslice.kube.client import dict_view
from gpuslice.kube.patch import retry_on_conflict

if TYPE_CHECKING:
    from gpuslice.kube.events import EventRecorder

__all__ = ["GATE_OFF", "DraSettings", "SlicePublisher"]

GATE_OFF = ("DRAConsumableCapacity is off on the API server: devices are exclusive; enable the "
            "feature gate or use the device-plugin path")
EVENT_REASON = "DRASharingDropped"
_VIEW = dict_view(ResourceSlice)


class DraSettings(Protocol):
    """What the publisher reads of the node config's `dra` section."""

    driver_name: str
    memory_step_mib: int


def _without_sharing(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`obj` as a gate-off server stores it: no allowMultipleAllocations, no requestPolicy."""
    if obj is None:
        return None
    out = copy.deepcopy(dict(obj))
    for device in (out.get("spec") or {}).get("devices") or []:
        device.pop("allowMultipleAllocations", None)
        for capacity in (device.get("capacity") or {}).values():
            capacity.pop("requestPolicy", None)
    return out


class SlicePublisher:
    def __init__(self, client: AsyncClient, node: str, cfg: DraSettings, *,
                 log: logging.Logger | None = None, events: EventRecorder | None = None,
                 driver_version: str | None = None,
                 cuda_driver_version: int | str | None = None, attempts: int = 5) -> None:
        self.client = client
        self.node = node
        self.driver = cfg.driver_name
        self.step_mib = cfg.memory_step_mib
        self.log = log or logging.getLogger(__name__)
        self.events = events
        self.versions = {"driver_version": driver_version,
                         "cuda_driver_version": cuda_driver_version}
        self.attempts = attempts
        self.name = slices.slice_name(node, self.driver)
        self.stored: dict[str, Any] | None = None  # the slice as last read back
        self.problem: str | None = None  # for the agent's readiness: why DRA does not share

    async def publish(self, gpus: Sequence[model.GPU]) -> None:
        """Make the node's slice publish the healthy `gpus` (the inventory's), then read it
        back."""
        want = slices.build_slice(self.node, gpus, step_mib=self.step_mib, driver=self.driver,
                                  **self.versions)
        self.stored = await retry_on_conflict(lambda: self._write(want), attempts=self.attempts)
        self._check(want, self.stored)

    async def _write(self, want: dict[str, Any]) -> dict[str, Any]:
        """Create or update, then read back; errors.Conflict if another write came between."""
        await self._put(want)
        with errors.translate(f"read back resourceslice {self.name}"):
            stored = dict(await self.client.get(_VIEW, self.name))
        if not slices.same_devices(_without_sharing(want), _without_sharing(stored)):
            raise errors.Conflict(f"ResourceSlice {self.name} changed after it was written")
        return stored

    async def _put(self, want: dict[str, Any]) -> None:
        try:
            with errors.translate(f"get resourceslice {self.name}"):
                current: dict[str, Any] | None = dict(await self.client.get(_VIEW, self.name))
        except errors.NotFound:
            current = None
        if current is None:
            with errors.translate(f"create resourceslice {self.name}"):
                await self.client.create(_VIEW(want))
            self.log.info("published ResourceSlice %s with %d GPUs", self.name,
                          len(want["spec"]["devices"]))
            return
        if slices.same_devices(want, current):
            return
        generation = int(((current.get("spec") or {}).get("pool") or {}).get("generation") or 0)
        # A gate-off server keeps dropping the sharing fields: rewrite (in case the gate is on
        # now; a no-op otherwise) but count it as a change of devices only if it is one.
        changed = not slices.same_devices(_without_sharing(want), _without_sharing(current))
        body = copy.deepcopy(want)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        body["spec"]["pool"]["generation"] = generation + 1 if changed else generation
        with errors.translate(f"update resourceslice {self.name}"):
            await self.client.replace(_VIEW(body), self.name)
        if changed:
            self.log.info("updated ResourceSlice %s: %d GPUs, pool generation %d", self.name,
                          len(want["spec"]["devices"]), body["spec"]["pool"]["generation"])

    def _check(self, want: dict[str, Any], stored: dict[str, Any]) -> None:
        if slices.same_devices(want, stored):
            if self.problem:
                self.log.info("ResourceSlice %s keeps its sharing fields again", self.name)
            self.problem = None
            return
        if self.problem:
            return  # said so already
        self.problem = GATE_OFF
        self.log.error("ResourceSlice %s was stored without allowMultipleAllocations and "
                       "requestPolicy: %s", self.name, GATE_OFF)
        if self.events is not None:
            self.events.emit({"apiVersion": "v1", "kind": "Node",
                              "metadata": {"name": self.node}}, "Warning", EVENT_REASON,
                             GATE_OFF)

    async def remove(self) -> None:
        """Delete every slice of this driver on this node (uninstall); absent ones are fine."""
        with errors.translate(f"list resourceslices of {self.driver} on {self.node}"):
            found = [dict(s) async for s in self.client.list(
                _VIEW, fields={"spec.nodeName": self.node, "spec.driver": self.driver})]
        for obj in found:
            try:
                with errors.translate(f"delete resourceslice {obj['metadata']['name']}"):
                    await self.client.delete(_VIEW, obj["metadata"]["name"])
            except errors.NotFound:
                pass
        self.stored = None
        self.log.info("removed %d ResourceSlice(s) of %s on %s", len(found), self.driver,
                      self.node)

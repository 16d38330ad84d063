"""The kubelet device plugin (v1beta1) for one device resource, as a grpc.aio servicer.

Owns: the replica device list (`<GPU-UUID>::<n>`, `split_count` per healthy GPU, or 100 per GPU
for tencent.com/vcuda-core; NUMA topology when NVML reports it), ListAndWatch streams (the full
list at once and again on every change, kept open until the plugin stops), and translating
Allocate / GetPreferredAllocation to the agent (`Source`) and back.
Does not: decide anything about pods (allocate.py, through the agent) or own sockets
(kubelet.py serves and registers it).
Failure: an AllocateError becomes FAILED_PRECONDITION with its message (the kubelet shows it
in the pod's events); anything unexpected is logged and answered INTERNAL, never a hang.
Tests: tests/unit/node/test_verify.py, tests/integration/node/test_agent_with_kubelet.py
(through the kubelet emulator)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import grpc

from gpuslice import handoff, model
from gpuslice.node.allocate import AllocateError, Answer
from gpuslice.node.proto import deviceplugin_pb2 as pb
from gpuslice.node.proto import deviceplugin_pb2_grpc as pb_grpc

__all__ = ["DevicePlugin", "Source", "replica_devices", "to_response"]

log = logging.getLogger(__name__)
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


class Source(Protocol):
    """What a plugin asks the agent."""

    def gpus(self) -> Sequence[model.GPU]: ...

    async def allocate(self, resource: str, device_ids: Sequence[str]) -> Answer: ...

    async def preferred(self, resource: str, available: Sequence[str],
                        must_include: Sequence[str], size: int) -> list[str]: ...


def replica_devices(resource: str, gpus: Sequence[model.GPU]) -> list[pb.Device]:
    """The devices the kubelet counts for `resource`: replicas of each GPU, with its health."""
    per_gpu = handoff.REPLICAS_PER_GPU.get(resource)
    out = []
    for g in gpus:
        topology = (pb.TopologyInfo(nodes=[pb.NUMANode(ID=g.numa_node)])
                    if g.numa_node is not None else None)
        for n in range(per_gpu if per_gpu is not None else g.split_count):
            out.append(pb.Device(ID=f"{g.uuid}::{n}", health=HEALTHY if g.healthy else UNHEALTHY,
                                 topology=topology))
    return out


def to_response(a: Answer) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=a.envs,
        mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path,
                         read_only=m.read_only) for m in a.mounts],
        cdi_devices=[pb.CDIDevice(name=n) for n in a.cdi_devices])


class DevicePlugin(pb_grpc.DevicePluginServicer):
    def __init__(self, resource: str, source: Source) -> None:
        self.resource = resource
        self._source = source
        self._version = 0  # bumped on every change; a stream sends when it has not seen it
        self._stopped = False
        self._changed = asyncio.Condition()

    async def changed(self) -> None:
        """The GPUs or their health changed: every open ListAndWatch stream sends the list."""
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    async def stop(self) -> None:
        async with self._changed:
            self._stopped = True
            self._changed.notify_all()

    async def GetDevicePluginOptions(self, request: pb.Empty,
                                     context: grpc.aio.ServicerContext) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False,
                                      get_preferred_allocation_available=True)

    async def ListAndWatch(self, request: pb.Empty, context: grpc.aio.ServicerContext
                           ) -> AsyncIterator[pb.ListAndWatchResponse]:
        seen = -1
        while True:
            async with self._changed:
                while not self._stopped and self._version == seen:
                    await self._changed.wait()
                if self._stopped:
                    return
                seen = self._version
            devices = replica_devices(self.resource, self._source.gpus())
            log.info("ListAndWatch: sending devices", extra={
                "resource": self.resource, "devices": len(devices),
                "unhealthy": sum(d.health == UNHEALTHY for d in devices)})
            yield pb.ListAndWatchResponse(devices=devices)

    async def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                                     context: grpc.aio.ServicerContext
                                     ) -> pb.PreferredAllocationResponse:
        out = []
        for r in request.container_requests:
            ids = await self._source.preferred(self.resource, list(r.available_deviceIDs),
                                               list(r.must_include_deviceIDs), r.allocation_size)
            out.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=out)

    async def Allocate(self, request: pb.AllocateRequest,
                       context: grpc.aio.ServicerContext) -> pb.AllocateResponse:
        out = []
        for r in request.container_requests:
            ids = list(r.devices_ids)
            try:
                out.append(to_response(await self._source.allocate(self.resource, ids)))
            except AllocateError as exc:
                log.warning("Allocate refused: %s", exc, extra={"resource": self.resource})
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"gpuslice: {self.resource}: {exc}")
            except Exception as exc:
                log.exception("Allocate failed", extra={"resource": self.resource})
                await context.abort(grpc.StatusCode.INTERNAL,
                                    f"gpuslice: {self.resource}: internal error ({exc}); see the "
                                    "gpuslice node agent's logs on this node")
        return pb.AllocateResponse(container_responses=out)

    async def PreStartContainer(self, request: pb.PreStartContainerRequest,
                                context: grpc.aio.ServicerContext
                                ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()

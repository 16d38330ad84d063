"""A kubelet for the node agent's tests: device plugin registration, ListAndWatch, admission
(GetPreferredAllocation then Allocate per GPU container, init containers first, one pod at a
time) and the PodResources v1 List API, over real unix sockets and grpc.aio.

What it does as the real kubelet does (WIRE.md): serves `kubelet.sock` in the device plugin
directory, dials the plugin's socket by the file name it registered, keeps the ListAndWatch
stream open, picks devices among the healthy unallocated ones (asking the plugin's preference
first), and on restart removes every file in the directory and serves a new kubelet.sock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpuslice import handoff
from gpuslice.aio import wait_set
from gpuslice.node.proto import deviceplugin_pb2 as pb
from gpuslice.node.proto import deviceplugin_pb2_grpc as pb_grpc
from gpuslice.node.proto import podresources_pb2 as pr
from gpuslice.node.proto import podresources_pb2_grpc as pr_grpc


@dataclass
class Endpoint:
    """One registered plugin as the kubelet tracks it."""

    resource: str
    socket: str
    options: Any = None
    devices: dict[str, str] = field(default_factory=dict)  # id -> health
    updates: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    channel: grpc.aio.Channel | None = None


class AdmissionError(Exception):
    """The plugin refused Allocate: what the kubelet would put in the pod's events."""


class Kubelet(pb_grpc.RegistrationServicer, pr_grpc.PodResourcesListerServicer):
    def __init__(self, plugin_dir: str, pod_resources_socket: str) -> None:
        self.dir = Path(plugin_dir)
        self.pod_resources_socket = pod_resources_socket
        self.endpoints: dict[str, Endpoint] = {}
        self.registrations: list[tuple[str, str, str]] = []  # (version, endpoint, resource)
        self.allocated: dict[str, set[str]] = {}  # resource -> device ids in use
        # (namespace, pod) -> container -> [(resource, device ids)]
        self.assigned: dict[tuple[str, str], dict[str, list[tuple[str, list[str]]]]] = {}
        self._server: grpc.aio.Server | None = None
        self._pr_server: grpc.aio.Server | None = None
        self.registered = asyncio.Event()

    # -- lifecycle
    async def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{self.dir / 'kubelet.sock'}")
        await self._server.start()
        if self._pr_server is None:
            self._pr_server = grpc.aio.server()
            pr_grpc.add_PodResourcesListerServicer_to_server(self, self._pr_server)
            self._pr_server.add_insecure_port(f"unix://{self.pod_resources_socket}")
            await self._pr_server.start()

    async def _drop_endpoints(self) -> None:
        for ep in self.endpoints.values():
            if ep.task is not None:
                ep.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ep.task
            if ep.channel is not None:
                await ep.channel.close()
        self.endpoints.clear()

    async def restart(self) -> None:
        """Stop, remove every file in the directory (as the kubelet's device manager does at
        start) and serve a new kubelet.sock; plugins must notice and register again."""
        assert self._server is not None
        await self._server.stop(grace=0)
        await self._drop_endpoints()
        self.registered.clear()
        for f in self.dir.iterdir():
            with contextlib.suppress(OSError):
                f.unlink()
        await self.start()

    async def stop(self) -> None:
        await self._drop_endpoints()
        for s in (self._server, self._pr_server):
            if s is not None:
                await s.stop(grace=0)

    # -- Registration service
    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        self.registrations.append((request.version, request.endpoint, request.resource_name))
        if request.version != "v1beta1" or "/" in request.endpoint:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad registration")
        old = self.endpoints.pop(request.resource_name, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        ep = Endpoint(resource=request.resource_name, socket=request.endpoint,
                      options=request.options)
        ep.channel = grpc.aio.insecure_channel(f"unix://{self.dir / request.endpoint}")
        ep.task = asyncio.get_running_loop().create_task(self._watch(ep))
        self.endpoints[request.resource_name] = ep
        self.registered.set()
        return pb.Empty()

    async def _watch(self, ep: Endpoint) -> None:
        assert ep.channel is not None
        stub = pb_grpc.DevicePluginStub(ep.channel)
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for resp in stub.ListAndWatch(pb.Empty()):
                ep.devices = {d.ID: d.health for d in resp.devices}
                ep.updates += 1
                ep.changed.set()

    async def wait_devices(self, resource: str, *, updates: int = 1,
                           timeout: float = 10) -> dict[str, str]:
        """The device list once the plugin has sent at least `updates` lists."""
        async def ready() -> dict[str, str]:
            while True:
                ep = self.endpoints.get(resource)
                if ep is not None and ep.updates >= updates:
                    return ep.devices
                if ep is not None:
                    ep.changed.clear()
                    await wait_set(ep.changed, 0.05)
                else:
                    await asyncio.sleep(0.05)
        return await asyncio.wait_for(ready(), timeout)

    # -- admission
    async def allocate(self, resource: str, quantity: int) -> tuple[list[str], Any]:
        """One container's Allocate: the ids the kubelet picked and the plugin's response."""
        ep = self.endpoints[resource]
        assert ep.channel is not None
        stub = pb_grpc.DevicePluginStub(ep.channel)
        used = self.allocated.setdefault(resource, set())
        available = [d for d, h in ep.devices.items() if h == "Healthy" and d not in used]
        if len(available) < quantity:
            raise AdmissionError(f"UnexpectedAdmissionError: {resource}: {quantity} wanted, "
                                 f"{len(available)} available")
        ids = available[:quantity]
        if ep.options is not None and ep.options.get_preferred_allocation_available:
            pref = await stub.GetPreferredAllocation(pb.PreferredAllocationRequest(
                container_requests=[pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, allocation_size=quantity)]))
            ids = list(pref.container_responses[0].deviceIDs)
        try:
            resp = await stub.Allocate(pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]))
        except grpc.aio.AioRpcError as exc:
            raise AdmissionError(exc.details()) from None
        used.update(ids)
        return ids, resp.container_responses[0]

    async def admit(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Admit one pod: Allocate for each GPU container in kubelet order; container -> the
        plugin's ContainerAllocateResponse."""
        meta = pod["metadata"]
        out = {}
        for r in handoff.device_requests(pod):
            ids, resp = await self.allocate(r.resource, r.quantity)
            self.assigned.setdefault((meta["namespace"], meta["name"]), {}).setdefault(
                r.container, []).append((r.resource, ids))
            out[r.container] = resp
        return out

    # -- PodResources service
    async def List(self, request: pr.ListPodResourcesRequest, context: Any
                   ) -> pr.ListPodResourcesResponse:
        return pr.ListPodResourcesResponse(pod_resources=[
            pr.PodResources(namespace=ns, name=name, containers=[
                pr.ContainerResources(name=c, devices=[
                    pr.ContainerDevices(resource_name=res, device_ids=ids) for res, ids in devs])
                for c, devs in containers.items()])
            for (ns, name), containers in self.assigned.items()])


def short_dir(prefix: str = "gs") -> str:
    """A short directory for unix sockets (their paths must stay under 108 bytes)."""
    import tempfile

    return tempfile.mkdtemp(prefix=prefix, dir="/tmp" if os.path.isdir("/tmp") else None)


def env_of(resp: Any) -> dict[str, str]:
    return dict(resp.envs)


def mounts_of(resp: Any) -> Sequence[tuple[str, str, bool]]:
    return [(m.container_path, m.host_path, m.read_only) for m in resp.mounts]

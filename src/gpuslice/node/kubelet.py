"""Serve each device plugin on its own unix socket and keep it registered with the kubelet.

Owns: one grpc.aio server per device resource at `<device-plugin-dir>/gpuslice-<name>.sock`,
registration with `<device-plugin-dir>/kubelet.sock` (by socket file name, WIRE.md), and the
watch of that directory: when the kubelet restarts it re-creates kubelet.sock and removes
every plugin socket, so a new kubelet.sock (another inode) or a missing plugin socket makes us
serve afresh and register again.
Does not: depend on the API server (the kubelet is served while it is away).
Failure: a refused or timed-out registration is logged and retried every poll; `registered`
says which resources the current kubelet knows (readiness).
Tests: tests/integration/node/test_agent_with_kubelet.py
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import grpc

from gpuslice.aio import wait_set
from gpuslice.node.plugin import DevicePlugin
from gpuslice.node.proto import deviceplugin_pb2 as pb
from gpuslice.node.proto import deviceplugin_pb2_grpc as pb_grpc

__all__ = ["KubeletLink", "socket_name"]

log = logging.getLogger(__name__)
API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


def socket_name(resource: str) -> str:
    """nvidia.com/gpu -> gpuslice-nvidia.com-gpu.sock"""
    return "gpuslice-" + re.sub(r"[^A-Za-z0-9.]+", "-", resource) + ".sock"


class KubeletLink:
    def __init__(self, plugin_dir: str, plugins: list[DevicePlugin], *, poll_s: float = 1.0,
                 on_registered: Callable[[str], None] | None = None) -> None:
        self.dir = Path(plugin_dir)
        self.plugins = plugins
        self.poll_s = poll_s
        self.registered: set[str] = set()
        self._on_registered = on_registered
        self._failing: set[str] = set()
        self._servers: dict[str, grpc.aio.Server] = {}
        self._kubelet_id: tuple[int, int] | None = None
        self._stopping = asyncio.Event()

    def _path(self, p: DevicePlugin) -> Path:
        return self.dir / socket_name(p.resource)

    async def _serve(self, p: DevicePlugin) -> None:
        old = self._servers.pop(p.resource, None)
        if old is not None:
            await old.stop(grace=0)
        path = self._path(p)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(p, server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        self._servers[p.resource] = server
        self.registered.discard(p.resource)

    async def _register(self, p: DevicePlugin) -> None:
        req = pb.RegisterRequest(version=API_VERSION, endpoint=socket_name(p.resource),
                                 resource_name=p.resource,
                                 options=pb.DevicePluginOptions(
                                     get_preferred_allocation_available=True))
        try:
            async with grpc.aio.insecure_channel(f"unix://{self.dir / KUBELET_SOCKET}") as ch:
                await pb_grpc.RegistrationStub(ch).Register(req, timeout=5)
        except grpc.aio.AioRpcError as exc:
            level = logging.DEBUG if p.resource in self._failing else logging.WARNING
            self._failing.add(p.resource)  # one warning per outage, not one per poll
            log.log(level, "registering %s with the kubelet failed: %s: %s; retrying every "
                    "%.0f s", p.resource, exc.code().name, exc.details(), self.poll_s,
                    extra={"resource": p.resource})
            return
        self._failing.discard(p.resource)
        self.registered.add(p.resource)
        if self._on_registered is not None:
            self._on_registered(p.resource)
        log.info("registered with the kubelet", extra={"resource": p.resource})

    def _kubelet(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.dir / KUBELET_SOCKET)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_ctime_ns)

    async def step(self) -> None:
        """One look at the directory: serve, re-serve and register as needed."""
        kubelet = self._kubelet()
        if kubelet != self._kubelet_id:
            if kubelet is not None:
                log.info("kubelet socket (re)created: registering again")
            self._kubelet_id = kubelet
            self.registered.clear()
        for p in self.plugins:
            if p.resource not in self._servers or not self._path(p).exists():
                await self._serve(p)
            if kubelet is not None and p.resource not in self.registered:
                await self._register(p)

    async def run(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        while not self._stopping.is_set():
            await self.step()
            await wait_set(self._stopping, self.poll_s)

    async def stop(self) -> None:
        self._stopping.set()
        for p in self.plugins:
            await p.stop()
        for resource, server in list(self._servers.items()):
            await server.stop(grace=1)
            with contextlib.suppress(FileNotFoundError):
                (self.dir / socket_name(resource)).unlink()
        self._servers.clear()

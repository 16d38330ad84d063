"""A kubelet's DRA side for the node agent's tests: the plugin watcher (finds `*-reg.sock` in the
registry directory, GetInfo, checks type and versions, NotifyRegistrationStatus) and the
DRAPlugin client (NodePrepareResources / NodeUnprepareResources), over real unix sockets.

As the real kubelet (WIRE.md): it dials the endpoint the plugin names, passes only each
claim's identity (namespace, uid, name) and reads per-claim errors from the response; a
socket file replaced in the registry directory is a new registration.
Not modelled: the real kubelet deletes its node's ResourceSlices when it starts and 30 s after a
driver's last plugin deregisters; tests that need it delete the slice themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpuslice.dra.proto import dra_pb2 as pb
from gpuslice.dra.proto import dra_pb2_grpc as pb_grpc
from gpuslice.dra.proto import pluginregistration_pb2 as reg
from gpuslice.dra.proto import pluginregistration_pb2_grpc as reg_grpc


@dataclass
class Plugin:
    """One registered DRA driver as the kubelet tracks it."""

    name: str
    endpoint: str
    socket: Path
    identity: tuple[int, int]  # inode and ctime of the socket file it registered through
    channel: grpc.aio.Channel


@dataclass
class DraKubelet:
    registry_dir: Path
    poll_s: float = 0.05
    plugins: dict[str, Plugin] = field(default_factory=dict)
    registrations: list[reg.PluginInfo] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for p in self.plugins.values():
            await p.channel.close()
        self.plugins.clear()

    async def _watch(self) -> None:
        while True:
            for sock in sorted(self.registry_dir.glob("*-reg.sock")):
                with contextlib.suppress(OSError, grpc.aio.AioRpcError):
                    st = os.stat(sock)  # a new file, as the kubelet's inotify watch sees it
                    ident = (st.st_ino, st.st_ctime_ns)
                    if not any(p.socket == sock and p.identity == ident
                               for p in self.plugins.values()):
                        await self._register(sock, ident)
            await asyncio.sleep(self.poll_s)

    async def _register(self, sock: Path, ident: tuple[int, int]) -> None:
        async with grpc.aio.insecure_channel(f"unix://{sock}") as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = await stub.GetInfo(reg.InfoRequest(), timeout=5)
            self.registrations.append(info)
            error = ""
            if info.type != "DRAPlugin":
                error = f"plugin type {info.type!r} is not DRAPlugin"
            elif "v1.DRAPlugin" not in info.supported_versions:
                error = f"no supported version in {list(info.supported_versions)}"
            elif not os.path.exists(info.endpoint):
                error = f"endpoint {info.endpoint} does not exist"
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=not error, error=error), timeout=5)
        if error:
            self.refused.append(error)
            return
        old = self.plugins.pop(info.name, None)
        if old is not None:
            await old.channel.close()
        self.plugins[info.name] = Plugin(info.name, info.endpoint, sock, ident,
                                         grpc.aio.insecure_channel(f"unix://{info.endpoint}"))

    async def wait_registered(self, driver: str, *, after: int = 0, timeout: float = 10) -> None:
        """Until `driver` has registered more than `after` times."""
        async def ready() -> None:
            while sum(r.name == driver for r in self.registrations) <= after or \
                    driver not in self.plugins:
                await asyncio.sleep(0.02)

        await asyncio.wait_for(ready(), timeout)

    def _stub(self, driver: str) -> pb_grpc.DRAPluginStub:
        return pb_grpc.DRAPluginStub(self.plugins[driver].channel)

    async def prepare(self, driver: str, *claims: dict[str, Any]
                      ) -> dict[str, pb.NodePrepareResourceResponse]:
        """NodePrepareResources for claim objects (only their identity is sent)."""
        req = pb.NodePrepareResourcesRequest(claims=[_identity(c) for c in claims])
        resp = await self._stub(driver).NodePrepareResources(req, timeout=10)
        return dict(resp.claims)

    async def unprepare(self, driver: str, *claims: dict[str, Any]
                        ) -> dict[str, pb.NodeUnprepareResourceResponse]:
        req = pb.NodeUnprepareResourcesRequest(claims=[_identity(c) for c in claims])
        resp = await self._stub(driver).NodeUnprepareResources(req, timeout=10)
        return dict(resp.claims)


def _identity(claim: dict[str, Any]) -> pb.Claim:
    m = claim["metadata"]
    return pb.Claim(namespace=m.get("namespace", ""), uid=m["uid"], name=m["name"])

"""Serve the DRA plugin and its kubelet registration on their unix sockets, and keep them there.

Owns: the DRA service at `<pluginDir>/dra.sock` and the registration service at
`<registryDir>/<driver>-reg.sock` (the kubelet's plugin watcher finds it, calls GetInfo:
type DRAPlugin, the driver name, the DRA socket, versions ["v1.DRAPlugin"], then
NotifyRegistrationStatus, which is logged and kept in `registered`), and the watch of both
paths: a socket file that disappears or is replaced (a kubelet restart or a cleanup of its
directories) is served afresh, so the kubelet sees a new registration socket and asks again.
Does not: prepare anything (plugin.py) or depend on the API server.
Failure: a refused registration is logged with the kubelet's error; serving never stops.
Tests: tests/integration/dra/test_plugin_with_kubelet.py (the emulator in tests/kubelet/dra.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import grpc

from gpuslice.aio import wait_set
from gpuslice.dra.plugin import DraPlugin
from gpuslice.dra.proto import dra_pb2_grpc
from gpuslice.dra.proto import pluginregistration_pb2 as reg
from gpuslice.dra.proto import pluginregistration_pb2_grpc as reg_grpc

__all__ = ["DRA_SOCKET", "PLUGIN_TYPE", "SUPPORTED_VERSIONS", "DraLink", "registration_socket"]

log = logging.getLogger(__name__)
PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin",)
DRA_SOCKET = "dra.sock"


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_ctime_ns


def registration_socket(registry_dir: str | Path, driver: str) -> Path:
    return Path(registry_dir) / f"{driver}-reg.sock"


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, link: DraLink) -> None:
        self.link = link

    async def GetInfo(self, request: reg.InfoRequest, context: grpc.aio.ServicerContext
                      ) -> reg.PluginInfo:
        return reg.PluginInfo(type=PLUGIN_TYPE, name=self.link.driver,
                              endpoint=str(self.link.dra_path),
                              supported_versions=list(SUPPORTED_VERSIONS))

    async def NotifyRegistrationStatus(self, request: reg.RegistrationStatus,
                                       context: grpc.aio.ServicerContext
                                       ) -> reg.RegistrationStatusResponse:
        self.link.registered = request.plugin_registered
        if request.plugin_registered:
            log.info("registered with the kubelet as DRA driver %s", self.link.driver)
            if self.link.on_registered is not None:
                self.link.on_registered()
        else:
            log.error("the kubelet refused the DRA plugin: %s; check that the kubelet supports "
                      "DRA v1 (Kubernetes 1.34+) and that no other plugin registered %s",
                      request.error, self.link.driver)
        return reg.RegistrationStatusResponse()


class DraLink:
    def __init__(self, plugin: DraPlugin, *, driver: str, plugin_dir: str | Path,
                 registry_dir: str | Path, poll_s: float = 1.0,
                 on_registered: Callable[[], None] | None = None) -> None:
        self.plugin = plugin
        self.driver = driver
        self.dra_path = Path(plugin_dir) / DRA_SOCKET
        self.reg_path = registration_socket(registry_dir, driver)
        self.poll_s = poll_s
        self.on_registered = on_registered
        self.registered = False
        # path -> (server, identity of the socket file it made: inode and ctime, as an inode
        # number alone is reused at once)
        self._servers: dict[Path, tuple[grpc.aio.Server, tuple[int, int]]] = {}
        self._stopping = asyncio.Event()

    async def _serve(self, path: Path, add: Callable[[grpc.aio.Server], None]) -> None:
        old = self._servers.pop(path, None)
        if old is not None:
            await old[0].stop(grace=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = grpc.aio.server()
        add(server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        self._servers[path] = (server, _identity(path))

    def _gone(self, path: Path) -> bool:
        try:
            return path not in self._servers or _identity(path) != self._servers[path][1]
        except FileNotFoundError:
            return True

    async def step(self) -> None:
        """Serve each socket that is missing or not ours any more."""
        if self._gone(self.dra_path):
            await self._serve(self.dra_path, lambda s: dra_pb2_grpc.add_DRAPluginServicer_to_server(
                self.plugin, s))
            log.info("serving the DRA plugin", extra={"socket": str(self.dra_path)})
        if self._gone(self.reg_path):
            self.registered = False
            await self._serve(self.reg_path, lambda s: reg_grpc.add_RegistrationServicer_to_server(
                _Registration(self), s))
            log.info("waiting for the kubelet's plugin watcher",
                     extra={"socket": str(self.reg_path)})

    async def run(self) -> None:
        while not self._stopping.is_set():
            await self.step()
            await wait_set(self._stopping, self.poll_s)

    async def stop(self) -> None:
        """Stop serving and remove our sockets (the kubelet then forgets the plugin)."""
        self._stopping.set()
        for path, (server, ident) in list(self._servers.items()):
            await server.stop(grace=1)
            with contextlib.suppress(FileNotFoundError):
                if _identity(path) == ident:
                    path.unlink()
        self._servers.clear()
        await self.plugin.stop()

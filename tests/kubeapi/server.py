"""The in-process Kubernetes API server: app.py + store.py on a background thread.
Owns: its own event loop thread (so sync code, subprocesses such as kubectl, and async tests
on any loop all use it), loopback HTTP and HTTPS listeners on random ports, a private CA and
an admin kubeconfig, `call()` to run code against the store on its loop, and spawn(): the
same server as a child process (`python -m kubeapi`), for benchmarks.
Does not: implement API semantics (app.py, store.py, objects.py).
On failure to start: raises with the cause; `stop()` ends open watches first, so it is fast.
Tests: tests/integration/kubeapi/ (every test there runs against it by default)"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from .app import ApiApp, RequestRecord
from .certs import Pki, make_pki, write_kubeconfig
from .faults import Faults
from .store import Store

T = TypeVar("T")


def _listen(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


class KubeApiServer:
    """Start with `with KubeApiServer() as api:` or `api = KubeApiServer().start()`."""

    def __init__(self, workdir: Path | None = None, *, history: int = 1000,
                 bookmark_interval: float = 1.0, watch_timeout: float = 1800.0,
                 pki: Pki | None = None, https_port: int = 0) -> None:
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="kubeapi-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.pki = pki or make_pki()
        self.faults = Faults()
        self._settings = {"history": history, "bookmark_interval": bookmark_interval,
                          "watch_timeout": watch_timeout}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._api: ApiApp | None = None
        self._https, self._http = _listen(https_port), _listen()
        self.url = f"https://127.0.0.1:{self._https.getsockname()[1]}"
        self.http_url = f"http://127.0.0.1:{self._http.getsockname()[1]}"
        self.kubeconfig = write_kubeconfig(self.workdir / "kubeconfig", self.url, self.pki)

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> KubeApiServer:
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="kubeapi",
                                        daemon=True)
        self._thread.start()
        ready.result(timeout=30)
        return self

    def _run(self, ready: Future[None]) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:
            ready.set_exception(e)
            loop.close()
            return
        ready.set_result(None)
        loop.run_forever()
        loop.run_until_complete(self._shutdown())
        loop.close()

    async def _serve(self) -> None:
        store = Store(self._settings["history"])
        self._api = ApiApp(store, self.faults, bookmark_interval=self._settings[
            "bookmark_interval"], watch_timeout=self._settings["watch_timeout"])
        self.faults._watch_control = self._control
        self._runner = web.ServerRunner(self._api.server(), handle_signals=False,
                                        shutdown_timeout=1.0)
        await self._runner.setup()
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        paths = self.pki.write(self.workdir / "pki")
        tls.load_cert_chain(paths["serving.crt"], paths["serving.key"])
        await web.SockSite(self._runner, self._http).start()
        await web.SockSite(self._runner, self._https, ssl_context=tls).start()

    async def _shutdown(self) -> None:
        if self._api:
            self._api.control("drop", None)
            await asyncio.sleep(0)
        if self._runner:
            await self._runner.cleanup()
        if self._api:
            await self._api.admission.close()

    def stop(self) -> None:
        if self._loop and self._thread and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if self._tmp:
            self._tmp.cleanup()

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- access from tests ----------------------------------------------------------------

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the server's loop (e.g. `api.call(api.store.compact)`)."""
        if self._loop is None:
            raise RuntimeError("the server is not running")
        if threading.current_thread() is self._thread:
            return fn(*args)

        async def run() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    @property
    def store(self) -> Store:
        """The live store: touch it only through `call()` from other threads."""
        assert self._api is not None
        return self._api.store

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request served so far, oldest first (up to the last 20,000)."""
        assert self._api is not None
        return self.call(list, self._api.requests)

    def _control(self, action: str, resource: str | None) -> None:
        assert self._api is not None
        self.call(self._api.control, action, resource)


@dataclass
class SpawnedServer:
    """The in-process server run in a child process (`python -m kubeapi`), for benchmarks:
    its CPU time is not shared with the client's. No faults or store access from outside."""

    process: subprocess.Popen[bytes]
    url: str
    http_url: str
    kubeconfig: Path

    def stop(self) -> None:
        from .envtest import end_process

        end_process(self.process)


def spawn(workdir: Path, *, history: int = 1000, timeout: float = 30.0) -> SpawnedServer:
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "ready.json"
    ready.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    log = (workdir / "kubeapi.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "kubeapi", "--dir", str(workdir), "--history", str(history),
         "--ready-file", str(ready)], stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"python -m kubeapi did not start: "
                               f"{(workdir / 'kubeapi.log').read_text()[-2000:]}")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    return SpawnedServer(process, info["url"], info["http_url"], Path(info["kubeconfig"]))

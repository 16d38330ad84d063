"""`gpuslice webhook`: load the config, then serve the admission webhook over HTTPS until stopped.

Owns: start-up order (config and certificate first, so a mistake fails before anything
listens), the HTTPS listener, the certificate reload task, and a clean stop on SIGTERM/SIGINT.
Does not: answer requests (app.py) or check the certificate's content (tls.py).
Failure: ConfigError (bad config, exit 1) or EnvironmentProblem (no certificate, port taken,
no API access for the namespace check: exit 3), each saying how to fix it.
Tests: tests/integration/webhook/test_webhook_over_https.py
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from typing import Any

from aiohttp import web
from lightkube import AsyncClient
from prometheus_client import CollectorRegistry

from gpuslice import ops
from gpuslice.errors import EnvironmentProblem
from gpuslice.kube.client import make_client
from gpuslice.webhook import config
from gpuslice.webhook.app import make_app
from gpuslice.webhook.dra_cluster import SliceInventory, Templates
from gpuslice.webhook.explain import Explainer
from gpuslice.webhook.metrics import Metrics
from gpuslice.webhook.namespaces import NamespaceLabels, fetch_with
from gpuslice.webhook.tls import ReloadingTLS

__all__ = ["Server", "run"]

log = logging.getLogger(__name__)


class Server:
    """The webhook as a start/stop object (the command and the integration tests use it)."""

    def __init__(self, cfg: config.WebhookConfig, *, client: AsyncClient | None = None) -> None:
        self.cfg = cfg
        self.tls = ReloadingTLS(cfg.cert_file, cfg.key_file)
        self.metrics = Metrics(CollectorRegistry(), self.tls)
        self._client = client
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.inventory: SliceInventory | None = None
        self.port = 0

    def _ready(self) -> str | None:
        if self.tls.not_after <= time.time():
            return f"the serving certificate in {self.cfg.cert_file} has expired"
        if self.inventory is not None and self.inventory.current() is None:
            # DRA pods would be denied as if the cluster served no resource.k8s.io/v1
            return ("dra.enabled: the ResourceSlices are not listed yet (resource.k8s.io/v1 "
                    "served? the webhook may list and watch resourceslices?)")
        return None

    async def start(self) -> None:
        lookup = None
        if (self.cfg.check_namespace_labels or self.cfg.dra.enabled) and self._client is None:
            try:
                self._client = make_client(self.cfg.kubeconfig, timeout_s=2)
            except EnvironmentProblem as exc:
                raise EnvironmentProblem(
                    f"{exc} (the webhook reads namespace labels for its opt-out check "
                    "and, with dra.enabled, ResourceSlices; or set checkNamespaceLabels: "
                    "false to rely on the namespaceSelector alone)") from exc
        if self.cfg.check_namespace_labels and self._client is not None:
            lookup = NamespaceLabels(fetch_with(self._client),
                                     ttl_s=self.cfg.namespace_cache_seconds,
                                     on_error=self.metrics.namespace_lookup_errors.inc).get
        extra: dict[str, Any] = {}
        if self.cfg.dra.enabled and self._client is not None:
            extra = self._start_dra(self._client)
        app = make_app(self.cfg.options(), self.metrics, ready=self._ready,
                       namespace_labels=lookup, **extra)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.cfg.address, self.cfg.port,
                           ssl_context=self.tls.context)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise EnvironmentProblem(
                f"cannot listen on {self.cfg.address}:{self.cfg.port}: {exc.strerror or exc}; "
                "free the port or pass another with --port") from exc
        self.port = self._runner.addresses[0][1]
        self._watch = asyncio.create_task(self.tls.watch(self.cfg.tls_reload_seconds))
        log.info("admission webhook listening on https://%s:%d/mutate", self.cfg.address,
                 self.port)

    def _start_dra(self, client: AsyncClient) -> dict[str, Any]:
        """The DRA translation's view of the slices, its template writer and the explainer."""
        self.inventory = SliceInventory(client)
        self._tasks.append(asyncio.create_task(self.inventory.run()))
        if self.cfg.dra.explain_unschedulable:
            explainer = Explainer(client, self.inventory,
                                  defaults=self.cfg.options().defaults)
            self._tasks.append(asyncio.create_task(explainer.run()))
        return {"dra_inventory": self.inventory.current, "templates": Templates(client),
                "claims_client": client}

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()


async def _serve(cfg: config.WebhookConfig) -> None:
    server = Server(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        await stop.wait()
        log.info("stopping: signal received")
    finally:
        await server.stop()


def run(config_file: str | None, **flags: object) -> None:
    """The command: flags (None = not given) override the file and GPUSLICE_WEBHOOK_*."""
    cfg = config.load(config_file, **flags)
    ops.setup_logging(cfg.log_level)
    asyncio.run(_serve(cfg))

"""The running extender: client, the two informers, leader election, the sweeper and HTTP.

Owns: wiring the parts (ExtenderState fed by a Node informer and an informer of bound managed Pods
through the trimmers; Evaluator, Binder, Metrics, routes), readiness (both caches synced; leadership
is not part of it: a follower is ready for its role, answering filter/prioritize and refusing bind,
and a readiness that waited for the Lease would never let a rolling update finish; the
`gpuslice_scheduler_leader` gauge says which replica leads). `gpuslice scheduler` is command.py.
Does not: decide placement or write the API itself (bind.py does).
Failure: configuration and API-access problems raise ConfigError / EnvironmentProblem before
anything is served; watch failures are the informers' (back-off, relist), never fatal.
Tests: tests/integration/scheduler/
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from lightkube import AsyncClient
from lightkube import operators as op
from lightkube.resources.core_v1 import Node, Pod

from gpuslice import handoff, ops
from gpuslice.errors import EnvironmentProblem
from gpuslice.kube.cache import Change, Informer
from gpuslice.kube.events import EventRecorder
from gpuslice.kube.lease import LeaderElector
from gpuslice.scheduler import app as routes
from gpuslice.scheduler.bind import Binder
from gpuslice.scheduler.config import SchedulerConfig
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.follow import LeaseFollower
from gpuslice.scheduler.metrics import Metrics
from gpuslice.scheduler.recheck import FlightRecheck
from gpuslice.scheduler.state import ExtenderState, NodeFields, PodFields, trim_node, trim_pod

__all__ = ["Extender"]

log = logging.getLogger(__name__)

_SWEEP_S = 1.0


class Extender:
    """One extender replica. `start()` / `stop()` for tests, `run()` for the service."""

    def __init__(self, cfg: SchedulerConfig, client: AsyncClient, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg, self.client = cfg, client
        self.state = ExtenderState(timeout_s=cfg.in_flight_timeout_seconds, clock=clock)
        self.evaluator = Evaluator(self.state, cfg.placement_policy(), cfg.defaults.build(),
                                   scheduler_name=cfg.scheduler_name)
        self.recorder = EventRecorder(client, cfg.scheduler_name)
        self.metrics = Metrics(self.state)
        self.binder = Binder(client, self.evaluator, self.recorder, attempts=cfg.bind_attempts,
                             clock=clock, gang_split=self.metrics.gang_split.inc)
        self.metrics.leader.set_function(lambda: float(self.is_leader()))
        self.nodes: Informer[Any] = Informer(client, Node, trim=trim_node, schema=NodeFields,
                                             handler=self._node_changed)
        # bound pods only: a pending pod holds nothing, and filter and bind get it from
        # kube-scheduler (a creation and kube-scheduler's status writes are no events here)
        self.pods: Informer[Any] = Informer(client, Pod, labels={handoff.MANAGED_LABEL: "true"},
                                            fields={"spec.nodeName": op.not_equal("")},
                                            trim=trim_pod, schema=PodFields,
                                            handler=self._pod_changed)
        self.elector = self._elector()
        self._tasks: list[asyncio.Task[Any]] = []
        self._runner: web.AppRunner | None = None
        self._ops_runner: web.AppRunner | None = None
        self.port: int | None = None
        self.metrics_port: int | None = None

    def _elector(self) -> LeaderElector | LeaseFollower | None:
        le = self.cfg.leader_election
        if not le.enabled:
            return None
        if le.follow:
            return LeaseFollower(self.client, le.lease_name, le.lease_namespace,
                                 host=le.identity or None,
                                 retry_period_s=le.retry_period_seconds)
        return LeaderElector(self.client, le.lease_name, le.lease_namespace,
                             identity=le.identity or None, lease_duration_s=le.lease_seconds,
                             renew_deadline_s=le.renew_deadline_seconds,
                             retry_period_s=le.retry_period_seconds, recorder=self.recorder)

    # -- views for the routes --------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def starting(self) -> str | None:
        missing = [i.name for i in (self.nodes, self.pods) if not i.synced.is_set()]
        if missing:
            return (f"gpuslice-scheduler is starting: its cache of {' and '.join(missing)} is "
                    "not synced yet; kube-scheduler will retry")
        return None

    async def synced(self) -> None:
        await self.nodes.synced.wait()
        await self.pods.synced.wait()

    def app(self) -> web.Application:
        return routes.make_app(self.evaluator, self.binder, self.metrics, ready=self.starting,
                               is_leader=self.is_leader, recorder=self.recorder,
                               starting=self.starting, synced=self.synced,
                               choose_node=self.cfg.choose_node_in_filter,
                               recheck=FlightRecheck(self.client, self.pods, self.state,
                                                     self.metrics.rechecks))

    # -- life cycle --------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0,
                    sock: socket.socket | None = None) -> int:
        """Start the informers, the elector, the sweeper and HTTP (on `sock` if given, a socket
        already listening); returns the port."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.nodes.run()), loop.create_task(self.pods.run()),
                       loop.create_task(self._sweep())]
        if self.elector is not None:
            self._tasks.append(loop.create_task(self.elector.run()))
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        self.port = await self._listen(self._runner, host, port, "--port", sock)
        if self.cfg.metrics_address:  # the ops routes alone, on their own address
            ops_app = web.Application()
            ops.add_ops_routes(ops_app, ready=self.starting, registry=self.metrics.registry)
            self._ops_runner = web.AppRunner(ops_app, access_log=None)
            await self._ops_runner.setup()
            self.metrics_port = await self._listen(self._ops_runner,
                                                   *self.cfg.metrics_listener(),
                                                   "metricsAddress")
        return self.port

    async def _listen(self, runner: web.AppRunner, host: str, port: int, knob: str,
                      sock: socket.socket | None = None) -> int:
        site = web.TCPSite(runner, host, port) if sock is None else web.SockSite(runner, sock)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise EnvironmentProblem(f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
                                     f"free the port or choose another ({knob})") from exc
        bound = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        log.info("listening", extra={"address": host, "port": bound})
        return bound

    async def stop(self) -> None:
        self.nodes.stop()
        self.pods.stop()
        for task in self._tasks:  # a cancelled elector releases the Lease it holds
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for runner in (self._runner, self._ops_runner):
            if runner is not None:
                await runner.cleanup()
        self._runner = self._ops_runner = None
        await self.recorder.flush()
        await self.binder.poster.close()

    async def run(self, sock: socket.socket | None = None) -> None:
        """Serve until SIGTERM/SIGINT, then stop cleanly (the Lease is released)."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start(self.cfg.address, self.cfg.port, sock)
        freeze = loop.create_task(self._freeze_when_synced())  # not in _tasks: its end is normal
        try:
            done, _ = await asyncio.wait([*self._tasks, loop.create_task(stop.wait())],
                                         return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task in self._tasks and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]  # e.g. a bad selector
            log.info("stopping: %s", "signal received" if stop.is_set() else "a task ended")
        finally:
            freeze.cancel()
            await self.stop()

    async def _freeze_when_synced(self) -> None:
        """Once both caches hold the cluster, take them out of the garbage collector's sight
        (gc.freeze): a full collection would otherwise walk every cached Node and Pod (5,000
        nodes and 40,000 pods: 630,000 objects, a 0.4 s pause in the middle of a filter). Objects
        made later are collected as usual; only reference cycles among the frozen ones would
        outlive their use (one freeze, at start). No full collection first: the young one that
        ends the lists' pause (kube/cache.py) has freed their cycles, and another walk of
        everything held would only delay readiness."""
        await self.synced()
        gc.freeze()
        log.info("caches synced: %d objects frozen out of garbage collection",
                 gc.get_freeze_count())

    # -- feeds -------------------------------------------------------------------------------
    def _node_changed(self, c: Change[Any]) -> None:
        self.state.on_node(c.type, c.new if c.new is not None else c.old)

    def _pod_changed(self, c: Change[Any]) -> None:
        self.state.on_pod(c.type, c.new if c.new is not None else c.old)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            self.state.sweep()

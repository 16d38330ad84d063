"""`gpuslice node-agent`: the parts of the node agent put together, run, and stopped cleanly.

Owns: construction from the config (backend, health, cluster view, inventory, plugins, kubelet
link, exporter, watchdog, verification; with `dra.enabled` the DRA plugin, its sockets and the
ResourceSlice publisher, republished on health changes), the loops that drive them (the
device plugins' and DRA's started and stopped as the node's GPU path says, node/path.py),
installing the library into `<state-dir>/lib` (with the ld.so.preload that loads it), the
Allocate path (answer from the pod store, listed again before a pod's first answer and on a
miss; an ambiguous call is refused with an AllocateAmbiguous event on each pod concerned; then
write the container's region with its limits, regions.place, and create its pod's gang
directory, regions.prepare_gang; gang directories of live pods and of prepared DRA claims kept
by the watchdog's sweep), and SIGTERM/SIGINT handling.
Does not: hold any logic of its own beyond wiring; each decision lives in its module.
Invariants: the kubelet is served whatever the API server does; a stop closes the plugin
sockets, flushes events and leaves regions, DRA claims and the ResourceSlice in place
(containers keep running; `--remove-dra-slices` deletes the slice at uninstall).
Failure: start-up problems (no GPU, bad config, no library, no API configuration) raise
EnvironmentProblem/ConfigError before anything is served (CLI exit 3/1).
Tests: tests/integration/node/test_agent_with_kubelet.py, test_allocate_attacks.py,
tests/integration/dra/test_plugin_with_kubelet.py, tests/integration/node/test_gpu_path_per_node.py
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from gpuslice import handoff, model, ops
from gpuslice.aio import wait_set
from gpuslice.container import edits, regions
from gpuslice.dra import claims as dra_claims
from gpuslice.dra.kubelet import DraLink
from gpuslice.dra.plugin import ApiClaims, DraPlugin
from gpuslice.dra.publisher import SlicePublisher
from gpuslice.errors import EnvironmentProblem, GpusliceError
from gpuslice.kube import errors as kerrors
from gpuslice.kube.cache import Change, Informer
from gpuslice.node import allocate as alloc
from gpuslice.node import mig as mig_mode
from gpuslice.node import path as gpu_path
from gpuslice.node import verify
from gpuslice.node.cluster import Cluster
from gpuslice.node.exporter import AgentMetrics, UsageCollector
from gpuslice.node.health import Health
from gpuslice.node.install import install_library
from gpuslice.node.inventory import Inventory
from gpuslice.node.kubelet import KubeletLink
from gpuslice.node.nvml import GPUBackend
from gpuslice.node.plugin import DevicePlugin
from gpuslice.node.settings import NodeConfig
from gpuslice.node.swap import Swapper
from gpuslice.node.watchdog import Violation, Watchdog
from gpuslice.shim import AGENT_REGION

__all__ = ["Agent", "remove_dra_slices", "run"]

log = logging.getLogger(__name__)
DRA_SWEEP_S = 60.0  # how often prepared claims are checked for deletion (dra/plugin.sweep)
NODE_WAIT_S = 10.0  # at start, how long the GPU path waits for the Node's label (then: journal)


def _fully_allocated(pod: dict[str, Any]) -> bool:
    """A managed pod (the store holds every pod of the node) every GPU container of which has
    had its Allocate answered."""
    if (pod["metadata"].get("labels") or {}).get(handoff.MANAGED_LABEL) != "true":
        return False
    done = str((pod["metadata"].get("annotations") or {}).get(handoff.ALLOCATED, "")).split(",")
    try:
        requests = handoff.device_requests(pod)
    except GpusliceError:
        return False
    return bool(requests) and all(r.container in done for r in requests)


class Agent:
    def __init__(self, cfg: NodeConfig, backend: GPUBackend, client: AsyncClient, *,
                 library: Path) -> None:
        self.cfg = cfg
        self.backend = backend
        state = Path(cfg.state_dir)
        lib, preload = install_library(library, state, cfg.container_library_path)
        self.regions_root = state / "regions"
        self.regions_root.mkdir(parents=True, exist_ok=True)
        if f"{cfg.container_region_dir.rstrip('/')}/{edits.REGION_FILE}" != AGENT_REGION:
            log.warning("containerRegionDir %s is not where the library looks for the agent's "
                        "region (%s): containers then find their region through their env, "
                        "which a tenant can override (docs/shim.md, Threat model)",
                        cfg.container_region_dir, AGENT_REGION)
        self.layout = edits.Layout(
            library_host=str(lib), preload_host=str(preload), regions_host=str(self.regions_root),
            board_host=str(regions.prepare_board(state)),
            gangs_host=str(state / regions.GANGS_DIR),
            library_container=cfg.container_library_path,
            region_container_dir=cfg.container_region_dir, cdi=cfg.cdi,
            compute_mode=cfg.compute_mode)
        self.devices = backend.devices()
        self.health = Health(backend, [d.uuid for d in self.devices],
                             recovery_s=cfg.xid_recovery_seconds)
        self.metrics = AgentMetrics()
        self.cluster = Cluster(client, cfg.node_name, pod_resync_s=cfg.pod_resync_seconds,
                               mark_after_s=cfg.allocated_mark_after_seconds,
                               journal=state / "answered.json", on_mark=self.metrics.marks.inc)
        self.swapper = Swapper(client, self.regions_root, state / "swaps.json")
        self.mig = mig_mode.start(backend, self.devices, cfg.mig, state, hidden=cfg.hide_gpus) \
            if cfg.mode == "mig" else None  # type: ignore[arg-type]  # nvml.MigBackend too
        self.inventory = Inventory(self.devices, cfg, self.cluster.set_node_annotation,
                                   decorate=self.mig.decorate if self.mig else None)
        self._pod_views = alloc.PodViews(cfg.node_name)
        self.path = gpu_path.GpuPath(
            state / "gpu-path", default=cfg.gpu_path,
            available=[p for p, ok in ((gpu_path.DEVICE_PLUGIN, cfg.resources),
                                       (gpu_path.DRA, cfg.dra.enabled)) if ok])
        self._path_due = asyncio.Event()
        self._serving: dict[str, list[asyncio.Task[Any]]] = {}  # path -> its running loops
        self._stale_slice_checked = False  # a device-plugin node removes a slice left over
        self.node_watch: Informer[dict[str, Any]] = Informer(
            client, Node, fields={"metadata.name": cfg.node_name}, handler=self._on_node,
            name="this node")
        self._init_dra(client, state)
        self.metrics.add_usage(UsageCollector(
            backend, self.regions_root, self.gpus, self._pod_names, self._assignments,
            claims_root=self.dra.root if self.dra else None,
            claims=self.dra.prepared if self.dra else dict))
        self._new_device_plugins()
        self.watchdog = Watchdog(backend, self.regions_root, cfg.watchdog, gpus=self.gpus,
                                 assignments=self._assignments, pods_fresh=self._pods_fresh,
                                 claims_root=self.dra.root if self.dra else None,
                                 claims=self.dra.prepared if self.dra else dict,
                                 gangs_root=self.layout.gangs_host)
        self._mismatch_reported: set[str] = set()
        # (pod uid, resource) -> device IDs answered for the pod's containers while it is in
        # flight: the kubelet gives later containers its init containers' IDs again
        self._given: dict[tuple[str, str], set[str]] = {}
        self._suspects: set[tuple[str, str, frozenset[str]]] = set()
        self._stop = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def _init_dra(self, client: AsyncClient, state: Path) -> None:
        """The DRA driver's node half when `dra.enabled`: kubelet plugin, sockets, slice."""
        self.dra: DraPlugin | None = None
        self.dra_link: DraLink | None = None
        self.publisher: SlicePublisher | None = None
        self.slice_watch: Informer[dict[str, Any]] | None = None
        self._slices_due = asyncio.Event()
        d = self.cfg.dra
        if not d.enabled:
            return
        minors = {dev.uuid: dev.minor for dev in self.devices if dev.minor is not None}
        self.dra = DraPlugin(
            driver=d.driver_name, node=self.cfg.node_name, api=ApiClaims(client),
            devices=lambda: dra_claims.node_devices(self.gpus(), d.memory_step_mib, minors),
            state_dir=state, cdi_dir=d.cdi_dir, layout=self.layout,
            grace_s=self.cfg.watchdog.region_grace_seconds)
        first = self.devices[0]
        self.publisher = SlicePublisher(client, self.cfg.node_name, d, log=log,
                                        events=self.cluster.events,
                                        driver_version=first.driver_version,
                                        cuda_driver_version=first.cuda_driver_version)
        self._new_dra_link(client)

    def _new_dra_link(self, client: AsyncClient) -> None:
        """Fresh kubelet link and slice watch (each serves once: the GPU path restarts them)."""
        assert self.dra is not None and self.publisher is not None
        d = self.cfg.dra
        # a starting kubelet deletes the node's ResourceSlices, then registers the plugins it
        # finds: publish again at every registration
        self.dra_link = DraLink(self.dra, driver=d.driver_name, plugin_dir=d.plugin_dir,
                                registry_dir=d.registry_dir, on_registered=self._slices_due.set)
        # a slice deleted or edited by someone else (the kubelet deletes them when it starts,
        # possibly after our registration's publish) is published again at once
        self.slice_watch = Informer(client, ResourceSlice,
                                    fields={"metadata.name": self.publisher.name},
                                    handler=self._on_slice, name="resourceslices")

    def _new_device_plugins(self) -> None:
        """Fresh device plugins and kubelet link, offering what the GPU path allows."""
        self.plugins = [DevicePlugin(r, gpu_path.Offer(self, self.path))
                        for r in self.cfg.resources]
        self.kubelet = KubeletLink(
            self.cfg.device_plugin_dir, self.plugins,
            on_registered=lambda r: self.metrics.registrations.labels(r).inc())

    def _on_slice(self, change: Change[dict[str, Any]]) -> None:
        """Publish again when the slice is gone or is not the version we last wrote."""
        assert self.publisher is not None
        seen = ((change.new or {}).get("metadata") or {}).get("resourceVersion")
        ours = ((self.publisher.stored or {}).get("metadata") or {}).get("resourceVersion")
        if change.new is None or seen != ours:
            self._slices_due.set()

    # ---- what the plugins ask (plugin.Source)
    def gpus(self) -> tuple[model.GPU, ...]:
        return self.inventory.gpus

    def _views(self) -> tuple[list[alloc.InFlight], dict[str, model.PodAssignment],
                              list[alloc.Stranger]]:
        flights, assigned, strangers = self._pod_views.views(
            self.cluster.pods(), time.time(), self.cfg.in_flight_timeout_seconds)
        return flights, self.swapper.settled(assigned), strangers

    def _answer(self, resource: str, device_ids: Sequence[str]) -> alloc.Answer:
        flights, assigned, strangers = self._views()
        live = {f.flight.uid for f in flights}
        for key in [k for k in self._given if k[0] not in live]:  # done, gone or timed out
            del self._given[key]
        return alloc.answer(flights, assigned, {g.uuid: g for g in self.gpus()}, resource,
                            device_ids, self.layout,
                            given={uid: ids for (uid, r), ids in self._given.items()
                                   if r == resource}, strangers=strangers)

    async def _proven_answer(self, resource: str, device_ids: Sequence[str]) -> alloc.Answer:
        """The answer from a view that holds every pod the kubelet could be admitting: the
        first call of a pod (or one refused) lists the node's pods again, since a pod the watch
        has not delivered yet could be a claimant too (allocate.match); a pod in progress owns
        the call. While the API server does not answer, the last view serves."""
        try:
            a = self._answer(resource, device_ids)
        except alloc.AllocateError:
            if not await self.cluster.refresh():  # the pod may be newer than the store
                raise
            return self._answer(resource, device_ids)
        if not a.in_progress and await self.cluster.refresh():
            a = self._answer(resource, device_ids)
        return a

    def _report_ambiguous(self, resource: str, exc: alloc.AmbiguousAllocate) -> None:
        log.warning("AllocateAmbiguous: %s", exc, extra={"resource": resource})
        for ns, name, uid in exc.pods:
            ref = self._pod(uid) or {"apiVersion": "v1", "kind": "Pod",
                                     "metadata": {"namespace": ns, "name": name, "uid": uid}}
            self.cluster.warn(ref, "AllocateAmbiguous", str(exc))

    async def allocate(self, resource: str, device_ids: Sequence[str]) -> alloc.Answer:
        try:
            a = await self._proven_answer(resource, device_ids)
            if self.mig is not None:
                a = await asyncio.to_thread(self._mig_answer, a)
            how = regions.place(regions.prepare(self.regions_root, a.pod_uid, a.container) /
                                edits.REGION_FILE, a.region)
            if a.gang:  # the directory the answer mounts: there before the container starts
                regions.prepare_gang(self.layout.gangs_host, a.pod_key.split("/", 1)[0], a.gang)
            if how == "replaced":
                log.warning("the container's region did not hold its assignment's limits; "
                            "replaced", extra={"pod": a.pod_key, "container": a.container})
        except alloc.AmbiguousAllocate as exc:
            self.metrics.allocations.labels(resource, "ambiguous").inc()
            self._report_ambiguous(resource, exc)
            raise
        except alloc.AllocateError:
            self.metrics.allocations.labels(resource, "refused").inc()
            raise
        except Exception:
            self.metrics.allocations.labels(resource, "error").inc()
            raise
        ns, name = a.pod_key.split("/", 1)
        self._given.setdefault((a.pod_uid, resource), set()).update(device_ids)
        self.cluster.answered(ns, name, a.pod_uid, a.container)
        self.metrics.allocations.labels(resource, "ok").inc()
        log.info("Allocate answered", extra={"pod": a.pod_key, "container": a.container,
                                             "gpus": ",".join(a.gpus), "resource": resource})
        return a

    async def preferred(self, resource: str, available: Sequence[str],
                        must_include: Sequence[str], size: int) -> list[str]:
        flights = self._views()[0]
        if handoff.match_allocate([f.flight for f in flights], resource, size) is None and \
                await self.cluster.refresh():  # the pod may be newer than the store
            flights = self._views()[0]
        return alloc.preferred(flights, resource, available, must_include, size)

    # ---- views for the exporter and watchdog
    def _assignments(self) -> dict[str, model.PodAssignment]:
        return self._views()[1]

    def _pod_names(self) -> dict[str, tuple[str, str]]:
        return {str(p["metadata"].get("uid")): (p["metadata"].get("namespace", ""),
                                                p["metadata"].get("name", ""))
                for p in self.cluster.pods()}

    def _pods_fresh(self) -> bool:
        return self.cluster.reachable and \
            time.time() - self.cluster.last_list < 2 * self.cfg.pod_resync_seconds

    def _pod(self, uid: str | None) -> dict[str, Any] | None:
        return next((p for p in self.cluster.pods() if p["metadata"].get("uid") == uid), None)

    def ready(self) -> str | None:
        missing = [p.resource for p in self.plugins if p.resource not in self.kubelet.registered
                   and gpu_path.DEVICE_PLUGIN in self._serving]
        if gpu_path.DRA in self._serving and self.dra_link is not None and \
                not self.dra_link.registered:
            missing.append(f"the DRA driver {self.cfg.dra.driver_name}")
        problems = [f"not registered with the kubelet for {', '.join(missing)}"] if missing else []
        if not self._serving:
            problems.append("serving no GPU path yet (waiting for this Node's labels)")
        if self.path.problem:
            problems.append(self.path.problem)
        if self.publisher is not None and self.publisher.problem:
            problems.append(self.publisher.problem)
        return "; ".join(problems) or None

    # ---- loops
    async def _health_once(self, wait_s: float) -> None:
        events = await asyncio.to_thread(self.backend.wait_events, wait_s)
        changed = self.health.on_events(events)
        changed = self.health.poll() or changed
        for e in events:
            log.warning("GPU critical XID %d", e.xid, extra={"gpu": e.uuid})
        if self.inventory.update(self.health.unhealthy) or changed:
            log.info("GPU health changed", extra={"unhealthy": self.health.unhealthy})
            for p in self.plugins:
                await p.changed()
            self._slices_due.set()

    async def _verify_once(self) -> None:
        if self.swapper.entries:  # a swap left half done (error, or a kill): finish it first
            await self._finish_swaps()
        try:
            actual = await verify.list_pod_resources(self.cfg.pod_resources_socket)
        except Exception as exc:  # grpc errors, a missing socket: try again next round
            log.warning("PodResources List failed: %s", exc)
            return
        pending = self.swapper.pending()
        pods = [p for p in self.cluster.pods() if _fully_allocated(p)
                and str(p["metadata"].get("uid")) not in pending]
        pairs, left = verify.swaps(verify.compare(pods, actual, self.cfg.resources))
        for a, b in pairs:
            self.swapper.start(a, b)
        if pairs:
            await self._finish_swaps()
        # the kubelet records a container's devices just after its Allocate returns, so one
        # round may see half of a swap: report what two rounds in a row agree on
        seen = {(str(m.pod["metadata"].get("uid")), m.container, m.actual) for m in left}
        suspects, self._suspects = self._suspects, seen
        for m in left:
            uid = str(m.pod["metadata"].get("uid"))
            if uid in self._mismatch_reported or (uid, m.container, m.actual) not in suspects:
                continue
            self._mismatch_reported.add(uid)
            self.metrics.mismatches.inc()
            msg = (f"container {m.container} is assigned {', '.join(sorted(m.assigned))} but "
                   f"the kubelet gave it devices on {', '.join(sorted(m.actual))}; its limits "
                   "may not match the GPUs it uses: delete the pod so it is placed again")
            log.error("AllocateMismatch: %s", msg, extra={"pod_uid": uid})
            self.cluster.warn(m.pod, "AllocateMismatch", msg)

    async def _finish_swaps(self) -> None:
        """Complete journalled swaps (swap.py): those begun this round, and any an error or a
        kill left half done."""
        done = await self.swapper.finish()
        for entry in done:
            self.metrics.swaps.inc()
            names = [f"{p['namespace']}/{p['name']}" for p in entry]
            for p, other in ((entry[0], names[1]), (entry[1], names[0])):
                ref = self._pod(p["uid"]) or {"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": p["name"], "namespace": p["namespace"], "uid": p["uid"]}}
                self.cluster.note(ref, "AllocateSwapped", f"the kubelet gave this pod the GPUs "
                                  f"assigned to the interchangeable pod {other}; assignments "
                                  "swapped")
            log.info("swapped assignments of interchangeable pods", extra={"pods": names})
        if done or self.swapper.entries:
            await self.cluster.refresh()

    def _report(self, v: Violation) -> None:
        self.metrics.violations.labels(v.kind).inc()
        if self.cfg.watchdog.kill:
            self.metrics.kills.inc(len(v.pids))
        msg = v.message() + ("; the watchdog killed it" if self.cfg.watchdog.kill else "")
        log.warning("LimitViolation: %s", msg, extra={"gpu": v.uuid, "pod_uid": v.pod_uid})
        claim = self.dra.prepared().get(v.pod_uid or "") if self.dra else None
        if claim is not None:  # a DRA claim's region: tell its (first) pod
            msg = f"claim {claim.key}: {msg}"
        pod = self._pod(claim.pods[0][1] if claim and claim.pods else v.pod_uid)
        self.cluster.warn(pod or self.cluster.node_ref(), "LimitViolation", msg)

    async def _watchdog_once(self) -> None:
        for v in await asyncio.to_thread(self.watchdog.check):
            self._report(v)
        live = {str(p["metadata"].get("uid")) for p in self.cluster.pods()}
        for uid in self.watchdog.sweep(live):
            log.info("removed regions of a pod that no longer exists", extra={"pod_uid": uid})
        # a DRA pod names its gang like any pod; a prepared claim's CDI spec mounts its gang's
        # directory for as long as it is prepared, whichever pods use it now
        gangs = alloc.live_gangs(self.cluster.pods(), self.cfg.node_name) | \
            (self.dra.gangs() if self.dra else set())
        for gang in self.watchdog.sweep_gangs(gangs):
            log.info("removed the directory of a gang no pod on this node names",
                     extra={"gang": gang})

    async def _publish_slices(self) -> None:
        """Publish the node's ResourceSlice at start, on every change of GPU health, at every
        registration with the kubelet and every inventoryIntervalSeconds (a deleted or edited
        slice heals); retry a failure after 5 s, doubling up to inventoryIntervalSeconds."""
        assert self.publisher is not None
        failing = 0.0
        while not self._stop.is_set():
            self._slices_due.clear()
            try:
                await self.publisher.publish(self.path.advertised(gpu_path.DRA, self.gpus()))
                wait, failing = self.cfg.inventory_interval_seconds, 0.0
            except Exception as exc:  # API errors, a GPU below one memory step (ConfigError)
                wait = failing = min(self.cfg.inventory_interval_seconds, 2 * failing or 5.0)
                hint = ("; does the API server serve resource.k8s.io/v1 (Kubernetes 1.34+)?"
                        if isinstance(exc, kerrors.NotFound) else "")
                log.warning("publishing the ResourceSlice failed: %s%s; retrying in %.0f s",
                            exc, hint, wait)
            await wait_set(self._slices_due, wait)

    async def _dra_sweep(self) -> None:
        assert self.dra is not None
        live = {str(p["metadata"].get("uid")) for p in self.cluster.pods()} \
            if self._pods_fresh() else None
        await self.dra.sweep(live_pods=live)

    # ---- the node's GPU path (node/path.py): one of device plugins and DRA serves
    def _on_node(self, change: Change[dict[str, Any]]) -> None:
        self.path.on_node(change.new)
        self._path_due.set()

    async def _holders(self) -> list[str] | None:
        """Who holds GPUs through the current path (None: cannot tell)."""
        if self.path.current == gpu_path.DRA:
            return sorted(c.key for c in self.dra.prepared().values()) if self.dra else []
        return await gpu_path.device_plugin_holders(self.cfg.pod_resources_socket)

    async def _follow_path(self) -> None:
        """Serve the node's path; switch when its label asks and nothing holds the old one."""
        # the label first; if the API is away: the journal
        if await wait_set(self.node_watch.synced, NODE_WAIT_S):
            self.path.on_node(next(iter(self.node_watch.store.values()), None))
        while not self._stop.is_set():
            self._path_due.clear()
            try:
                holders = await self._holders() if self.path.switching() else []
                if self.path.settle(holders):  # drains now, or drains no more
                    for p in self.plugins:
                        await p.changed()
                    self._slices_due.set()
                await self._serve_path()
            except Exception:
                log.exception("following the node's GPU path failed; continuing")
            await wait_set(self._path_due, self.cfg.verify_interval_seconds)

    async def _serve_path(self) -> None:
        """Start what the current path needs, stop the other (DRA also serves while claims it
        prepared are left: the kubelet unprepares them through it)."""
        want = {gpu_path.DEVICE_PLUGIN: self.path.current == gpu_path.DEVICE_PLUGIN,
                gpu_path.DRA: self.dra is not None and (
                    self.path.current == gpu_path.DRA or bool(self.dra.prepared()))}
        for path in [p for p, on in want.items() if not on and p in self._serving]:
            await self._stop_path(path, leaving=True)  # first: never two paths at once
        for path in [p for p, on in want.items() if on and p not in self._serving]:
            self._serving[path] = [asyncio.create_task(c) for c in self._path_loops(path)]
            log.info("serving the GPUs through %s", path, extra={"node": self.cfg.node_name})
        if self.publisher is not None and gpu_path.DRA not in self._serving and \
                not self._stale_slice_checked:  # from an agent that served both, or DRA
            await self.publisher.remove()
            self._stale_slice_checked = True

    def _path_loops(self, path: str) -> list[Awaitable[None]]:
        if path == gpu_path.DEVICE_PLUGIN:
            return [self.kubelet.run()]
        assert self.dra_link is not None and self.slice_watch is not None
        return [self.dra_link.run(), self._publish_slices(), self.slice_watch.run(),
                self._every(DRA_SWEEP_S, self._dra_sweep)]

    async def _stop_path(self, path: str, *, leaving: bool) -> None:
        """Stop serving `path`; `leaving` (the node moved to the other path): DRA's slice is
        deleted too (a plain stop keeps it: remove_dra_slices at uninstall)."""
        tasks = self._serving.pop(path)
        if path == gpu_path.DEVICE_PLUGIN:
            await self.kubelet.stop()
        elif self.dra_link is not None:
            await self.dra_link.stop()
            if self.slice_watch is not None:  # a cancel alone can be taken for a lost watch
                self.slice_watch.stop()
        for t in tasks:
            t.cancel()
        _, stuck = await asyncio.wait(tasks, timeout=5) if tasks else (set(), set())
        if stuck:
            log.error("%d loop(s) of the %s path did not stop within 5 s", len(stuck), path)
        if not leaving:
            return
        if path == gpu_path.DEVICE_PLUGIN:  # a link serves once: fresh ones for a way back
            self._new_device_plugins()
        elif self.publisher is not None:
            await self.publisher.remove()
            self._new_dra_link(self.publisher.client)
        log.info("stopped serving the GPUs through %s", path)

    async def _every(self, seconds: float, step: Callable[[], Awaitable[None]]) -> None:
        while not self._stop.is_set():
            try:
                await step()
            except Exception:
                log.exception("%s failed; continuing", getattr(step, "__name__", step))
            await wait_set(self._stop, seconds)

    async def _gauges(self) -> None:
        self.metrics.queued.set(self.cluster.queued)
        self.metrics.reachable.set(1 if self.cluster.reachable else 0)

    async def serve_http(self) -> None:
        app = web.Application()
        ops.add_ops_routes(app, ready=self.ready, registry=self.metrics.registry)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, _, port = self.cfg.metrics_address.rpartition(":")
        site = web.TCPSite(self._runner, host or "0.0.0.0", int(port))
        try:
            await site.start()
        except OSError as exc:
            raise EnvironmentProblem(f"cannot listen on {self.cfg.metrics_address} for /metrics: "
                                     f"{exc.strerror}; choose another metricsAddress") from None

    def _mig_answer(self, a: alloc.Answer) -> alloc.Answer:
        """MIG mode: the container's instances (made now if missing) instead of the library."""
        assert self.mig is not None
        live = alloc.assigned_pods(self.cluster.pods(), self.cfg.node_name)
        pod = live.get(a.pod_uid)
        slices = next((c.slices for c in pod.containers if c.container == a.container), ()) \
            if pod else ()
        return self.mig.answer(a, self.mig.attach(a.pod_uid, slices, live), self.cfg.cdi)

    async def _mig_once(self) -> None:
        """MIG mode: instances of ended pods destroyed (only on a fresh pod list), and the
        inventory republished when instances changed."""
        assert self.mig is not None
        if self._pods_fresh():
            live = alloc.assigned_pods(self.cluster.pods(), self.cfg.node_name)
            await asyncio.to_thread(self.mig.reconcile, live)
        if self.mig.changed:
            self.inventory.update(self.health.unhealthy)

    async def run(self) -> None:
        """Serve until stop()."""
        self.inventory.update({})
        await self.serve_http()
        loops = [
            self.cluster.run(), self.node_watch.run(), self._follow_path(),
            self._every(0, lambda: self._health_once(self.cfg.health_interval_seconds)),
            self._every(self.cfg.verify_interval_seconds, self._verify_once),
            self._every(self.cfg.watchdog.interval_seconds, self._watchdog_once),
            self._every(1.0, self._gauges),
            *([self._every(self.cfg.verify_interval_seconds, self._mig_once)] if self.mig else []),
        ]
        tasks = [asyncio.create_task(c) for c in loops]
        log.info("node agent serving", extra={"node": self.cfg.node_name,
                                               "gpus": len(self.gpus()),
                                               "resources": self.cfg.resources})
        try:
            await self._stop.wait()
        finally:
            for path in list(self._serving):
                await self._stop_path(path, leaving=False)
            self.node_watch.stop()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.cluster.events.flush()
            if self._runner is not None:
                await self._runner.cleanup()
            self.backend.close()

    def stop(self) -> None:
        self._stop.set()
        self._slices_due.set()
        self._path_due.set()


async def _main(cfg: NodeConfig, backend_spec: str, library: str | None) -> None:
    from gpuslice.kube.client import make_client
    from gpuslice.node.nvml import open_backend
    from gpuslice.shim import library_path

    lib = Path(library) if library else library_path()
    if not lib.is_file():
        raise EnvironmentProblem(f"--library {lib}: no such file; give the built libgpuslice.so")
    backend = open_backend(backend_spec)
    agent = Agent(cfg, backend, make_client(cfg.kubeconfig), library=lib)
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, agent.stop)
    await agent.run()


async def remove_dra_slices(cfg: NodeConfig) -> None:
    """Uninstall: delete this node's ResourceSlices of the DRA driver (a normal stop keeps
    them, so that a restart does not make kube-scheduler see the node without GPUs)."""
    from gpuslice.kube.client import make_client

    await SlicePublisher(make_client(cfg.kubeconfig), cfg.node_name, cfg.dra, log=log).remove()


def run(*, config_file: str | None, flags: dict[str, Any], library: str | None,
        remove_slices: bool = False) -> None:
    """The CLI command: load the config, then serve until SIGTERM/SIGINT."""
    from gpuslice.node.settings import load

    cfg = load(config_file, flags)
    ops.setup_logging(cfg.log_level)
    try:
        asyncio.run(remove_dra_slices(cfg) if remove_slices else
                    _main(cfg, cfg.gpu_backend, library))
    except GpusliceError:
        raise
    except PermissionError as exc:
        raise EnvironmentProblem(f"{exc.filename}: permission denied; the node agent needs root "
                                 "(or write access to stateDir and devicePluginDir)") from None

"""/metrics for the node: per container from the shared regions, per GPU from NVML, slots, and
the agent's own counters. docs/metrics.md lists every name; the Grafana dashboard uses them.

Owns: `AgentMetrics` (the registry: counters the other modules bump, and `UsageCollector`, which
reads the regions (device-plugin containers' and DRA claims') and NVML at scrape time, so values
are never older than the scrape).
Does not: serve HTTP (ops.add_ops_routes does) or act on what it reads (watchdog.py).
Invariants: a region that cannot be read (a tenant's FIFO, symlink, huge or foreign file) is
counted in gpuslice_region_unreadable and skipped; a GPU NVML cannot query is skipped and
shows as gpuslice_gpu_healthy 0. Compute busy time is a true counter: the collector keeps the
busy seconds of processes that have exited, so it never goes down while the container lives.
Tests: tests/integration/node/test_exporter_reads_real_regions.py,
tests/unit/node/test_metric_names.py
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuslice import model
from gpuslice.allocator.usage import AllocationError, footprint
from gpuslice.container import regions
from gpuslice.container.limits import ClaimShares
from gpuslice.node.nvml import GPUBackend, GPULost

__all__ = ["AgentMetrics", "UsageCollector"]

log = logging.getLogger(__name__)
MiB = 1 << 20
# claim (namespace/name) and share (shareIDs) are empty for device-plugin containers; a DRA
# claim's region has pod = the pods of its reservedFor and an empty container (all share it)
CONTAINER = ["namespace", "pod", "container", "claim", "share"]
GPU_LABELS = ["uuid", "index", "model"]


class UsageCollector(Collector):
    def __init__(self, backend: GPUBackend, regions_root: str | Path,
                 gpus: Callable[[], Sequence[model.GPU]],
                 pods: Callable[[], Mapping[str, tuple[str, str]]],
                 assignments: Callable[[], Mapping[str, model.PodAssignment]], *,
                 claims_root: str | Path | None = None,
                 claims: Callable[[], Mapping[str, ClaimShares]] = dict) -> None:
        self.backend = backend
        self.root = Path(regions_root)
        self.claims_root = Path(claims_root) if claims_root is not None else None
        self.claims = claims  # claim uid -> its shares (the DRA plugin's checkpoint)
        self.gpus = gpus
        self.pods = pods  # uid -> (namespace, name)
        self.assignments = assignments  # uid -> assignment (live pods on this node)
        self._busy_done: dict[tuple[str, str], float] = {}  # busy seconds of exited processes
        self._busy_live: dict[tuple[str, str], dict[tuple[int, int, int], float]] = {}

    def _busy(self, key: tuple[str, str], procs: Iterable[Any]) -> float:
        """Container busy seconds, monotonic across process exits."""
        now = {(p.slot, p.pid, p.start_time): p.gpu_busy_ns / 1e9 for p in procs}
        before = self._busy_live.get(key, {})
        gone = sum(v for k, v in before.items() if k not in now)
        self._busy_done[key] = self._busy_done.get(key, 0.0) + gone
        self._busy_live[key] = now
        return self._busy_done[key] + sum(now.values())

    def collect(self) -> Iterator[Any]:
        yield from self._containers()
        yield from self._gpus()

    def _containers(self) -> Iterator[Any]:
        used = GaugeMetricFamily("gpuslice_container_memory_used_bytes",
                                 "Device memory the container's processes hold on the GPU "
                                 "(accounted by libgpuslice)", labels=[*CONTAINER, "uuid"])
        limit = GaugeMetricFamily("gpuslice_container_memory_limit_bytes",
                                  "The container's memory cap on the GPU",
                                  labels=[*CONTAINER, "uuid"])
        busy = CounterMetricFamily("gpuslice_container_compute_busy_seconds",
                                   "GPU busy time of the container's work (rate() = share of "
                                   "one GPU)", labels=CONTAINER)
        climit = GaugeMetricFamily("gpuslice_container_compute_limit_percent",
                                   "The container's compute cap, percent of one GPU (0 = none)",
                                   labels=CONTAINER)
        procs = GaugeMetricFamily("gpuslice_container_processes",
                                  "Processes of the container registered in its region",
                                  labels=CONTAINER)
        bad = GaugeMetricFamily("gpuslice_region_unreadable",
                                "Region files that are not a readable gpuslice region (tenant "
                                "tampering, version skew)")
        unreadable = 0
        seen = set()
        for cr, labels, shares in self._regions():
            if cr.problem is not None:
                unreadable += 1
                log.warning("region unreadable: %s", cr.problem, extra={"pod_uid": cr.pod_uid})
                continue
            if cr.region is None:
                continue
            for d in cr.region.by_uuid().values():
                per_gpu = [*labels[:4], shares.get(d.uuid, labels[4]), d.uuid]
                used.add_metric(per_gpu, d.used)
                limit.add_metric(per_gpu, d.limit)
            live = [p for p in cr.region.processes if p.state == "live"]
            key = (cr.pod_uid, cr.container)
            seen.add(key)
            busy.add_metric(labels, self._busy(key, live))
            climit.add_metric(labels, cr.region.sm_limit)
            procs.add_metric(labels, len(live))
        for key in set(self._busy_live) - seen:  # the container's region is gone
            self._busy_live.pop(key, None)
            self._busy_done.pop(key, None)
        bad.add_metric([], unreadable)
        yield from (used, limit, busy, climit, procs, bad)

    def _regions(self) -> Iterator[tuple[regions.ContainerRegion, list[str], dict[str, str]]]:
        """Each region with its labels and, for a DRA claim, the shareIDs on each GPU."""
        pods = self.pods()
        for cr in regions.scan(self.root):
            ns, name = pods.get(cr.pod_uid, ("", cr.pod_uid))
            yield cr, [ns, name, cr.container, "", ""], {}
        if self.claims_root is None:
            return
        known = self.claims()
        for cr in regions.scan_claims(self.claims_root):
            c = known.get(cr.pod_uid)
            if c is None:  # prepared a moment ago, or being removed
                yield cr, ["", "", "", cr.pod_uid, ""], {}
                continue
            per_gpu: dict[str, list[str]] = {}
            for s in c.shares:
                per_gpu.setdefault(s.uuid, []).append(s.share_id or "")
            yield cr, [c.namespace, ",".join(p for p, _ in c.pods), "", c.key,
                       ",".join(s.share_id or "" for s in c.shares)], \
                {u: ",".join(ids) for u, ids in per_gpu.items()}

    def _gpus(self) -> Iterator[Any]:
        fams = {
            "memory_used": GaugeMetricFamily("gpuslice_gpu_memory_used_bytes",
                                             "Device memory in use (NVML)", labels=GPU_LABELS),
            "memory_total": GaugeMetricFamily("gpuslice_gpu_memory_total_bytes",
                                              "Device memory (NVML)", labels=GPU_LABELS),
            "utilisation": GaugeMetricFamily("gpuslice_gpu_utilization_percent",
                                             "GPU utilisation over NVML's last sample period",
                                             labels=GPU_LABELS),
            "temperature": GaugeMetricFamily("gpuslice_gpu_temperature_celsius",
                                             "GPU temperature", labels=GPU_LABELS),
            "power_watts": GaugeMetricFamily("gpuslice_gpu_power_watts", "GPU power draw",
                                             labels=GPU_LABELS),
        }
        healthy = GaugeMetricFamily("gpuslice_gpu_healthy",
                                    "1 when the GPU is advertised healthy to the kubelet",
                                    labels=GPU_LABELS)
        slots = GaugeMetricFamily("gpuslice_gpu_slots", "Slices the GPU may hold (split count)",
                                  labels=GPU_LABELS)
        slots_used = GaugeMetricFamily("gpuslice_gpu_slots_used",
                                       "Slices assigned on the GPU to live pods", labels=GPU_LABELS)
        node_slots = GaugeMetricFamily("gpuslice_node_slots", "Slices the node's healthy GPUs may "
                                       "hold")
        node_used = GaugeMetricFamily("gpuslice_node_slots_used",
                                      "Slices assigned on the node to live pods")
        taken: dict[str, int] = {}
        for uid, a in self.assignments().items():
            try:
                for u, use in footprint(a).items():
                    taken[u] = taken.get(u, 0) + use.slots
            except AllocationError:
                log.warning("pod %s: assignment unusable for slot counts", uid)
        total = used_total = 0
        for g in self.gpus():
            labels = [g.uuid, str(g.index), g.model]
            healthy.add_metric(labels, 1 if g.healthy else 0)
            slots.add_metric(labels, g.split_count)
            slots_used.add_metric(labels, taken.get(g.uuid, 0))
            used_total += taken.get(g.uuid, 0)
            total += g.split_count if g.healthy else 0
            try:
                s = self.backend.stats(g.uuid)
            except GPULost:
                continue
            for key, fam in fams.items():
                value = getattr(s, key)
                if value is not None:
                    fam.add_metric(labels, value)
        node_slots.add_metric([], total)
        node_used.add_metric([], used_total)
        yield from (*fams.values(), healthy, slots, slots_used, node_slots, node_used)


class AgentMetrics:
    """The agent's registry: UsageCollector plus the counters its parts bump."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.allocations = Counter("gpuslice_allocations", "Allocate calls answered, by result "
                                   "(ok, refused: no pod or failed check, ambiguous: could be "
                                   "another pod's, error: a bug)",
                                   ["resource", "result"], registry=r)
        self.mismatches = Counter("gpuslice_allocate_mismatches",
                                  "Containers whose kubelet devices differ from their assignment "
                                  "(PodResources check)", registry=r)
        self.swaps = Counter("gpuslice_allocate_swaps", "Interchangeable pods whose assignments "
                             "were swapped to match what the kubelet gave them", registry=r)
        self.violations = Counter("gpuslice_limit_violations", "Processes found over their "
                                  "container's memory limit (over_limit) or on a shared GPU "
                                  "without the library (unmanaged)", ["kind"], registry=r)
        self.kills = Counter("gpuslice_watchdog_kills", "Processes the watchdog killed",
                             registry=r)
        self.registrations = Counter("gpuslice_kubelet_registrations",
                                     "Successful registrations with the kubelet", ["resource"],
                                     registry=r)
        self.marks = Counter("gpuslice_allocated_marks", "gpuslice.io/allocated marks written: "
                             "pods the kubelet had not shown admitted "
                             "allocatedMarkAfterSeconds after their Allocate answer",
                             registry=r)
        self.queued = Gauge("gpuslice_node_agent_queued_writes",
                            "API writes waiting for the API server", registry=r)
        self.reachable = Gauge("gpuslice_node_agent_api_reachable",
                               "1 when the last API call succeeded", registry=r)

    def add_usage(self, collector: UsageCollector) -> None:
        self.registry.register(collector)

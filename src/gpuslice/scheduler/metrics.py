"""The extender's Prometheus metrics, in its own registry (served at /metrics by ops.py).

Owns: request latency per verb, pods placed, pods refused by reason, flights read again
(recheck.py), bind failures, gangs split over nodes, leadership,
and the per-GPU allocation (memory, cores, slices) read from the state at scrape time (a
collector: 40,000 GPUs cost nothing between scrapes).
Tests: tests/unit/scheduler/test_app.py
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuslice.scheduler.state import ExtenderState

__all__ = ["Metrics"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _Allocation(Collector):
    def __init__(self, state: ExtenderState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        labels = ["node", "gpu", "model"]
        mem = GaugeMetricFamily("gpuslice_gpu_allocated_memory_mib",
                                "GPU memory held by placed slices", labels=labels)
        cores = GaugeMetricFamily("gpuslice_gpu_allocated_cores_percent",
                                  "GPU compute held by placed slices (percent of one GPU)",
                                  labels=labels)
        slots = GaugeMetricFamily("gpuslice_gpu_allocated_slices",
                                  "slices placed on the GPU (of its split count)", labels=labels)
        for u in self.state.cluster.gpu_usage():
            key = [u.node, u.gpu.uuid, u.gpu.model]
            mem.add_metric(key, u.memory_used_mib)
            cores.add_metric(key, u.cores_used)
            slots.add_metric(key, u.slices)
        yield from (mem, cores, slots)


class Metrics:
    def __init__(self, state: ExtenderState) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram("gpuslice_extender_request_seconds",
                                 "time to answer one extender call", ["verb"],
                                 buckets=_BUCKETS, registry=self.registry)
        self.placed = Counter("gpuslice_scheduler_pods_placed",
                              "pods bound with their GPU assignment", registry=self.registry)
        self.refused = Counter("gpuslice_scheduler_pods_refused",
                               "filter calls that left a pod no node, by the most common reason",
                               ["reason"], registry=self.registry)
        self.rechecks = Counter("gpuslice_scheduler_flight_rechecks",
                                "filter calls that read again the pods in flight that left a "
                                "pod no node, by what the reads found", ["result"],
                                registry=self.registry)
        self.bind_failed = Counter("gpuslice_scheduler_bind_failures",
                                   "bind calls answered with an error", registry=self.registry)
        self.gang_split = Counter("gpuslice_scheduler_gang_splits",
                                  "pods bound as the first of their gpuslice.io/gang on a node "
                                  "while it has pods on others (a GangSplit event each)",
                                  registry=self.registry)
        self.leader = Gauge("gpuslice_scheduler_leader",
                            "1 on the replica that binds (holds or follows the Lease), else 0",
                            registry=self.registry)
        self.registry.register(_Allocation(state))

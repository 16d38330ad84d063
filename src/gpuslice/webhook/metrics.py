"""The webhook's Prometheus metrics, in their own registry (served at /metrics by ops.py).

Owns: metric names and labels (docs/webhook.md "Metrics"): admission latency, requests by
result, failed namespace lookups, the serving certificate's expiry and reload count.
Tests: tests/integration/webhook/test_webhook_over_https.py (scraped over HTTPS)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuslice.webhook.admit import Result
from gpuslice.webhook.tls import ReloadingTLS

__all__ = ["Metrics"]

# kube-apiserver's default webhook timeout is 10 s; we aim for well under 10 ms
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Metrics:
    def __init__(self, registry: CollectorRegistry, tls: ReloadingTLS | None = None) -> None:
        self.registry = registry
        self.latency = Histogram(
            "gpuslice_webhook_admission_duration_seconds",
            "Time to answer one AdmissionReview, from the body read to the reply built.",
            buckets=_BUCKETS, registry=registry)
        self.requests = Counter(
            "gpuslice_webhook_requests_total",
            "AdmissionReviews answered, by result (allowed, patched, denied, skipped, error).",
            ["result"], registry=registry)
        for result in Result:
            self.requests.labels(result.value)  # every series exists from the start
        self.namespace_lookup_errors = Counter(
            "gpuslice_webhook_namespace_lookup_errors_total",
            "Namespace label lookups that failed (the namespaceSelector alone applied).",
            registry=registry)
        if tls is not None:
            Gauge("gpuslice_webhook_certificate_expiry_timestamp_seconds",
                  "When the serving certificate in use expires (Unix time).",
                  registry=registry).set_function(lambda: tls.not_after)
            Gauge("gpuslice_webhook_certificate_reloads",
                  "Times a changed certificate was loaded since start.",
                  registry=registry).set_function(lambda: tls.reloads)

    def observe(self, result: Result, seconds: float) -> None:
        self.requests.labels(result.value).inc()
        self.latency.observe(seconds)

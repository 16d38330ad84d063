"""The extender's settings: one YAML file, `GPUSLICE_SCHEDULER_*` overrides, then flags.

Owns: the schema (every key with its default; docs/scheduler.md "Configuration" lists them).
Loading, env names, error wording and the `defaults` section (the webhook's too: both must read
a pod the same way) are gpuslice.config's.
Failure: ConfigError naming the file or variable and the key, raised before anything listens.
Tests: tests/unit/scheduler/test_config.py
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from gpuslice import config
from gpuslice.allocator import Policy, parse_policy
from gpuslice.config import DefaultsConfig
from gpuslice.errors import RequestError

__all__ = ["ENV_PREFIX", "LeaderElection", "SchedulerConfig", "load"]

ENV_PREFIX = "GPUSLICE_SCHEDULER"

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
_Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]


class LeaderElection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Lease-based leader election among replicas (only the leader binds)."""

    enabled: bool = True
    lease_name: _Name = msgspec.field(default="gpuslice-scheduler", name="leaseName")
    lease_namespace: _Name = msgspec.field(default="kube-system", name="leaseNamespace")
    lease_seconds: Annotated[int, msgspec.Meta(ge=1, le=3600)] = msgspec.field(
        default=15, name="leaseSeconds")
    renew_deadline_seconds: _Seconds = msgspec.field(default=10.0, name="renewDeadlineSeconds")
    retry_period_seconds: _Seconds = msgspec.field(default=2.0, name="retryPeriodSeconds")
    identity: str = ""  # "" = hostname + a random suffix (follow: the hostname to match)
    # true: do not campaign; lead while kube-scheduler in this pod holds the Lease named above
    # (its resourceName/resourceNamespace): the two must lead together (scheduler/follow.py)
    follow: bool = False

    def __post_init__(self) -> None:
        if not (self.retry_period_seconds < self.renew_deadline_seconds < self.lease_seconds):
            raise ValueError("need retryPeriodSeconds < renewDeadlineSeconds < leaseSeconds "
                             f"(got {self.retry_period_seconds} < {self.renew_deadline_seconds}"
                             f" < {self.lease_seconds})")


class SchedulerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    # the verbs have no authentication (kube-scheduler sends none): keep them on loopback, with
    # kube-scheduler in the same pod, so no tenant can call `bind` (docs/scheduler.md "HA")
    address: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8888
    # "" = /healthz /readyz /metrics on the verbs' listener; "HOST:PORT" = their own listener
    # (the verbs can then stay on 127.0.0.1, reachable only by kube-scheduler in the same pod)
    metrics_address: str = msgspec.field(default="", name="metricsAddress")
    policy: str = "binpack"  # a preset (binpack, spread, topology) or NODE/GPU
    defaults: DefaultsConfig = msgspec.field(default_factory=DefaultsConfig)
    in_flight_timeout_seconds: _Seconds = msgspec.field(default=30.0,
                                                        name="inFlightTimeoutSeconds")
    # the filter answers only the node the policy scores best, so kube-scheduler skips its own
    # scoring and the prioritize call (a third of the extender's work per pod); pods with
    # scheduling preferences of their own (preferred affinity, ScheduleAnyway spread) are
    # always scored by kube-scheduler with every fitting node
    choose_node_in_filter: bool = msgspec.field(default=True, name="chooseNodeInFilter")
    bind_attempts: Annotated[int, msgspec.Meta(ge=1, le=10)] = msgspec.field(
        default=3, name="bindAttempts")
    api_timeout_seconds: _Seconds = msgspec.field(default=5.0, name="apiTimeoutSeconds")
    leader_election: LeaderElection = msgspec.field(default_factory=LeaderElection,
                                                    name="leaderElection")
    scheduler_name: _Name = msgspec.field(default="gpuslice-scheduler", name="schedulerName")
    kubeconfig: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = msgspec.field(
        default="info", name="logLevel")

    def __post_init__(self) -> None:
        try:
            parse_policy(self.policy)
        except RequestError as exc:
            raise ValueError(str(exc)) from None
        if self.metrics_address:
            self.metrics_listener()

    def metrics_listener(self) -> tuple[str, int]:
        host, sep, port = self.metrics_address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"metricsAddress={self.metrics_address!r}: expected HOST:PORT, "
                             "e.g. 0.0.0.0:8889 (or \"\" to serve them with the verbs)")
        return host.strip("[]"), int(port)

    def placement_policy(self) -> Policy:
        return parse_policy(self.policy)


def load(path: str | None, **flags: object) -> SchedulerConfig:
    """Defaults < the file at `path` < GPUSLICE_SCHEDULER_* < flags (None = not given)."""
    return config.load(SchedulerConfig, path, env_prefix=ENV_PREFIX, flags=flags)

"""The extender's config: defaults, env overrides, and mistakes named before anything listens."""

from __future__ import annotations

import pytest

from gpuslice.errors import ConfigError
from gpuslice.scheduler import config


def load(**env: str) -> config.SchedulerConfig:
    return config.config.load(config.SchedulerConfig, None, env_prefix=config.ENV_PREFIX,
                              environ=env)


def test_nested_env_overrides_reach_leader_election():
    got = load(GPUSLICE_SCHEDULER_LEADER_ELECTION__LEASE_SECONDS="20",
               GPUSLICE_SCHEDULER_POLICY="spread/binpack")
    assert got.leader_election.lease_seconds == 20
    assert got.placement_policy().name == "spread/binpack"


@pytest.mark.parametrize(("env", "words"), [
    ({"GPUSLICE_SCHEDULER_POLICY": "fastest"}, "policy='fastest': unknown"),
    ({"GPUSLICE_SCHEDULER_LEADER_ELECTION__RENEW_DEADLINE_SECONDS": "30"},
     "retryPeriodSeconds < renewDeadlineSeconds < leaseSeconds"),
    ({"GPUSLICE_SCHEDULER_METRICS_ADDRESS": "8889"}, "expected HOST:PORT"),
    ({"GPUSLICE_SCHEDULER_IN_FLIGHT_TIMEOUT_SECONDS": "0"}, "inFlightTimeoutSeconds"),
    ({"GPUSLICE_SCHEDULER_PROT": "1"}, "GPUSLICE_SCHEDULER_PROT: no such setting"),
], ids=["policy", "lease-order", "metrics-address", "timeout", "typo"])
def test_a_bad_setting_is_refused_with_its_name(env, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        load(**env)


def test_metrics_address_splits_into_host_and_port():
    assert load(GPUSLICE_SCHEDULER_METRICS_ADDRESS="[::]:8889").metrics_listener() == ("::", 8889)

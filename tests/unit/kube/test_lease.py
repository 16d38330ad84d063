"""kube/lease.py: settings that could let two replicas lead at once are refused up front.
(Election itself runs against the test API server: tests/integration/kube/.)"""

from __future__ import annotations

import pytest
from kube_helpers import mock_client

from gpuslice.kube.lease import LeaderElector, default_identity


@pytest.mark.parametrize(("settings", "match"), [
    ({"lease_duration_s": 0}, "whole seconds, at least 1"),
    ({"lease_duration_s": 2.5}, "whole seconds, at least 1"),
    ({"renew_deadline_s": 15}, r"renew_deadline_s \(15\) < lease_duration_s \(15\)"),
    ({"retry_period_s": 10}, r"retry_period_s \(10\) < renew_deadline_s"),
    ({"retry_period_s": 0}, "need 0 < retry_period_s"),
])
async def test_unsafe_timings_are_refused_with_the_rule(settings, match):
    async with mock_client(lambda r: pytest.fail("no request")) as client:
        with pytest.raises(ValueError, match=match):
            LeaderElector(client, "l", "ns", **settings)


async def test_a_new_elector_is_not_leader_and_has_a_unique_identity():
    async with mock_client(lambda r: pytest.fail("no request")) as client:
        one, two = LeaderElector(client, "l", "ns"), LeaderElector(client, "l", "ns")
    assert not one.is_leader and one.leader == ""
    assert one.identity != two.identity
    assert default_identity().count("_") >= 1

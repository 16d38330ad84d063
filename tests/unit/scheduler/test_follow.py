"""LeaseFollower reads the Lease kube-scheduler's client-go elector writes: holderIdentity is
`<hostname>_<uuid>` (kube-scheduler v1.36, cmd/kube-scheduler/app/options), renewTime a
MicroTime; a release leaves holderIdentity "" and leaseDurationSeconds 1. The host part is
everything before the LAST "_" (a UUID has none), so host names with "_" match exactly."""

from __future__ import annotations

from typing import Any

import pytest

from gpuslice.scheduler.follow import LeaseFollower

UUID = "3f1c2b9e-5d7a-4c1e-9b7f-0a2d4e6f8a1b"


class FakeLeases:
    def __init__(self) -> None:
        self.spec: dict[str, Any] = {}

    async def get(self, res: Any, name: str, namespace: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace}, "spec": dict(self.spec)}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def follower(host: str) -> tuple[LeaseFollower, FakeLeases, Clock]:
    leases, clock = FakeLeases(), Clock()
    return (LeaseFollower(leases, "gpuslice-kube-scheduler", "kube-system",  # type: ignore[arg-type]
                          host=host, clock=clock), leases, clock)


def held(holder: str, renew: str = "2026-11-26T23:10:42.123456Z", seconds: int = 15
         ) -> dict[str, Any]:
    return {"holderIdentity": holder, "leaseDurationSeconds": seconds,
            "acquireTime": "2026-11-26T23:10:40.000001Z", "renewTime": renew,
            "leaseTransitions": 0}


@pytest.mark.parametrize(("host", "holder", "leads"), [
    ("vm", f"vm_{UUID}", True),
    ("gpuslice-scheduler-7d9f8-abcde", f"gpuslice-scheduler-7d9f8-abcde_{UUID}", True),
    ("gpu_node_1", f"gpu_node_1_{UUID}", True),  # a host name with "_" (hostNetwork pods)
    ("gpu", f"gpu_node_1_{UUID}", False),  # another host whose name starts with ours + "_"
    ("vm", f"vm2_{UUID}", False),
    ("vm", "vm", False),  # not client-go's format: no "_<uuid>"
    ("vm", "", False),  # released
])
async def test_the_host_is_everything_before_the_last_underscore(host, holder, leads):
    follow, leases, _ = follower(host)
    leases.spec = held(holder)
    await follow.observe()
    assert follow.is_leader is leads


async def test_leading_ends_when_renewals_stop_or_the_lease_is_released():
    follow, leases, clock = follower("vm")
    leases.spec = held(f"vm_{UUID}", seconds=4)
    await follow.observe()
    assert follow.is_leader
    clock.now += 3.9
    await follow.observe()  # same renewTime: not a renewal
    assert follow.is_leader
    clock.now += 0.2
    assert not follow.is_leader, "no renewal seen for leaseDurationSeconds"
    leases.spec = held(f"vm_{UUID}", renew="2026-11-26T23:10:46.654321Z", seconds=4)
    await follow.observe()
    assert follow.is_leader, "a new renewTime (microseconds) is a renewal"
    # what client-go's release() writes on SIGTERM (ReleaseOnCancel)
    leases.spec = {"holderIdentity": "", "leaseDurationSeconds": 1,
                   "acquireTime": "2026-11-26T23:10:47.000000Z",
                   "renewTime": "2026-11-26T23:10:47.000000Z", "leaseTransitions": 0}
    await follow.observe()
    assert not follow.is_leader

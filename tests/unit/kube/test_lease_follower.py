"""kube/lease.py LeaseFollower: the extender leads exactly while the kube-scheduler in its own
pod holds the Lease, and stops when that holder goes silent or the Lease cannot be read."""

from __future__ import annotations

import httpx2
from kube_helpers import mock_client, status

from gpuslice.kube.lease import LeaseFollower


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lease(holder: str, renew: str, duration: int = 15) -> httpx2.Response:
    return httpx2.Response(200, json={
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "sched", "namespace": "ns", "resourceVersion": "7"},
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration}})


async def test_leads_while_its_pods_scheduler_holds_and_renews_the_lease():
    replies = [lease("pod-a_1234", "t1"), lease("pod-a_1234", "t2"), lease("pod-a_1234", "t2")]
    clock = Clock()
    async with mock_client(lambda r: replies.pop(0)) as client:
        f = LeaseFollower(client, "sched", "ns", holder_prefix="pod-a_", clock=clock)
        assert not f.is_leader, "nothing read yet"
        await f.poll()
        assert f.is_leader
        clock.now += 10
        await f.poll()  # renewed: t2
        clock.now += 10
        await f.poll()  # not renewed since t2 (20 s > 15 s ago? no: 10 s) -> still leads
        assert f.is_leader
        clock.now += 6  # 16 s since the record last changed: the holder went silent
        assert not f.is_leader


async def test_another_pods_scheduler_holding_the_lease_means_follow():
    async with mock_client(lambda r: lease("pod-b_99", "t1")) as client:
        f = LeaseFollower(client, "sched", "ns", holder_prefix="pod-a_", clock=Clock())
        await f.poll()
        assert not f.is_leader and f.leader == "pod-b_99"


async def test_a_prefix_of_the_host_name_is_not_the_same_host():
    async with mock_client(lambda r: lease("pod-ab_1", "t1")) as client:
        f = LeaseFollower(client, "sched", "ns", holder_prefix="pod-a_", clock=Clock())
        await f.poll()
        assert not f.is_leader


async def test_an_unreadable_lease_stops_leading_after_stale_s():
    replies = [lease("pod-a_1", "t1"), status(503, "ServiceUnavailable", "down")]
    clock = Clock()
    async with mock_client(lambda r: replies.pop(0)) as client:
        f = LeaseFollower(client, "sched", "ns", holder_prefix="pod-a_", clock=clock,
                          stale_s=5)
        await f.poll()
        clock.now += 3
        await f.poll()  # 503: logged, view kept
        assert f.is_leader
        clock.now += 3
        assert not f.is_leader, "no successful read for 6 s > stale_s"


async def test_no_lease_yet_means_no_leader():
    async with mock_client(lambda r: status(404, "NotFound", "no lease")) as client:
        f = LeaseFollower(client, "sched", "ns", holder_prefix="pod-a_", clock=Clock())
        await f.poll()
        assert not f.is_leader and f.leader == ""

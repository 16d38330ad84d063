"""Two extender replicas with Lease leader election: the follower answers filter from its own
cache but refuses bind (kube-scheduler retries), and is not ready; when the leader stops it
releases the Lease and the other replica takes over and binds."""

from __future__ import annotations

from sched_helpers import Running, create, node_obj, pod_obj, wait_for

from gpuslice.scheduler.app import NOT_LEADER
from gpuslice.scheduler.config import LeaderElection

FAST = LeaderElection(lease_namespace="default", lease_seconds=3, renew_deadline_seconds=2,
                      retry_period_seconds=0.3)


async def readyz(ext: Running) -> tuple[int, str]:
    """/readyz on the separate metrics listener (metricsAddress), as the chart probes it."""
    assert ext.http is not None and ext.ext.metrics_port is not None
    async with ext.http.get(f"http://127.0.0.1:{ext.ext.metrics_port}/readyz") as r:
        return r.status, await r.text()


async def test_only_the_leader_binds_and_the_other_takes_over_when_it_stops(kube_api):
    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1"))
    for name in ("first", "second"):
        await create(admin, pod_obj(name))
    ops = {"leader_election": FAST, "metrics_address": "127.0.0.1:0"}
    async with Running(kube_api, **ops) as a, Running(kube_api, **ops) as b:
        await wait_for(lambda: a.ext.is_leader() or b.ext.is_leader(), "a leader", 10)
        leader, follower = (a, b) if a.ext.is_leader() else (b, a)
        assert not follower.ext.is_leader(), "one Lease, one leader"
        await wait_for(lambda: follower.ext.state.pod("default/second") is not None, "cache")

        assert (await follower.filter("first", ["gpu-1"]))["NodeNames"] == ["gpu-1"]
        assert await follower.bind("first", "gpu-1") == NOT_LEADER
        assert "nodeName" not in (await follower.pod("first"))["spec"]
        status, text = await readyz(follower)
        assert status == 503 and "not the leader" in text
        assert (await readyz(leader))[0] == 200
        assert await leader.bind("first", "gpu-1") == ""

        await leader.ext.stop()  # releases the Lease on the way out
        await wait_for(follower.ext.is_leader, "the follower to take over", 10)
        assert await follower.place("second", ["gpu-1"]) == "gpu-1"
        assert follower.ext.state.held("default/first") is not None, \
            "the new leader knows what the old one placed"

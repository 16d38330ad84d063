"""Two extender replicas with Lease leader election: the follower answers filter from its own
cache but refuses bind (kube-scheduler retries), is ready for that role and says it does not
lead; when the leader stops it releases the Lease and the other replica takes over and binds."""

from __future__ import annotations

from sched_helpers import Running, create, node_obj, pod_obj, wait_for

from gpuslice.scheduler.app import NOT_LEADER
from gpuslice.scheduler.config import LeaderElection

FAST = LeaderElection(lease_namespace="default", lease_seconds=8, renew_deadline_seconds=6,
                      retry_period_seconds=0.3)


async def ops(ext: Running, path: str) -> tuple[int, str]:
    """A route of the separate metrics listener (metricsAddress), as the chart probes it."""
    assert ext.http is not None and ext.ext.metrics_port is not None
    async with ext.http.get(f"http://127.0.0.1:{ext.ext.metrics_port}{path}") as r:
        return r.status, await r.text()


async def test_only_the_leader_binds_and_the_other_takes_over_when_it_stops(kube_api):
    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1"))
    for name in ("first", "second"):
        await create(admin, pod_obj(name))
    opts = {"leader_election": FAST, "metrics_address": "127.0.0.1:0"}
    async with Running(kube_api, **opts) as a, Running(kube_api, **opts) as b:
        await wait_for(lambda: a.ext.is_leader() or b.ext.is_leader(), "a leader", 10)
        leader, follower = (a, b) if a.ext.is_leader() else (b, a)
        assert not follower.ext.is_leader(), "one Lease, one leader"

        assert (await follower.filter("first", ["gpu-1"]))["NodeNames"] == ["gpu-1"]
        assert await follower.bind("first", "gpu-1") == NOT_LEADER
        assert "nodeName" not in (await follower.pod("first"))["spec"]
        assert (await ops(follower, "/readyz"))[0] == 200, \
            "ready for its role: a readiness that waited for the Lease would stall rollouts"
        assert "gpuslice_scheduler_leader 0.0" in (await ops(follower, "/metrics"))[1]
        assert "gpuslice_scheduler_leader 1.0" in (await ops(leader, "/metrics"))[1]
        assert await leader.bind("first", "gpu-1") == ""

        await leader.ext.stop()  # releases the Lease on the way out
        await wait_for(follower.ext.is_leader, "the follower to take over", 10)
        assert await follower.place("second", ["gpu-1"]) == "gpu-1"
        assert follower.ext.state.held("default/first") is not None, \
            "the new leader knows what the old one placed"


async def test_with_follow_the_extender_leads_exactly_where_kube_scheduler_does(kube_api):
    """kube-scheduler calls the extender in its own pod: they must lead together."""
    from datetime import UTC, datetime

    from lightkube.resources.coordination_v1 import Lease

    from gpuslice.kube.client import dict_view

    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1"))
    await create(admin, pod_obj("p"))

    def now() -> str:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    async def held_by(holder: str) -> None:  # what kube-scheduler's elector writes
        body = {"spec": {"holderIdentity": holder, "leaseDurationSeconds": 2,
                         "renewTime": now()}}
        await admin.patch(dict_view(Lease), "kube-sched", body, namespace="default")

    await admin.create(dict_view(Lease)({"apiVersion": "coordination.k8s.io/v1",
                                         "kind": "Lease", "metadata": {
                                             "name": "kube-sched", "namespace": "default"},
                                         "spec": {"holderIdentity": "pod-a_1234",
                                                  "leaseDurationSeconds": 2,
                                                  "renewTime": now()}}))

    def follow(host: str) -> dict:
        return {"leader_election": LeaderElection(
            follow=True, lease_name="kube-sched", lease_namespace="default", identity=host,
            lease_seconds=3, renew_deadline_seconds=2, retry_period_seconds=0.2)}

    async with Running(kube_api, **follow("pod-a")) as a, \
            Running(kube_api, **follow("pod-b")) as b:
        await wait_for(a.ext.is_leader, "pod-a's extender to lead with its kube-scheduler")
        assert not b.ext.is_leader()
        assert await b.bind("p", "gpu-1") == NOT_LEADER

        await held_by("pod-b_5678")  # kube-scheduler fails over to pod-b
        await wait_for(b.ext.is_leader, "pod-b's extender to follow")
        await wait_for(lambda: not a.ext.is_leader(), "pod-a's extender to step down")
        assert await b.bind("p", "gpu-1") == ""
        await wait_for(lambda: not b.ext.is_leader(), "no renewal: not leading", timeout=5)

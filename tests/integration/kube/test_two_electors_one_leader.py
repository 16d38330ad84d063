"""kube.lease against the test API server: of two replicas exactly one leads; the Lease
moves on release, on a leader that stops renewing, and never to two at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event

from gpuslice.kube.client import dict_view, make_client
from gpuslice.kube.events import EventRecorder
from gpuslice.kube.lease import LeaderElector

pytestmark = pytest.mark.timeout(60)

FAST = {"lease_duration_s": 2, "renew_deadline_s": 1.5, "retry_period_s": 0.1}


class Replica:
    """One elector, its run() task and what its callbacks saw."""

    def __init__(self, client, identity: str, **settings) -> None:
        self.log: list[str] = []
        self.elector = LeaderElector(
            client, "gpuslice-scheduler", "default", identity=identity,
            on_started_leading=lambda: self.log.append("started"),
            on_stopped_leading=lambda: self.log.append("stopped"),
            on_new_leader=lambda who: self.log.append(f"leader={who}"), **{**FAST, **settings})
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@asynccontextmanager
async def replicas(kube_api, *names: str, **settings) -> AsyncIterator[list[Replica]]:
    client = make_client(str(kube_api.kubeconfig))
    group = [Replica(client, name, **settings) for name in names]
    try:
        yield group
    finally:
        for replica in group:
            if replica.task is not None:
                await replica.stop()
        await client.close()


async def wait_for_leader(group: list[Replica], timeout_s: float = 10) -> Replica:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        leaders = [r for r in group if r.elector.is_leader]
        assert len(leaders) <= 1, "two leaders at once"
        if leaders:
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError("nobody became leader")


async def watch_for_two_leaders(group: list[Replica], seconds: float) -> None:
    end = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < end:
        assert sum(r.elector.is_leader for r in group) <= 1, "two leaders at once"
        await asyncio.sleep(0.01)


async def lease_spec(kube_api) -> dict:
    async with make_client(str(kube_api.kubeconfig)) as client:
        lease = await client.get(dict_view(Lease), "gpuslice-scheduler", namespace="default")
    return lease["spec"]


async def test_two_electors_racing_for_a_new_lease_get_exactly_one_leader(kube_api):
    async with replicas(kube_api, "a", "b", "c") as group:
        for replica in group:
            replica.start()
        leader = await wait_for_leader(group)
        await watch_for_two_leaders(group, 1.0)
        assert leader.log[:2] == [f"leader={leader.elector.identity}", "started"]
        followers = [r for r in group if r is not leader]
        assert all(r.elector.leader == leader.elector.identity for r in followers), (
            "followers know who leads")
        spec = await lease_spec(kube_api)
        assert spec["holderIdentity"] == leader.elector.identity
        assert spec["leaseDurationSeconds"] == 2 and spec["renewTime"].endswith("Z")


async def test_a_released_lease_passes_to_the_follower_without_waiting_for_expiry(kube_api):
    async with replicas(kube_api, "a", "b") as group:
        for replica in group:
            replica.start()
        leader = await wait_for_leader(group)
        follower = next(r for r in group if r is not leader)
        started = asyncio.get_running_loop().time()
        await leader.stop()
        assert leader.log[-1] == "stopped" and not leader.elector.is_leader
        assert (await lease_spec(kube_api))["holderIdentity"] in ("", follower.elector.identity)
        await wait_for_leader([follower])
        took = asyncio.get_running_loop().time() - started
        assert took < 1.5, f"took {took:.2f}s: a released lease is free at once (2 s duration)"
        spec = await lease_spec(kube_api)
        assert spec["holderIdentity"] == follower.elector.identity
        assert spec["leaseTransitions"] == 1


async def test_a_leader_that_cannot_renew_steps_down_by_the_deadline_and_the_other_takes_over(
        kube_api):
    faults = kube_api.need_faults()
    async with replicas(kube_api, "a") as (first,):
        first.start()
        await wait_for_leader([first])
        faults.fail_next(10_000, code=503, method="PATCH", resource="leases")
        lost_at = asyncio.get_running_loop().time()
        while first.elector.is_leader:
            await asyncio.sleep(0.02)
        took = asyncio.get_running_loop().time() - lost_at
        assert took <= FAST["renew_deadline_s"] + 0.5, f"stepped down after {took:.2f}s"
        await asyncio.sleep(0.2)
        assert first.log[-1] == "stopped", "on_stopped_leading told the service"
        faults.reset()
        # the API is back: the same replica may lead again (client-go would exit instead)
        await wait_for_leader([first])


async def test_is_leader_turns_false_by_the_deadline_even_while_a_renew_hangs(kube_api):
    faults = kube_api.need_faults()
    async with replicas(kube_api, "a") as (first,):
        first.start()
        await wait_for_leader([first])
        faults.add_latency(30, resource="leases")
        renewed = asyncio.get_running_loop().time()
        while first.elector.is_leader:
            await asyncio.sleep(0.02)
        assert asyncio.get_running_loop().time() - renewed <= FAST["renew_deadline_s"] + 0.5
        faults.reset()


async def test_a_dead_leaders_lease_is_taken_only_after_it_expires(kube_api):
    faults = kube_api.need_faults()
    async with replicas(kube_api, "a", "b") as (a, b):
        a.start()
        await wait_for_leader([a])
        # a dies without releasing (a crash): stop its task but keep the lease record
        faults.fail_next(10_000, code=503, method="PATCH", resource="leases",
                         name="gpuslice-scheduler")
        a.task.cancel()
        await asyncio.gather(a.task, return_exceptions=True)
        a.task = None
        faults.reset()
        b.start()
        started = asyncio.get_running_loop().time()
        await watch_for_two_leaders([b], 1.0)
        assert not b.elector.is_leader, "the lease is still within its 2 s duration"
        await wait_for_leader([b])
        took = asyncio.get_running_loop().time() - started
        assert 1.9 <= took <= 3.5, f"took over after {took:.2f}s, the lease lasts 2 s"
        assert (await lease_spec(kube_api))["leaseTransitions"] == 1


async def test_becoming_leader_is_recorded_as_an_event_on_the_lease(kube_api):
    async with make_client(str(kube_api.kubeconfig)) as client:
        recorder = EventRecorder(client, "gpuslice-scheduler")
        replica = Replica(client, "a", recorder=recorder)
        replica.start()
        await wait_for_leader([replica])
        await recorder.flush()
        [event] = [e async for e in client.list(dict_view(Event), namespace="default")]
        await replica.stop()
    assert (event["reason"], event["message"]) == ("LeaderElection", "a became leader")
    assert event["involvedObject"]["kind"] == "Lease"
    assert event["involvedObject"]["apiVersion"] == "coordination.k8s.io/v1"

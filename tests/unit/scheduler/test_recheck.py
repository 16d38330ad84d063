"""Pods in flight are read again before a filter leaves a pod no node: kube-scheduler may try the
pod on the very event that ended the flight before the extender's watch shows it (recheck.py).
With the real kube-scheduler: tests/integration/scheduler/test_waiting_pod_is_requeued.py."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from lightkube.resources.core_v1 import Pod
from prometheus_client import Counter

from gpuslice.allocator import parse_policy
from gpuslice.kube import errors
from gpuslice.kube.cache import Informer
from gpuslice.scheduler.app import make_app
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.metrics import Metrics
from gpuslice.scheduler.recheck import MAX_PODS, FlightRecheck
from gpuslice.scheduler.state import ExtenderState, trim_pod

from .objects import Clock, assigned, node, pod

FIRST = "default/first"


class _Api:
    """client.get: the pods it holds, else a 404; `fail`: a 500 (errors.translate types both)."""

    def __init__(self, *pods: dict[str, Any], fail: bool = False) -> None:
        self.pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
        self.fail = fail
        self.reads: list[str] = []

    async def get(self, res: Any, name: str, *, namespace: str) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        self.reads.append(key)
        if self.fail:
            raise errors.Unavailable(f"get pod {key}: HTTP 500", code=500)
        if key not in self.pods:
            raise errors.NotFound(f"get pod {key}: not found", code=404)
        return copy.deepcopy(self.pods[key])


def in_flight() -> dict[str, Any]:
    return assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"])


def allocated() -> dict[str, Any]:
    p = assigned(pod("first", mem=4096), "n1", ["GPU-n1-0"], allocated="main")
    p["metadata"]["resourceVersion"] = "12"
    return p


def world(api: _Api) -> tuple[ExtenderState, Informer[Any], FlightRecheck, Counter]:
    state = ExtenderState(timeout_s=30, clock=Clock())
    state.on_node("ADDED", node("n1"))
    pods: Informer[Any] = Informer(api, Pod, trim=trim_pod,  # type: ignore[arg-type]
                                   handler=lambda c: state.on_pod(
                                       c.type, c.new if c.new is not None else c.old))
    counter = Counter("rechecks", "test", ["result"], registry=None)
    return state, pods, FlightRecheck(api, pods, state, counter), counter  # type: ignore[arg-type]


def count(counter: Counter, result: str) -> float:
    return counter.labels(result)._value.get()


async def test_a_flight_the_api_shows_ended_ends_here_and_the_watchs_older_events_are_dropped():
    api = _Api(allocated())
    state, pods, recheck, counter = world(api)
    await pods.observe(in_flight())  # what the watch showed
    assert state.flights("n1")
    assert await recheck({FIRST}) is True
    assert not state.flights("n1"), "the mark the API holds ends the flight"
    assert count(counter, "flight ended") == 1
    await pods._apply("MODIFIED", in_flight())  # a late watch event of the older version
    assert not state.flights("n1"), "older than what the recheck applied: dropped"


async def test_a_flight_still_under_way_changes_nothing():
    api = _Api(in_flight())
    state, pods, recheck, counter = world(api)
    await pods.observe(in_flight())
    assert await recheck({FIRST}) is False
    assert state.flights("n1") and count(counter, "still in flight") == 1


async def test_a_pod_the_api_no_longer_has_is_gone_here_too():
    api = _Api()
    state, pods, recheck, _ = world(api)
    await pods.observe(in_flight())
    assert await recheck({FIRST}) is True
    assert not state.flights("n1") and state.held(FIRST) is None


async def test_a_read_that_fails_leaves_the_watchs_view(caplog):
    api = _Api(allocated(), fail=True)
    state, pods, recheck, counter = world(api)
    await pods.observe(in_flight())
    assert await recheck({FIRST}) is False
    assert state.flights("n1") and count(counter, "read failed") == 1
    assert "answers from the watch" in caplog.text


async def test_at_most_a_few_pods_are_read_per_call():
    api = _Api()
    _, _, recheck, _ = world(api)
    await recheck({f"default/p{i}" for i in range(MAX_PODS + 5)})
    assert len(api.reads) == MAX_PODS


@pytest.fixture
async def http() -> AsyncIterator[tuple[TestClient, _Api]]:
    api = _Api(allocated())
    state, pods, _, _ = world(api)
    await pods.observe(in_flight())
    metrics = Metrics(state)
    app = make_app(Evaluator(state, parse_policy("binpack")), None,  # type: ignore[arg-type]
                   metrics, ready=lambda: None, is_leader=lambda: True,
                   recheck=FlightRecheck(api, pods, state, metrics.rechecks))  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as client:
        yield client, api


async def filter_(client: TestClient, p: dict[str, Any]) -> dict[str, Any]:
    r = await client.post("/filter", data=json.dumps({"Pod": p, "NodeNames": ["n1"]}))
    return await r.json()


async def test_the_filter_reads_the_pod_it_waited_for_and_places_the_pod_once_it_has_landed(http):
    client, api = http
    reply = await filter_(client, pod("second", mem=2048))
    assert reply["NodeNames"] == ["n1"], reply
    assert api.reads == [FIRST]


async def test_the_filter_reads_nothing_while_some_node_fits(http):
    client, api = http
    api.pods.clear()
    reply = await filter_(client, pod("same", mem=4096))  # interchangeable: no wait
    assert reply["NodeNames"] == ["n1"] and api.reads == []

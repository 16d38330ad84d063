"""Fault injection of the in-process server (skipped on a real one): what a flaky control plane
does to a client, on demand."""

from __future__ import annotations

import asyncio
import time

import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Pod

from kubeapi import DUPLICATE_EVENTS, REORDERED_EVENTS
from kubeapi.raw import pod_body

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def faults(kube_api):
    return kube_api.need_faults()


async def _watch_in_background(raw, count: int, **params: str) -> asyncio.Task:
    task = asyncio.create_task(raw.watch_lines(PODS, count, timeout=5, **params))
    await asyncio.sleep(0.3)  # the watch is open
    return task


async def test_the_next_matching_requests_fail_with_the_chosen_status(kube_api, faults, raw):
    await raw.create(pod_body("a"))
    faults.fail_next(2, code=409, method="PATCH", resource="pods")
    patch = {"metadata": {"labels": {"x": "1"}}}
    codes = [(await raw.call("PATCH", f"{PODS}/a", patch, "application/merge-patch+json"))[0]
             for _ in range(3)]
    assert codes == [409, 409, 200]
    faults.fail_next(code=500, resource="pods", method="GET")
    with pytest.raises(ApiError) as caught:
        await kube_api.async_client().get(Pod, "a")
    assert (caught.value.status.code, caught.value.status.reason) == (500, "InternalError")


async def test_latency_delays_only_matching_requests(raw, faults):
    faults.add_latency(0.3, method="POST", resource="pods")
    start = time.monotonic()
    await raw.call("GET", PODS)
    fast = time.monotonic() - start
    start = time.monotonic()
    await raw.create(pod_body("a"))
    slow = time.monotonic() - start
    assert slow >= 0.3 > fast, (slow, fast)


async def test_dropping_watches_ends_open_streams(raw, faults):
    task = await _watch_in_background(raw, 5, resourceVersion="1")
    faults.drop_watches("pods")
    start = time.monotonic()
    events = await task
    assert events == [] and time.monotonic() - start < 2, "the stream ended at once"


async def test_expiring_watches_sends_error_410_then_ends(raw, faults):
    task = await _watch_in_background(raw, 5, resourceVersion="1")
    faults.expire_watches()
    events = await task
    assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]


async def test_the_next_watch_can_be_told_to_expire(raw, faults):
    faults.expire_next_watch(resource="pods")
    first = await raw.watch_lines(PODS, 1, timeout=2, resourceVersion="1")
    await raw.create(pod_body("a"))
    second = await raw.watch_lines(PODS, 1, timeout=2, resourceVersion="1")
    assert first[0]["type"] == "ERROR" and first[0]["object"]["reason"] == "Expired"
    assert second[0]["type"] == "ADDED", "only the next watch expires"


async def test_compaction_makes_every_older_version_410(raw, faults):
    created = await raw.create(pod_body("a"))
    await raw.create(pod_body("b"))
    faults.compact()
    events = await raw.watch_lines(PODS, 1, resourceVersion=created["metadata"][
        "resourceVersion"])
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


async def test_duplicate_events_scenario_sends_each_event_twice(raw, faults):
    faults.scenario(DUPLICATE_EVENTS, "pods")
    task = await _watch_in_background(raw, 4, resourceVersion="1")
    await raw.create(pod_body("a"))
    await raw.create(pod_body("b"))
    names = [e["object"]["metadata"]["name"] for e in await task]
    assert names == ["a", "a", "b", "b"]


async def test_reordered_events_scenario_swaps_each_pair(raw, faults):
    faults.scenario(REORDERED_EVENTS)
    created = await raw.create(pod_body("a"))
    task = await _watch_in_background(raw, 2, resourceVersion=created["metadata"][
        "resourceVersion"])
    await raw.create(pod_body("b"))
    await raw.call("PATCH", f"{PODS}/a", {"metadata": {"labels": {"x": "y"}}},
                   "application/merge-patch+json")
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in await task]
    assert events == [("MODIFIED", "a"), ("ADDED", "b")]


@pytest.mark.parametrize("kube_api", [{"bookmark_interval": 60}], indirect=True)
async def test_a_bookmark_can_be_asked_for_on_open_watches(raw, faults):
    created = await raw.create(pod_body("a"))
    rv = created["metadata"]["resourceVersion"]
    task = await _watch_in_background(raw, 1, resourceVersion=rv, allowWatchBookmarks="true")
    start = time.monotonic()
    faults.bookmark_now("pods")
    (event,) = await task
    assert time.monotonic() - start < 2, "not the periodic one (a minute away)"
    assert event["type"] == "BOOKMARK" and event["object"]["metadata"]["resourceVersion"] == rv


async def test_reset_clears_every_rule(raw, faults):
    faults.fail_next(5, code=503)
    faults.reset()
    code, _ = await raw.call("GET", PODS)
    assert code == 200


def test_an_unknown_scenario_is_refused_with_the_known_ones(faults):
    with pytest.raises(ValueError, match="known: duplicate-events, reordered-events"):
        faults.scenario("lossy")


async def test_the_request_log_records_what_clients_did(kube_api, raw):
    server = kube_api.server
    if server is None:
        pytest.skip("the request log is the in-process server's")
    await raw.call("GET", PODS, labelSelector="a=b")
    last = server.requests[-1]
    assert (last.method, last.path, last.query, last.status) == (
        "GET", PODS, {"labelSelector": "a=b"}, 200)

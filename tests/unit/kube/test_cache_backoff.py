"""kube/cache.py: failures back off (exponential, jitter, cap, reset) and resume; no hot loop."""

from __future__ import annotations

import httpx2
import pytest
from kube_helpers import (
    RecordingBackoff,
    ScriptedAPI,
    event,
    mock_client,
    pod,
    run_until_idle,
    status,
)
from lightkube.resources.core_v1 import Pod

from gpuslice.kube import errors
from gpuslice.kube.cache import Backoff, Informer

REQUEST = httpx2.Request("GET", "http://api.test/api/v1/pods")


async def run(api: ScriptedAPI, **kwargs) -> tuple[Informer, RecordingBackoff]:
    backoff = RecordingBackoff()
    async with mock_client(api) as client:
        informer = Informer(client, Pod, backoff=backoff, **kwargs)
        await run_until_idle(informer, api)
    return informer, backoff


@pytest.mark.parametrize("failure", [
    httpx2.ConnectError("connection refused", request=REQUEST),
    httpx2.ReadError("connection reset by peer", request=REQUEST),
    status(500, "InternalError", "etcd leader changed"),
    status(403, "Forbidden", 'pods is forbidden: User "x" cannot watch resource "pods"'),
    httpx2.Response(502, text="<html>bad gateway</html>"),
], ids=["refused", "reset", "500", "403", "502-html"])
async def test_a_failed_watch_backs_off_and_resumes_from_the_last_version_without_relisting(
        failure):
    api = ScriptedAPI(lists=[([pod("a", 1)], 5)],
                      watches=[[event("MODIFIED", pod("a", 6))], failure, failure,
                               [event("MODIFIED", pod("a", 9))]])
    informer, backoff = await run(api)
    assert api.list_count == 1, "no relist: the last resourceVersion is still good"
    assert api.watch_versions == ["5", "6", "6", "6", "9"]
    assert len(backoff.delays) == 2
    assert informer.store["ml/a"]["metadata"]["resourceVersion"] == "9"


async def test_a_connection_dropped_mid_stream_keeps_what_arrived_and_resumes_after_it():
    async def dropped():
        yield event("MODIFIED", pod("a", 6))
        yield event("MODIFIED", pod("a", 7))
        raise httpx2.ReadError("connection reset by peer")

    api = ScriptedAPI(lists=[([pod("a", 1)], 5)], watches=[dropped()])
    api.watches[0] = httpx2.Response(200, stream=__import__("kube_helpers").Lines(dropped()))
    informer, backoff = await run(api)
    assert api.watch_versions == ["5", "7"] and len(backoff.delays) == 1
    assert informer.store["ml/a"]["metadata"]["resourceVersion"] == "7"


async def test_a_garbled_line_is_a_failure_not_a_crash():
    api = ScriptedAPI(lists=[([], 5)], watches=[[b"<html>oops</html>\n"]])
    _, backoff = await run(api)
    assert len(backoff.delays) == 1


async def test_watches_that_end_at_once_with_nothing_back_off_growing():
    api = ScriptedAPI(lists=[([], 5)], watches=[[]] * 6)
    _, backoff = await run(api)
    assert len(backoff.delays) == 6, "every empty, instant watch waits: never a hot loop"
    assert backoff.delays[-1] > backoff.delays[0] * 4


async def test_a_429_waits_at_least_the_servers_retry_after():
    slow_down = status(429, "TooManyRequests", "slow down")
    slow_down.headers["Retry-After"] = "7"
    api = ScriptedAPI(lists=[slow_down, ([], 5)], watches=[])
    _, backoff = await run(api)
    assert backoff.delays[0] >= 7


async def test_an_invalid_selector_is_raised_not_retried_forever():
    api = ScriptedAPI(lists=[status(400, "BadRequest", 'unable to parse requirement: "a=="')],
                      watches=[])
    with pytest.raises(errors.Invalid, match="list pods: unable to parse requirement"):
        await run(api)
    assert api.list_count == 1


async def test_a_list_without_a_resource_version_is_retried():
    api = ScriptedAPI(lists=[([pod("a", 1)], ""), ([pod("a", 1)], 5)], watches=[])
    informer, backoff = await run(api)
    assert informer.synced.is_set() and len(backoff.delays) == 1


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_with_jitter_up_to_the_cap():
    backoff = Backoff(initial_s=1, cap_s=10, jitter=0.5, clock=Clock())
    delays = [backoff.next_delay() for _ in range(8)]
    for delay, base in zip(delays, (1, 2, 4, 8, 10, 10, 10, 10), strict=True):
        assert 0.5 * base <= delay <= 1.5 * base


def test_backoff_starts_over_after_a_healthy_period():
    clock = Clock()
    backoff = Backoff(initial_s=1, cap_s=100, jitter=0, reset_after_s=60, clock=clock)
    assert [backoff.next_delay() for _ in range(4)] == [1, 2, 4, 8]
    clock.now += 59
    assert backoff.next_delay() == 16, "59 s without failure is not yet healthy"
    clock.now += 60
    assert backoff.next_delay() == 1

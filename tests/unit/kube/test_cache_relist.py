"""kube/cache.py: on 410 Gone the informer lists again and delivers only the difference."""

from __future__ import annotations

from kube_helpers import (
    RecordingBackoff,
    ScriptedAPI,
    event,
    gone,
    mock_client,
    pod,
    run_until_idle,
    status,
)
from lightkube.resources.core_v1 import Pod

from gpuslice.kube.cache import Informer


async def run(api: ScriptedAPI) -> tuple[Informer, list, RecordingBackoff]:
    seen: list = []
    backoff = RecordingBackoff()
    async with mock_client(api) as client:
        informer = Informer(client, Pod, handler=seen.append, backoff=backoff)
        await run_until_idle(informer, api)
    return informer, seen, backoff


def summary(changes) -> list[tuple[str, str]]:
    return [(c.type, c.key) for c in changes]


async def test_a_410_error_event_relists_and_delivers_only_the_difference():
    first = [pod("same", 1), pod("changed", 2), pod("deleted", 3)]
    second = [pod("same", 1), pod("changed", 7), pod("new", 8)]
    api = ScriptedAPI(lists=[(first, 5), (second, 9)],
                      watches=[[event("ADDED", pod("seen-in-watch", 6)), gone(5)]])
    informer, seen, backoff = await run(api)
    assert summary(seen[3:]) == [("ADDED", "ml/seen-in-watch"),
                                 ("MODIFIED", "ml/changed"), ("ADDED", "ml/new"),
                                 ("DELETED", "ml/deleted"), ("DELETED", "ml/seen-in-watch")]
    assert sorted(informer.store) == ["ml/changed", "ml/new", "ml/same"]
    assert informer.store["ml/changed"]["metadata"]["resourceVersion"] == "7"
    assert api.watch_versions == ["5", "9"], "the next watch starts at the new list's version"
    assert informer.relists == 1
    assert backoff.delays == [], "a 410 after a healthy watch is normal: relist at once"


async def test_an_http_410_on_the_watch_request_relists_too():
    api = ScriptedAPI(lists=[([pod("a", 1)], 5), ([pod("a", 1)], 9)],
                      watches=[status(410, "Expired", "too old resource version: 5 (8)")])
    informer, seen, _ = await run(api)
    assert informer.relists == 1 and api.list_count == 2
    assert summary(seen) == [("ADDED", "ml/a")], "an unchanged pod is not delivered again"


async def test_a_name_taken_by_a_new_object_during_the_gap_is_deleted_then_added():
    api = ScriptedAPI(lists=[([pod("a", 1, uid="old")], 5), ([pod("a", 7, uid="new")], 9)],
                      watches=[[gone()]])
    _informer, seen, _ = await run(api)
    assert summary(seen) == [("ADDED", "ml/a"), ("DELETED", "ml/a"), ("ADDED", "ml/a")]
    assert seen[1].old["metadata"]["uid"] == "old" and seen[2].new["metadata"]["uid"] == "new"


async def test_410s_right_after_each_list_back_off_instead_of_listing_in_a_loop():
    api = ScriptedAPI(lists=[([], 5)] * 5, watches=[[gone()]] * 4)
    _informer, _, backoff = await run(api)
    assert api.list_count == 5
    assert len(backoff.delays) == 4, "each list was outdated at once: wait before the next"
    assert backoff.delays[0] < backoff.delays[-1], "and the waits grow"


async def test_a_list_that_fails_is_retried_with_back_off_and_synced_waits_for_it():
    api = ScriptedAPI(lists=[status(503, "ServiceUnavailable", "etcd is down"),
                             status(500, "InternalError", "boom"), ([pod("a", 1)], 5)],
                      watches=[])
    seen: list = []
    backoff = RecordingBackoff()
    async with mock_client(api) as client:
        informer = Informer(client, Pod, handler=seen.append, backoff=backoff)
        await informer.run(_iterations=2)
        assert not informer.synced.is_set(), "not synced before a whole list was delivered"
        await informer.run(_iterations=1)
    assert informer.synced.is_set() and len(backoff.delays) == 2
    assert informer.relists == 0, "the first successful list is not a relist"


async def test_a_list_whose_continue_token_expired_starts_over_after_a_wait():
    expired = status(410, "Expired", "The provided continue parameter is too old")
    api = ScriptedAPI(lists=[expired, expired, ([pod("a", 1)], 5)], watches=[])
    informer, seen, backoff = await run(api)
    assert len(backoff.delays) == 2 and informer.synced.is_set()
    assert summary(seen) == [("ADDED", "ml/a")]

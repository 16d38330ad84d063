"""kube/cache.py: list, then watch from the list's version; bookmarks; the view never goes back."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from typing import Any, TypedDict

import httpx2
import pytest
from kube_helpers import (
    RecordingBackoff,
    ScriptedAPI,
    bookmark,
    event,
    gone,
    mock_client,
    pod,
    run_until_idle,
)
from lightkube.resources.core_v1 import Node, Pod

from gpuslice.kube.cache import Change, Informer, newer


def changes_of(informer_changes: list[Change]) -> list[tuple[str, str, str | None]]:
    """(type, key, resourceVersion of the new object, or of the old one for DELETED)."""
    out = []
    for c in informer_changes:
        obj = c.new if c.new is not None else c.old
        out.append((c.type, c.key, obj["metadata"]["resourceVersion"] if obj else None))
    return out


async def run_informer(api: ScriptedAPI, **kwargs) -> tuple[Informer, list]:
    seen: list[Change] = []
    async with mock_client(api) as client:
        informer = Informer(client, Pod, handler=seen.append, backoff=RecordingBackoff(),
                            **kwargs)
        await run_until_idle(informer, api)
    return informer, seen


async def test_it_lists_then_watches_from_the_lists_version_with_bookmarks_and_selectors():
    api = ScriptedAPI(lists=[([pod("a", 3), pod("b", 5)], 10)],
                      watches=[[event("MODIFIED", pod("a", 11)), event("ADDED", pod("c", 12)),
                                event("DELETED", pod("b", 13))]])
    informer, seen = await run_informer(api, labels={"gpuslice.io/managed": "true"},
                                        fields={"spec.nodeName": "gpu-1"})
    assert changes_of(seen) == [("ADDED", "ml/a", "3"), ("ADDED", "ml/b", "5"),
                                ("MODIFIED", "ml/a", "11"), ("ADDED", "ml/c", "12"),
                                ("DELETED", "ml/b", "5")]
    assert seen[2].old["metadata"]["resourceVersion"] == "3", "MODIFIED carries the old object"
    assert sorted(informer.store) == ["ml/a", "ml/c"] and informer.synced.is_set()
    assert informer.resource_version == "13"
    listing, watch, _idle = api.requests
    assert listing.url.path == "/api/v1/pods", "namespace=None watches every namespace"
    assert watch.url.params["resourceVersion"] == "10"
    assert watch.url.params["allowWatchBookmarks"] == "true"
    assert watch.url.params["labelSelector"] == "gpuslice.io/managed=true"
    assert watch.url.params["fieldSelector"] == "spec.nodeName=gpu-1"
    assert 300 <= int(watch.url.params["timeoutSeconds"]) <= 600, (
        "the server ends every watch in time, at a jittered moment (client-go's 1x-2x)")


async def test_a_bookmark_moves_the_resume_point_without_a_change():
    api = ScriptedAPI(lists=[([pod("a", 3)], 10)],
                      watches=[[event("MODIFIED", pod("a", 11)), bookmark(40)], []])
    _informer, seen = await run_informer(api)
    assert len(seen) == 2
    assert api.watch_versions == ["10", "40", "40"], "the next watch resumes at the bookmark"


async def test_events_cut_anywhere_by_the_streams_chunks_are_read_whole():
    text = b"".join(json.dumps(e).encode() + b"\n" for e in (
        event("MODIFIED", pod("a", 11)), event("ADDED", pod("c" * 300, 12)))) + b"\n  \n"
    chunks = [text[i:i + 7] for i in range(0, len(text), 7)]  # no chunk holds a whole line
    api = ScriptedAPI(lists=[([pod("a", 3)], 10)], watches=[chunks])
    _informer, seen = await run_informer(api)
    assert changes_of(seen) == [("ADDED", "ml/a", "3"), ("MODIFIED", "ml/a", "11"),
                                ("ADDED", "ml/" + "c" * 300, "12")], "blank lines are skipped"


async def test_duplicate_and_reordered_events_never_move_the_view_backwards():
    api = ScriptedAPI(lists=[([pod("a", 3)], 10)], watches=[[
        event("MODIFIED", pod("a", 12)),
        event("MODIFIED", pod("a", 11)),   # re-ordered: older than what was delivered
        event("MODIFIED", pod("a", 12)),   # duplicate
        event("ADDED", pod("a", 3)),       # a replay of the list
        event("DELETED", pod("a", 14)),
        event("MODIFIED", pod("a", 13)),   # late: must not bring the deleted pod back
        event("DELETED", pod("a", 14)),    # duplicate delete
        event("ADDED", pod("a", 20, uid="uid-new")),  # a new pod with the same name
    ]])
    informer, seen = await run_informer(api)
    assert changes_of(seen) == [("ADDED", "ml/a", "3"), ("MODIFIED", "ml/a", "12"),
                                ("DELETED", "ml/a", "12"), ("ADDED", "ml/a", "20")]
    assert informer.store["ml/a"]["metadata"]["uid"] == "uid-new"


async def test_a_delete_of_an_object_never_seen_is_not_delivered_but_blocks_late_adds():
    api = ScriptedAPI(lists=[([], 10)], watches=[[
        event("DELETED", pod("x", 15)), event("ADDED", pod("x", 12))]])
    informer, seen = await run_informer(api)
    assert seen == [] and informer.store == {}


async def test_trim_keeps_only_what_the_caller_needs_and_async_handlers_are_awaited():
    handled: list[str] = []

    async def handler(change):
        await asyncio.sleep(0)
        handled.append(f"{change.type} {change.key} {change.new}")

    api = ScriptedAPI(lists=[([pod("a", 3, spec={"nodeName": "gpu-1"})], 10)], watches=[])
    async with mock_client(api) as client:
        informer = Informer(client, Pod, handler=handler,
                            trim=lambda o: o.get("spec", {}).get("nodeName"))
        await informer.run(_iterations=1)
    assert informer.store == {"ml/a": "gpu-1"}
    assert handled == ["ADDED ml/a gpu-1"]


async def test_a_failing_handler_or_trimmer_is_logged_and_the_informer_goes_on(caplog):
    def trim(obj):
        if obj["metadata"]["name"] == "bad":
            raise ValueError("garbage annotation")
        return obj

    def handler(change):
        if change.key == "ml/boom":
            raise RuntimeError("handler bug")

    api = ScriptedAPI(lists=[([pod("bad", 1), pod("boom", 2), pod("ok", 3)], 10)], watches=[])
    async with mock_client(api) as client:
        informer = Informer(client, Pod, handler=handler, trim=trim)
        await informer.run(_iterations=1)
    assert sorted(informer.store) == ["ml/boom", "ml/ok"]
    assert "trim of pods ml/bad failed" in caplog.text
    assert "handler of pods failed on ADDED ml/boom" in caplog.text


async def test_malformed_and_unknown_events_are_skipped(caplog):
    api = ScriptedAPI(lists=[([], 10)], watches=[[
        {"type": "ADDED"}, {"type": "ADDED", "object": {"metadata": "x"}}, ["not", "a", "dict"],
        event("SURPRISE", pod("a", 11)), event("ADDED", pod("b", 12))]])
    _informer, seen = await run_informer(api)
    assert [c.key for c in seen] == ["ml/b"]
    assert caplog.text.count("skipped") == 4


@pytest.mark.parametrize("reply", [[1, 2], {"metadata": {"resourceVersion": "5"}, "items": {}},
                                   {"metadata": "x", "items": []}])
async def test_a_list_reply_of_another_shape_is_retried_with_back_off(reply):
    """As lightkube's own list answered it: an undecodable reply, never a dead informer."""
    api = ScriptedAPI(lists=[httpx2.Response(200, json=reply), ([pod("a", 1)], 10)],
                      watches=[[]])
    informer, _seen = await run_informer(api)
    assert sorted(informer.store) == ["ml/a"] and api.list_count == 2
    assert len(informer.backoff.delays) >= 1, "the first list was retried after a delay"


async def test_a_paged_list_is_read_whole_before_synced():
    items = [pod(f"p{i}", i + 1) for i in range(5)]
    api = ScriptedAPI(lists=[(items, 10)], watches=[])
    informer, _seen = await run_informer(api, page_size=2)
    assert len(informer.store) == 5 and informer.synced.is_set()
    assert [r.url.params.get("limit") for r in api.requests] == ["2", "2", "2", None]


async def test_a_paged_list_is_trimmed_page_by_page_never_held_whole():
    """40,000 bound pods held whole before trimming took ~1 GB, the extender's memory limit:
    each object is trimmed before the page after next is asked for. The next page is asked
    for before this one is trimmed, so the server serves it meanwhile."""
    items = [pod(f"p{i}", i + 1) for i in range(5)]
    api = ScriptedAPI(lists=[(items, 10)], watches=[])
    pages_read_at_trim: list[int] = []

    def trim(obj):
        pages_read_at_trim.append(api.list_count)
        return obj["metadata"]["name"]

    async with mock_client(api) as client:
        informer = Informer(client, Pod, trim=trim, page_size=2)
        await informer.run(_iterations=1)
    assert pages_read_at_trim == [2, 2, 3, 3, 3], "one page ahead, never more"
    assert api.list_count == 3, "no page asked for after the last"
    assert informer.store == {f"ml/p{i}": f"p{i}" for i in range(5)}


class Cycle:
    me: Cycle


@pytest.mark.parametrize("enabled_before", [True, False])
async def test_the_cyclic_collector_is_off_during_lists_and_as_it_was_after(enabled_before):
    """Concurrent lists share one pause, and a collector someone else turned off stays off;
    cycles made during a list are freed as the pause ends."""
    collector_on: list[bool] = []
    cycles: list[weakref.ref] = []

    def trim(obj):
        collector_on.append(gc.isenabled())
        cycle = Cycle()
        cycle.me = cycle
        cycles.append(weakref.ref(cycle))
        return obj

    apis = [ScriptedAPI(lists=[([pod(f"{n}{i}", i + 1) for i in range(4)], 10)], watches=[])
            for n in "ab"]
    (gc.enable if enabled_before else gc.disable)()
    try:
        async with mock_client(apis[0]) as first, mock_client(apis[1]) as second:
            informers = [Informer(first, Pod, trim=trim, page_size=1),
                         Informer(second, Pod, trim=trim, page_size=1)]
            await asyncio.gather(*(i.run(_iterations=1) for i in informers))
        assert len(collector_on) == 8 and not any(collector_on)
        assert gc.isenabled() is enabled_before
        assert all(c() is None for c in cycles) is enabled_before
    finally:
        gc.enable()


class _Named(TypedDict, total=False):
    name: str


class _NameOnly(TypedDict, total=False):
    metadata: dict[str, Any]
    spec: _Named


async def test_a_schema_builds_only_its_fields_and_reads_what_does_not_fit_it_whole():
    """Listed and watched objects are decoded through the schema (env, managedFields and the
    rest never built), with their apiVersion and kind (a list's items come without); an
    object that does not fit it is decoded whole, and an ERROR event's Status is read whole:
    a 410 still lists again."""
    big = {"spec": {"name": "x", "env": [{"name": "A", "value": "1"}]}, "status": {"phase": "R"}}
    listed = {k: v for k, v in pod("a", 3, **big).items() if k not in ("apiVersion", "kind")}
    api = ScriptedAPI(lists=[([listed, pod("b", 4, spec="not an object")], 10),
                             ([pod("a", 12, **big)], 20)],
                      watches=[[event("MODIFIED", pod("b", 11, spec={"name": "y"})), gone(11)],
                               []])
    informer, seen = await run_informer(api, schema=_NameOnly)
    type_meta = {"apiVersion": "v1", "kind": "Pod"}
    assert seen[0].new == {**type_meta, "metadata": pod("a", 3)["metadata"],
                           "spec": {"name": "x"}}
    assert seen[1].new["spec"] == "not an object", "read whole: nothing lost"
    assert seen[2].new == {**type_meta, "metadata": pod("b", 11)["metadata"],
                           "spec": {"name": "y"}}
    assert informer.relists == 1 and informer.store["ml/a"]["metadata"]["resourceVersion"] == "12"


async def test_stop_ends_a_running_informer():
    api = ScriptedAPI(lists=[([pod("a", 1)], 10)], watches=[])  # the watch then stays open
    async with mock_client(api) as client:
        informer = Informer(client, Pod)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 5)
        await asyncio.sleep(0.01)
        informer.stop()
        await asyncio.wait_for(task, 5)
    assert task.exception() is None


async def test_cluster_scoped_objects_are_keyed_by_name():
    node = {"kind": "Node", "metadata": {"name": "gpu-1", "resourceVersion": "4", "uid": "n"}}
    api = ScriptedAPI(lists=[([node], 10)], watches=[])
    async with mock_client(api) as client:
        informer = Informer(client, Node)
        await informer.run(_iterations=1)
    assert list(informer.store) == ["gpu-1"]
    assert api.requests[0].url.path == "/api/v1/nodes"


async def test_a_namespace_limits_the_informer_to_it():
    api = ScriptedAPI(lists=[([], 10)], watches=[[]])
    async with mock_client(api) as client:
        await Informer(client, Pod, namespace="ml", backoff=RecordingBackoff()).run(_iterations=2)
    assert {r.url.path for r in api.requests} == {"/api/v1/namespaces/ml/pods"}


@pytest.mark.parametrize(("candidate", "held", "expected"), [
    ("12", None, True), ("12", "11", True), ("11", "12", False), ("12", "12", False),
    ("100", "99", True),  # numbers, not strings: "100" < "99" as text
    ("abc", "12", True), ("12", "abc", True),  # opaque versions: always delivered
])
def test_resource_versions_compare_as_integers_when_both_are(candidate, held, expected):
    assert newer(candidate, held) is expected

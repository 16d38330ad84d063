"""Watches: resume from a resourceVersion, 410 when it is too old, bookmarks (either backend
unless a test needs the in-process server's short history, which it says)."""

from __future__ import annotations

import pytest

from kubeapi.raw import pod_body

PODS = "/api/v1/namespaces/default/pods"


async def test_a_watch_from_a_resource_version_sends_every_later_change_in_order(raw):
    first = await raw.create(pod_body("a"))
    await raw.create(pod_body("b"))
    await raw.call("DELETE", f"{PODS}/a")
    events = await raw.watch_lines(PODS, 3, resourceVersion=first["metadata"]["resourceVersion"])
    # a pod is deleted gracefully: first written with its deletionTimestamp (grace 0: it is
    # not bound), then removed
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "a")]
    terminating, gone = events[1]["object"]["metadata"], events[2]["object"]["metadata"]
    assert terminating["deletionGracePeriodSeconds"] == 0 and terminating["deletionTimestamp"]
    assert gone["deletionTimestamp"] == terminating["deletionTimestamp"]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3, "each change its own resourceVersion"


async def test_a_configmap_is_deleted_in_one_event(raw):
    made = await raw.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    code, reply = await raw.call("DELETE", "/api/v1/namespaces/default/configmaps/c")
    assert code == 200 and reply == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                     "status": "Success", "details": {
                                         "name": "c", "kind": "configmaps",
                                         "uid": made["metadata"]["uid"]}}
    events = await raw.watch_lines("/api/v1/namespaces/default/configmaps", 1, timeout=3,
                                   resourceVersion=made["metadata"]["resourceVersion"])
    assert [e["type"] for e in events] == ["DELETED"]


async def test_a_watch_without_a_resource_version_starts_with_the_current_objects(raw):
    await raw.create(pod_body("a"))
    events = await raw.watch_lines(PODS, 1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]


async def test_initial_events_end_with_an_annotated_bookmark(raw):
    await raw.create(pod_body("a"))
    events = await raw.watch_lines(PODS, 2, sendInitialEvents="true", allowWatchBookmarks="true",
                                   resourceVersionMatch="NotOlderThan")
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    bookmark = events[1]["object"]
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"])


@pytest.mark.parametrize("kube_api", [{"bookmark_interval": 0.05}], indirect=True)
async def test_an_idle_watch_gets_bookmarks_at_the_latest_resource_version(raw, kube_api):
    kube_api.need_faults()  # a real server bookmarks about once a minute
    created = await raw.create(pod_body("a"))
    rv = created["metadata"]["resourceVersion"]
    events = await raw.watch_lines(PODS, 2, resourceVersion=rv, allowWatchBookmarks="true")
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    assert events[0]["object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {
        "resourceVersion": rv, "creationTimestamp": None}}


@pytest.mark.parametrize("kube_api", [{"history": 3}], indirect=True)
async def test_a_resource_version_older_than_the_history_is_an_error_event_410(raw, kube_api):
    kube_api.need_faults()  # the window is the in-process server's setting
    first = await raw.create(pod_body("a"))
    for name in "bcde":
        await raw.create(pod_body(name))
    events = await raw.watch_lines(PODS, 1, resourceVersion=first["metadata"]["resourceVersion"])
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith("too old resource version: ")


@pytest.mark.parametrize("kube_api", [{"history": 3}], indirect=True)
async def test_a_list_at_an_exact_expired_version_is_410_and_a_recent_one_is_served(raw, kube_api):
    kube_api.need_faults()
    first = await raw.create(pod_body("a"))
    second = await raw.create(pod_body("b"))
    code, reply = await raw.call("GET", PODS, resourceVersion=first["metadata"][
        "resourceVersion"], resourceVersionMatch="Exact")
    assert code == 200 and [i["metadata"]["name"] for i in reply["items"]] == ["a"]
    for name in "cdef":
        await raw.create(pod_body(name))
    code, reply = await raw.call("GET", PODS, resourceVersion=second["metadata"][
        "resourceVersion"], resourceVersionMatch="Exact")
    assert (code, reply["reason"]) == (410, "Expired")


async def test_a_paged_list_is_one_consistent_snapshot(raw):
    for name in "abc":
        await raw.create(pod_body(name))
    code, page = await raw.call("GET", PODS, limit="2")
    assert code == 200 and len(page["items"]) == 2 and page["metadata"]["continue"]
    await raw.create(pod_body("aa"))  # sorts inside the first page; must not appear
    code, rest = await raw.call("GET", PODS, limit="2", **{"continue": page["metadata"][
        "continue"]})
    names = [i["metadata"]["name"] for i in page["items"] + rest["items"]]
    assert code == 200 and names == ["a", "b", "c"]
    assert "continue" not in rest["metadata"] or not rest["metadata"]["continue"]

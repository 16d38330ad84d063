"""Label and field selectors on lists and watches (either backend)."""

from __future__ import annotations

import pytest

from kubeapi.raw import node_body, pod_body

PODS = "/api/v1/namespaces/default/pods"


async def _names(raw, **params: str) -> set[str]:
    code, reply = await raw.call("GET", PODS, **params)
    assert code == 200, reply
    return {i["metadata"]["name"] for i in reply["items"]}


@pytest.fixture
async def labelled(raw):
    await raw.create(pod_body("a", labels={"app": "x", "tier": "gpu"}))
    await raw.create(pod_body("b", labels={"app": "y"}))
    await raw.create(pod_body("c"))


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=x", {"a"}),
    ("app==x", {"a"}),
    ("app!=x", {"b", "c"}),
    ("app in (x,y)", {"a", "b"}),
    ("app notin (x)", {"b", "c"}),
    ("tier", {"a"}),
    ("!tier", {"b", "c"}),
    ("app,!tier", {"b"}),
    ("app in (x, y),tier=gpu", {"a"}),
])
async def test_label_selectors_select_like_the_real_server(raw, labelled, selector, expected):
    assert await _names(raw, labelSelector=selector) == expected


async def test_a_malformed_label_selector_is_a_400(raw, labelled):
    code, reply = await raw.call("GET", PODS, labelSelector="app in x")
    assert (code, reply["reason"]) == (400, "BadRequest"), reply


async def test_field_selectors_pick_by_node_name_and_phase(raw, labelled):
    await raw.bind("a", "node-1")
    assert await _names(raw, fieldSelector="spec.nodeName=node-1") == {"a"}
    assert await _names(raw, fieldSelector="spec.nodeName=") == {"b", "c"}
    assert await _names(raw, fieldSelector="metadata.name=b") == {"b"}
    assert await _names(raw, fieldSelector="status.phase=Pending,metadata.name!=c") == {"a", "b"}


async def test_an_unsupported_field_is_a_400_naming_it(raw, labelled):
    code, reply = await raw.call("GET", PODS, fieldSelector="spec.priority=0")
    assert code == 400 and "field label not supported: spec.priority" in reply["message"]


async def test_cluster_scoped_lists_take_selectors_too(raw):
    await raw.create(node_body("n1", {"gpu": "true"}))
    await raw.create(node_body("n2"))
    code, reply = await raw.call("GET", "/api/v1/nodes", labelSelector="gpu=true")
    assert code == 200 and [i["metadata"]["name"] for i in reply["items"]] == ["n1"]


async def test_a_watch_with_a_selector_sees_an_object_leave_it_as_deleted(raw, kube_api):
    created = await raw.create(pod_body("w", labels={"app": "x"}))
    rv = created["metadata"]["resourceVersion"]
    code, patched = await raw.call("PATCH", f"{PODS}/w", {"metadata": {"labels": {"app": "z"}}},
                                   "application/merge-patch+json")
    assert code == 200
    events = await raw.watch_lines(PODS, 1, labelSelector="app=x", resourceVersion=rv)
    # the object as it last matched, at the resourceVersion of the change that took it out
    assert [(e["type"], e["object"]["metadata"]["labels"]["app"]) for e in events] == [
        ("DELETED", "x")]
    assert events[0]["object"]["metadata"]["resourceVersion"] == \
        patched["metadata"]["resourceVersion"]

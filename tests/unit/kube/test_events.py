"""kube/events.py: Events as kubectl describe shows them, aggregated, trimmed, best effort."""

from __future__ import annotations

import asyncio
import logging

import httpx2
import pytest
from kube_helpers import body, mock_client, status
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from gpuslice.kube import events

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web-0", "namespace": "ml", "uid": "u-1", "resourceVersion": "9"}}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "uid": "n-1"}}


class Recorder:
    """Answers event creates and patches like the API server and keeps what it got."""

    def __init__(self, fail: httpx2.Response | None = None) -> None:
        self.requests: list[tuple[str, str, dict]] = []
        self.fail = fail

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append((request.method, request.url.path, body(request)))
        if self.fail is not None:
            return self.fail
        return httpx2.Response(201 if request.method == "POST" else 200, json=body(request))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_pod_event_names_the_pod_and_the_component():
    api = Recorder()
    async with mock_client(api) as client:
        recorder = events.EventRecorder(client, "gpuslice-scheduler", host="sched-a")
        await recorder.record(POD, "Warning", "BindFailed", "no GPU left on gpu-1")
    [(method, path, event)] = api.requests
    assert (method, path) == ("POST", "/api/v1/namespaces/ml/events")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web-0",
                                       "namespace": "ml", "uid": "u-1", "resourceVersion": "9"}
    assert (event["type"], event["reason"], event["message"], event["count"]) == (
        "Warning", "BindFailed", "no GPU left on gpu-1", 1)
    assert event["source"] == {"component": "gpuslice-scheduler", "host": "sched-a"}
    assert event["metadata"]["name"].startswith("web-0."), "client-go's <object>.<hex time>"
    assert event["firstTimestamp"] == event["lastTimestamp"]
    assert event["firstTimestamp"].endswith("Z") and len(event["firstTimestamp"]) == 20


async def test_an_event_about_a_node_goes_to_the_default_namespace():
    api = Recorder()
    async with mock_client(api) as client:
        await events.EventRecorder(client, "agent").record(NODE, "Normal", "GPUsFound", "2 GPUs")
    assert api.requests[0][1] == "/api/v1/namespaces/default/events"
    assert "namespace" not in api.requests[0][2]["involvedObject"]


async def test_a_lightkube_typed_object_is_accepted_too():
    api = Recorder()
    async with mock_client(api) as client:
        node = Node(metadata=ObjectMeta(name="gpu-2", uid="n-2"))
        await events.EventRecorder(client, "agent").record(node, "Normal", "Seen", "hello")
    ref = api.requests[0][2]["involvedObject"]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("Node", "gpu-2", "n-2")


async def test_repeats_within_the_window_bump_count_instead_of_posting_again():
    api, clock = Recorder(), Clock()
    async with mock_client(api) as client:
        recorder = events.EventRecorder(client, "s", window_s=60, clock=clock)
        for _ in range(3):
            await recorder.record(POD, "Warning", "NoFit", "0/3 nodes fit")
            clock.now += 10
        await recorder.record(POD, "Warning", "NoFit", "another message")
        clock.now += 100  # past the window: a fresh event
        await recorder.record(POD, "Warning", "NoFit", "0/3 nodes fit")
    methods = [(m, b.get("count")) for m, _, b in api.requests]
    assert methods == [("POST", 1), ("PATCH", 2), ("PATCH", 3), ("POST", 1), ("POST", 1)]
    first, patched = api.requests[0], api.requests[1]
    assert patched[1] == f"/api/v1/namespaces/ml/events/{first[2]['metadata']['name']}"
    assert set(patched[2]) == {"count", "lastTimestamp"}


async def test_an_aggregated_event_that_expired_is_posted_anew():
    clock = Clock()
    replies = iter([None, status(404, "NotFound", 'events "x" not found'), None])

    def handler(request):
        reply = next(replies)
        return reply or httpx2.Response(201, json=body(request))

    async with mock_client(handler) as client:
        recorder = events.EventRecorder(client, "s", clock=clock)
        await recorder.record(POD, "Warning", "NoFit", "m")
        await recorder.record(POD, "Warning", "NoFit", "m")
    assert next(replies, "done") == "done", "POST, PATCH (404), then a new POST"


async def test_a_failing_api_is_logged_and_never_raised(caplog):
    api = Recorder(fail=status(403, "Forbidden", 'events is forbidden: User "x" cannot create'))
    async with mock_client(api) as client:
        with caplog.at_level(logging.WARNING, logger="gpuslice.kube.events"):
            await events.EventRecorder(client, "s").record(POD, "Warning", "BindFailed", "m")
    [line] = caplog.records
    assert "could not post event Warning BindFailed on pod ml/web-0" in line.getMessage()
    assert "HTTP 403 Forbidden" in line.getMessage()


async def test_an_unreachable_api_is_logged_and_never_raised(caplog):
    def refuse(request):
        raise httpx2.ConnectError("connection refused", request=request)

    async with mock_client(refuse) as client:
        await events.EventRecorder(client, "s").record(POD, "Normal", "Bound", "m")
    assert "cannot reach the API server" in caplog.text


async def test_emit_returns_at_once_and_flush_waits_for_the_post():
    api = Recorder()
    async with mock_client(api) as client:
        recorder = events.EventRecorder(client, "s")
        recorder.emit(POD, "Normal", "Bound", "bound to gpu-1")
        assert api.requests == [], "emit does not wait for the API"
        await recorder.flush()
    assert len(api.requests) == 1


@pytest.mark.parametrize(("type_", "reason", "match"), [
    ("Error", "BindFailed", "must be 'Normal' or 'Warning'"),
    ("Warning", "bind failed", "must be CamelCase"),
    ("Warning", "", "must be CamelCase"),
])
async def test_a_bad_type_or_reason_is_a_programming_error(type_, reason, match):
    async with mock_client(lambda r: pytest.fail("nothing posted")) as client:
        with pytest.raises(ValueError, match=match):
            await events.EventRecorder(client, "s").record(POD, type_, reason, "m")


async def test_an_object_without_kind_or_name_is_refused():
    async with mock_client(lambda r: pytest.fail("nothing posted")) as client:
        with pytest.raises(ValueError, match=r"needs an object with kind and metadata\.name"):
            events.EventRecorder(client, "s").emit({"metadata": {"name": "x"}}, "Normal", "A", "")


def test_long_messages_are_trimmed_in_the_middle_to_1_kib():
    message = "start " + "é" * 2000 + " how to fix it"
    trimmed = events.trim_message(message)
    assert len(trimmed.encode()) <= 1024
    assert trimmed.startswith("start ") and trimmed.endswith(" how to fix it")
    assert "..." in trimmed
    assert events.trim_message("short") == "short"
    exact = "x" * 1024
    assert events.trim_message(exact) == exact


async def test_a_burst_of_the_same_event_aggregates_and_other_objects_post_alongside():
    api = Recorder()
    other = {**POD, "metadata": {**POD["metadata"], "name": "web-1", "uid": "u-2"}}
    async with mock_client(api) as client:
        recorder = events.EventRecorder(client, "s")
        for _ in range(5):
            recorder.emit(POD, "Warning", "NoFit", "0/3 nodes fit")
        recorder.emit(other, "Warning", "NoFit", "0/3 nodes fit")
        await recorder.flush()
    calls = sorted((m, b["involvedObject"]["name"] if m == "POST" else "", b.get("count"))
                   for m, _, b in api.requests)
    assert calls == [("PATCH", "", 2), ("PATCH", "", 3), ("PATCH", "", 4), ("PATCH", "", 5),
                     ("POST", "web-0", 1), ("POST", "web-1", 1)]
    assert recorder._locks == {}, "per-key locks are dropped once unused"


async def test_emits_past_max_pending_are_dropped_with_a_warning(caplog):
    release = asyncio.Event()

    async def slow(request):
        await release.wait()
        return httpx2.Response(201, json=body(request))

    async with mock_client(slow) as client:
        recorder = events.EventRecorder(client, "s", max_pending=2)
        for i in range(5):
            recorder.emit(POD, "Warning", "NoFit", f"message {i}")
        assert recorder.dropped == 3
        release.set()
        await recorder.flush()
    assert "dropping new ones" in caplog.text

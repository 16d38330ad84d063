"""kube.events against the test API server: what kubectl shows, and repeats aggregated."""

from __future__ import annotations

import json

import pytest
from informer_view import pod
from lightkube.resources.core_v1 import Event, Node

from gpuslice.kube.client import dict_view, make_client
from gpuslice.kube.events import EventRecorder

pytestmark = pytest.mark.timeout(60)


async def test_a_pod_event_is_created_then_counted_and_kubectl_shows_it(kube_api):
    async with make_client(str(kube_api.kubeconfig)) as client:
        created = dict(await client.create(pod("web-0")))
        recorder = EventRecorder(client, "gpuslice-scheduler", host="sched-a")
        for _ in range(3):
            await recorder.record(created, "Warning", "BindFailed", "no GPU left on gpu-1")
        events = [dict(e) async for e in client.list(dict_view(Event), namespace="default")]
    [event] = events
    assert (event["reason"], event["type"], event["count"]) == ("BindFailed", "Warning", 3)
    assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
    shown = json.loads(kube_api.kubectl("get", "events", "-n", "default", "-o", "json").stdout)
    assert [e["message"] for e in shown["items"]] == ["no GPU left on gpu-1"]


async def test_a_node_event_lands_in_the_default_namespace(kube_api):
    async with make_client(str(kube_api.kubeconfig)) as client:
        node = await client.create(dict_view(Node)({"apiVersion": "v1", "kind": "Node",
                                                    "metadata": {"name": "gpu-1"}}))
        await EventRecorder(client, "gpuslice-node-agent").record(
            node, "Normal", "InventoryPublished", "2 GPUs")
        [event] = [e async for e in client.list(dict_view(Event), namespace="default")]
    assert event["involvedObject"]["kind"] == "Node"
    assert event["source"]["component"] == "gpuslice-node-agent"


async def test_an_api_that_refuses_events_does_not_disturb_the_caller(kube_api, caplog):
    faults = kube_api.need_faults()
    faults.fail_next(5, code=500, resource="events")
    async with make_client(str(kube_api.kubeconfig)) as client:
        created = await client.create(pod("web-1"))
        await EventRecorder(client, "s").record(created, "Warning", "BindFailed", "m")
    assert "could not post event Warning BindFailed on pod default/web-1" in caplog.text

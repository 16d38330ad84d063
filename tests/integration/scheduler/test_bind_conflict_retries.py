"""bind against a flaky API server: a 409 or an error on the Binding (which carries the
assignment) is retried with a fresh read; a Binding whose answer was lost is recognised; when
binding fails for good the slices are released and the pod gets a BindFailed event. Never a
half-written assignment."""

from __future__ import annotations

import httpx2
import pytest
from lightkube.resources.core_v1 import Event
from sched_helpers import Running, create, node_obj, pod_obj, wait_for

from gpuslice import codec, handoff
from gpuslice.kube.client import dict_view


async def placed(ext: Running, name: str) -> None:
    await create(ext.client, pod_obj(name))


@pytest.mark.parametrize("subresource", ["", "binding"], ids=["assignment-patch", "binding"])
async def test_one_conflict_is_retried_and_the_pod_is_bound_once(kube_api, subresource):
    faults = kube_api.need_faults()
    await create(kube_api.async_client(), node_obj("gpu-1"))
    async with Running(kube_api) as ext:
        await placed(ext, "p")
        faults.fail_next(1, code=409, method="PATCH" if not subresource else "POST",
                         resource="pods", name="p", subresource=subresource)
        assert await ext.bind("p", "gpu-1") == ""
        pod = await ext.pod("p")
        assert pod["spec"]["nodeName"] == "gpu-1"
        assert codec.decode_assignment(
            pod["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION]).node == "gpu-1"


async def test_a_binding_that_keeps_failing_removes_the_assignment_and_says_why(kube_api):
    faults = kube_api.need_faults()
    await create(kube_api.async_client(), node_obj("gpu-1"))
    async with Running(kube_api) as ext:
        await placed(ext, "p")
        faults.fail_next(10, code=500, message="etcd is on fire", method="POST",
                         resource="pods", name="p", subresource="binding")
        error = await ext.bind("p", "gpu-1")
        assert error.startswith("bind default/p to gpu-1: ") and "etcd is on fire" in error
        pod = await ext.pod("p")
        ann = pod["metadata"].get("annotations") or {}
        assert codec.ASSIGNMENT_ANNOTATION not in ann and handoff.BOUND_AT not in ann, \
            "a failed bind must not leave an assignment the node agent could act on"
        assert "nodeName" not in pod["spec"]
        assert ext.ext.state.held("default/p") is None, "the slices are free again"

        async def event_posted() -> bool:
            events = [e async for e in ext.client.list(dict_view(Event), namespace="default")]
            return any(e["reason"] == "BindFailed" and "etcd is on fire" in e["message"]
                       for e in events)
        await wait_for(event_posted, "the BindFailed event")

        faults.reset()
        assert await ext.bind("p", "gpu-1") == "", "the scheduler's retry then binds it"


async def test_binding_a_pod_already_bound_elsewhere_fails_without_writing(kube_api):
    await create(kube_api.async_client(), node_obj("gpu-1"))
    await create(kube_api.async_client(), node_obj("gpu-2"))
    async with Running(kube_api) as ext:
        await placed(ext, "p")
        assert await ext.bind("p", "gpu-1") == ""
        before = await ext.pod("p")
        error = await ext.bind("p", "gpu-2")
        assert "already bound to node gpu-1" in error
        after = await ext.pod("p")
        assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
        assert await ext.bind("p", "gpu-1") == "", "a repeated bind to the same node is a no-op"


async def test_a_bind_for_a_recreated_pod_is_refused(kube_api):
    await create(kube_api.async_client(), node_obj("gpu-1"))
    async with Running(kube_api) as ext:
        await placed(ext, "p")
        reply = await ext.verb("bind", {"PodName": "p", "PodNamespace": "default",
                                        "PodUID": "0000-old-uid", "Node": "gpu-1"})
        assert "the pod was recreated" in reply["Error"]
        assert "nodeName" not in (await ext.pod("p"))["spec"]


async def test_bind_starts_from_the_filters_copy_when_the_watch_lags(kube_api):
    faults = kube_api.need_faults()
    await create(kube_api.async_client(), node_obj("gpu-1"))
    async with Running(kube_api) as ext:
        ext.ext.pods.stop()  # the watch falls behind: the new pod never reaches the cache
        await create(ext.client, pod_obj("p"))
        assert (await ext.filter("p", ["gpu-1"]))["NodeNames"] == ["gpu-1"]
        uid = (await ext.pod("p"))["metadata"]["uid"]
        faults.fail_next(5, code=500, method="GET", resource="pods", name="p")
        reply = await ext.verb("bind", {"PodName": "p", "PodNamespace": "default",
                                        "PodUID": uid, "Node": "gpu-1"})
        assert reply == {"Error": ""}, "no read needed: the filter carried the whole pod"
        faults.reset()
        assert (await ext.pod("p"))["spec"]["nodeName"] == "gpu-1"


async def test_a_binding_whose_answer_is_lost_is_recognised_and_its_gpus_stay_held(kube_api):
    faults = kube_api.need_faults()
    await create(kube_api.async_client(), node_obj("gpu-1"))
    impatient = kube_api.async_client(timeout=httpx2.Timeout(0.4))
    async with Running(kube_api, client=impatient) as ext:
        await placed(ext, "p")
        ext.ext.pods.stop()  # no watch event will confirm the bind: only bind's own hold counts
        faults.add_latency(0.6, method="POST", resource="pods")  # lands after the client gave up
        assert await ext.bind("p", "gpu-1") == "", "the pod did get bound: say so"
        faults.reset()
        pod = await ext.pod("p")
        assert pod["spec"]["nodeName"] == "gpu-1"
        written = codec.decode_assignment(pod["metadata"]["annotations"][
            codec.ASSIGNMENT_ANNOTATION])
        assert ext.ext.state.held("default/p") == written, \
            "the GPUs the bound pod carries stay held, with no gap for another pod to take them"

"""Many pods bound to one node before its kubelet allocates them: only pods the node agent can
tell apart (or that are interchangeable) are in flight together; the others wait, and the
filter names the pod they wait for; deleted or failed pods free their slices within seconds."""

from __future__ import annotations

from lightkube.resources.core_v1 import Pod, PodStatus
from lightkube.types import PatchType
from sched_helpers import Running, create, node_obj, pod_obj, wait_for

from gpuslice import codec
from gpuslice.kube.client import dict_view


async def test_confusable_pods_wait_and_the_others_are_bound_together(kube_api):
    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1"))
    async with Running(kube_api) as ext:
        for name, mem, gpus in (("a", 4096, 1), ("b", 4096, 1), ("c", 2048, 1), ("d", 2048, 2)):
            await create(admin, pod_obj(name, mem=mem, gpus=gpus))
        assert await ext.place("a", ["gpu-1"]) == "gpu-1"
        assert await ext.place("b", ["gpu-1"]) == "gpu-1", "b is interchangeable with a"
        refused = await ext.filter("c", ["gpu-1"])
        assert refused["FailedAndUnresolvableNodes"] == {
            "gpu-1": "waiting for pod default/a to be allocated on this node"}
        assert await ext.place("d", ["gpu-1"]) == "gpu-1", "two GPUs: told apart from a and b"

        await ext.mark_allocated("a")
        await wait_for(lambda: sorted(f.key for f in ext.ext.state.flights("gpu-1"))
                       == ["default/b", "default/d"], "a to leave flight")
        refused = await ext.filter("c", ["gpu-1"])
        assert refused["FailedAndUnresolvableNodes"] == {
            "gpu-1": "waiting for pod default/b to be allocated on this node"}
        await ext.mark_allocated("b")
        await wait_for(lambda: len(ext.ext.state.flights("gpu-1")) == 1, "b to leave flight")
        assert await ext.place("c", ["gpu-1"]) == "gpu-1"

        for name in "abcd":
            pod = await ext.pod(name)
            assert pod["spec"]["nodeName"] == "gpu-1"
            assert codec.decode_assignment(
                pod["metadata"]["annotations"][codec.ASSIGNMENT_ANNOTATION]).node == "gpu-1"


async def test_a_deleted_or_failed_pod_frees_its_slices_within_seconds(kube_api):
    """Deleted = gone from the API (the kubelet confirmed); Failed = rejected at admission."""
    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1", gpus=1, mem=8192))
    async with Running(kube_api) as ext:
        for name in ("big-1", "big-2", "big-3"):
            await create(admin, pod_obj(name, mem=8192))
        assert await ext.place("big-1", ["gpu-1"]) == "gpu-1"
        assert "insufficient GPU memory" in await ext.place("big-2", ["gpu-1"])

        await admin.delete(dict_view(Pod), "big-1", namespace="default")
        await wait_for(lambda: (ext.ext.state.pod("default/big-1") or {}).get("metadata", {})
                       .get("deletionTimestamp"), "the pod to be terminating", 3)
        assert ext.ext.state.held("default/big-1") is not None, \
            "a terminating pod's containers may still hold GPU memory: keep its slices"
        await admin.delete(dict_view(Pod), "big-1", namespace="default", grace_period=0)
        await wait_for(lambda: ext.ext.state.held("default/big-1") is None, "the release", 3)
        assert await ext.place("big-2", ["gpu-1"]) == "gpu-1"

        await admin.patch(PodStatus, "big-2", {"status": {  # the kubelet rejects it
            "phase": "Failed", "reason": "UnexpectedAdmissionError"}}, namespace="default",
            patch_type=PatchType.MERGE)
        await wait_for(lambda: ext.ext.state.held("default/big-2") is None, "the release", 3)
        assert await ext.place("big-3", ["gpu-1"]) == "gpu-1"

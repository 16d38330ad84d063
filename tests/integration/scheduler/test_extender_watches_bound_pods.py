"""The extender watches bound pods only (spec.nodeName!=): a pending pod costs it no watch event
and holds nothing, filter and bind get the pod from kube-scheduler's call (or a GET), and a pod
appears in its cache once bound (scheduler/service.py)."""

from __future__ import annotations

from sched_helpers import Running, create, node_obj, pod_obj, wait_for


async def test_pending_pods_stay_out_of_the_cache_and_bound_ones_come_in(kube_api):
    admin = kube_api.async_client()
    await create(admin, node_obj("gpu-1"))
    async with Running(kube_api) as ext:
        for name in ("pending", "placed"):
            await create(admin, pod_obj(name))
        assert await ext.bind("placed", "gpu-1") == "", "bind reads the pod it never watched"
        # the watch delivers in resourceVersion order: once the Binding shows, the pending
        # pod's creation (older) has been passed over
        await wait_for(lambda: ext.ext.state.pod("default/placed") is not None, "the Binding")
        assert ext.ext.state.pod("default/pending") is None
        assert ext.ext.pods.store.keys() == {"default/placed"}
        assert await ext.place("pending", ["gpu-1"]) == "gpu-1"
        await wait_for(lambda: ext.ext.state.pod("default/pending") is not None, "its Binding")

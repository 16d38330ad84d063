"""kube.cache against the test API server: dropped watches and failing requests are resumed
from the last resourceVersion (no relist), and the handler's view converges."""

from __future__ import annotations

import asyncio

import pytest
from informer_view import converge, pod, running_informer
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from gpuslice.kube.client import dict_view

pytestmark = pytest.mark.timeout(60)


async def test_dropped_watches_resume_where_they_left_off(kube_api):
    faults = kube_api.need_faults()
    async with running_informer(kube_api) as (informer, view, client):
        for round_ in range(5):
            await client.create(pod(f"p{round_}"))
            if round_:
                await client.patch(dict_view(Pod), f"p{round_ - 1}",
                                   {"metadata": {"labels": {"round": str(round_)}}},
                                   patch_type=PatchType.MERGE)
            faults.drop_watches("pods")
        await client.delete(Pod, "p0")
        await converge(view, client)
        assert informer.relists == 0, "the resourceVersion stayed in the history: no relist"
        assert view.went_backwards() == {}
        watches = [r.query for r in kube_api.server.requests if r.query.get("watch") == "true"]
        assert len(watches) >= 6, "the first watch and one after each drop"
        assert all(w.get("resourceVersion") for w in watches), "each resumes from a version"
        assert all(w.get("allowWatchBookmarks") == "true" for w in watches)


async def test_failing_watch_requests_back_off_and_then_catch_up(kube_api):
    faults = kube_api.need_faults()
    async with running_informer(kube_api) as (informer, view, client):
        faults.fail_next(3, code=500, resource="pods", watch=True)
        faults.fail_next(2, code=429, resource="pods", watch=True)
        faults.drop_watches("pods")
        await client.create(pod("during-the-outage"))
        await converge(view, client)
        assert informer.relists == 0
        assert informer.backoff.failures >= 5, "each failed attempt waited its turn"


async def test_label_and_field_selectors_limit_what_the_informer_sees(kube_api):
    async with running_informer(kube_api, labels={"gpuslice.io/managed": "true"},
                                fields={"metadata.namespace": "default"}) as (
            informer, view, client):
        await client.create(pod("managed", **{"gpuslice.io/managed": "true"}))
        await client.create(pod("other"))
        await client.patch(dict_view(Pod), "managed",
                           {"metadata": {"labels": {"gpuslice.io/managed": None}}},
                           patch_type=PatchType.MERGE)
        await client.create(pod("managed-2", **{"gpuslice.io/managed": "true"}))
        while "default/managed-2" not in informer.store:
            await asyncio.sleep(0.01)
        assert sorted(informer.store) == ["default/managed-2"], (
            "a pod that lost the label leaves the selection as DELETED")
        assert ("DELETED", "default/managed") in view.changes

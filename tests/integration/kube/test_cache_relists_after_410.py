"""kube.cache against the test API server: a 410 makes the informer list again, and the
handler gets exactly what changed while it was away."""

from __future__ import annotations

import asyncio

import pytest
from informer_view import converge, pod, running_informer
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from gpuslice.kube.client import dict_view

pytestmark = pytest.mark.timeout(60)


async def test_changes_missed_during_an_outage_arrive_as_the_difference_after_410(kube_api):
    faults = kube_api.need_faults()
    async with running_informer(kube_api) as (informer, view, client):
        for name in ("same", "changed", "deleted"):
            await client.create(pod(name))
        await converge(view, client)
        faults.fail_next(10_000, code=503, resource="pods", watch=True)  # keep it away
        faults.drop_watches("pods")
        await client.delete(Pod, "deleted")
        await client.patch(dict_view(Pod), "changed", {"metadata": {"labels": {"x": "1"}}},
                           patch_type=PatchType.MERGE)
        await client.create(pod("new"))
        faults.compact()  # the informer's resourceVersion is now too old
        before = len(view.changes)
        faults.reset()
        await converge(view, client)
        assert informer.relists == 1
        assert sorted(view.changes[before:]) == [
            ("ADDED", "default/new"), ("DELETED", "default/deleted"),
            ("MODIFIED", "default/changed")], "only the difference, nothing for 'same'"
        assert view.went_backwards() == {}


async def test_an_error_410_on_a_live_watch_relists_without_delivering_anything_unchanged(
        kube_api):
    faults = kube_api.need_faults()
    async with running_informer(kube_api) as (informer, view, client):
        await client.create(pod("a"))
        await converge(view, client)
        changes = len(view.changes)
        faults.expire_watches("pods")
        while informer.relists < 1:
            await asyncio.sleep(0.01)
        await client.create(pod("b"))  # and the new watch works
        await converge(view, client)
        assert view.changes[changes:] == [("ADDED", "default/b")]


@pytest.mark.parametrize("how", ["http-410", "error-event-first"])
async def test_a_watch_request_answered_410_relists_too(kube_api, how):
    faults = kube_api.need_faults()
    async with running_informer(kube_api) as (informer, view, client):
        if how == "http-410":
            faults.fail_next(code=410, resource="pods", watch=True)
        else:
            faults.expire_next_watch(resource="pods")
        faults.drop_watches("pods")
        while informer.relists < 1:
            await asyncio.sleep(0.01)
        await client.create(pod("a"))
        await converge(view, client)

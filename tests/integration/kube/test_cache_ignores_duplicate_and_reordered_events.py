"""kube.cache against the test API server: duplicated and swapped watch events never make
the handler's view go backwards, and it still ends equal to the server."""

from __future__ import annotations

import pytest
from informer_view import converge, pod, running_informer
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from gpuslice.kube.client import dict_view
from kubeapi import DUPLICATE_EVENTS, REORDERED_EVENTS

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("scenarios", [[DUPLICATE_EVENTS], [REORDERED_EVENTS],
                                       [DUPLICATE_EVENTS, REORDERED_EVENTS]],
                         ids=["duplicated", "reordered", "both"])
async def test_the_view_only_moves_forward_and_converges(kube_api, scenarios):
    faults = kube_api.need_faults()
    async with running_informer(kube_api) as (_informer, view, client):
        for scenario in scenarios:
            faults.scenario(scenario, "pods")
        await client.create(pod("a"))
        for i in range(7):
            await client.patch(dict_view(Pod), "a", {"metadata": {"labels": {"i": str(i)}}},
                               patch_type=PatchType.MERGE)
        await client.create(pod("b"))
        await client.delete(Pod, "b")
        faults.drop_watches("pods")  # flushes an event a swapped pair still holds back
        truth = await converge(view, client)
        assert view.went_backwards() == {}
        assert truth.keys() == {"default/a"}
        versions_of_a = len(view.delivered["default/a"])  # 8 written: create + 7 patches
        if REORDERED_EVENTS in scenarios:
            assert versions_of_a < 8, "of a swapped pair, the older event comes late: dropped"
        else:
            assert versions_of_a == 8, "a duplicate is dropped, every distinct version kept"

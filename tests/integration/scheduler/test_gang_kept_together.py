"""Pods of one gpuslice.io/gang through the running extender on an API server: the second rank
is filtered onto the first's node over the policy's choice, and a rank bound to another node
gets a GangSplit Warning event (its compute limit couples with the others' only on one node)."""

from __future__ import annotations

from lightkube.resources.core_v1 import Event
from sched_helpers import Running, create, node_obj, pod_obj, wait_for

from gpuslice import dialects
from gpuslice.kube.client import dict_view


def rank(name: str, gang: str = "train") -> dict:
    p = pod_obj(name)
    p["metadata"]["annotations"] = {dialects.GANG_ANNOTATION: gang}
    return p


async def test_a_gang_is_placed_together_and_a_split_is_said(kube_api):
    client = kube_api.async_client()
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        await create(client, node_obj(name))
    async with Running(kube_api) as ext:
        for name in ("rank-0", "rank-1", "rank-2", "fill"):
            await create(client, rank(name) if name != "fill" else pod_obj(name, mem=8192))
        assert await ext.bind("fill", "gpu-2") == ""  # binpack's choice from now on
        assert await ext.bind("rank-0", "gpu-3") == ""
        got = await ext.filter("rank-1", ["gpu-1", "gpu-2", "gpu-3"])
        assert got["NodeNames"] == ["gpu-3"], "the gang's node, not the fuller gpu-2"
        assert await ext.bind("rank-1", "gpu-3") == ""
        assert await ext.bind("rank-2", "gpu-1") == "", "a split is allowed, never refused"
        await create(client, rank("rank-3"))
        assert await ext.bind("rank-3", "gpu-3") == "", "joins the gang: no new split"

        async def reasons() -> dict[str, str]:
            events = [e async for e in client.list(dict_view(Event), namespace="default")]
            return {e["involvedObject"]["name"]: e["message"] for e in events
                    if e["reason"] == "GangSplit"}

        await wait_for(lambda: reasons(), "the GangSplit event")
        await ext.ext.recorder.flush()  # every event emitted so far is posted
        said = await reasons()
        assert set(said) == {"rank-2"}, "only the rank that split the gang"
        assert "gpu-3" in said["rank-2"] and "gpuslice.io/gang train" in said["rank-2"]
        assert ext.ext.metrics.registry.get_sample_value(
            "gpuslice_scheduler_gang_splits_total") == 1


async def test_a_sized_gangs_first_rank_goes_where_the_whole_gang_fits(kube_api):
    """gpu-2 (binpack's choice) has room for one more 8 GiB rank; a gang of three that says its
    size starts on a node where all three fit, and its ranks follow."""
    client = kube_api.async_client()
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        await create(client, node_obj(name))
    async with Running(kube_api) as ext:
        fills = [f"fill-{i}" for i in range(3)]
        for name in fills:
            await create(client, pod_obj(name, mem=8192))
        for i in range(3):
            p = rank(f"rank-{i}") if i else rank("rank-0")
            p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "8192"
            p["metadata"]["annotations"][dialects.GANG_SIZE_ANNOTATION] = "3"
            await create(client, p)
        for name in fills:
            assert await ext.bind(name, "gpu-2") == ""
        first = (await ext.filter("rank-0", ["gpu-1", "gpu-2", "gpu-3"]))["NodeNames"]
        assert first in (["gpu-1"], ["gpu-3"]), f"not gpu-2, which takes one rank: {first}"
        assert await ext.bind("rank-0", first[0]) == ""
        for name in ("rank-1", "rank-2"):
            assert (await ext.filter(name, ["gpu-1", "gpu-2", "gpu-3"]))["NodeNames"] == first
            assert await ext.bind(name, first[0]) == ""

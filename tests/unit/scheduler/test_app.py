"""The HTTP routes: the real scheduler's bodies in, replies of the samples' shape out, errors in
the body with HTTP 200, a follower that refuses bind, readiness and metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gpuslice.allocator import parse_policy
from gpuslice.scheduler.app import NOT_LEADER, make_app
from gpuslice.scheduler.filter import Evaluator
from gpuslice.scheduler.metrics import Metrics
from gpuslice.scheduler.state import ExtenderState

from .objects import Clock, assigned, node, pod

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> Any:
    return json.loads((SAMPLES / f"extender-{name}.json").read_text())


class _NoBinder:
    async def bind(self, args: object) -> str:
        raise AssertionError("a follower must not reach the binder")


@pytest.fixture
async def http() -> AsyncIterator[TestClient]:
    state = ExtenderState(timeout_s=30, clock=Clock())
    for n in (node("node-a"), node("node-x", mem=1024)):
        state.on_node("ADDED", n)
    state.on_pod("ADDED", assigned(pod("held", mem=2048), "node-a", ["GPU-node-a-0"],
                                   allocated="main"))
    ev = Evaluator(state, parse_policy("binpack"))
    app = make_app(ev, _NoBinder(), Metrics(state),  # type: ignore[arg-type]
                   ready=lambda: "cache of pods not synced yet", is_leader=lambda: False)
    async with TestClient(TestServer(app)) as client:
        yield client


async def post(http: TestClient, verb: str, body: Any) -> Any:
    r = await http.post(f"/{verb}", data=body if isinstance(body, bytes) else json.dumps(body))
    assert r.status == 200, await r.text()
    return await r.json()


async def test_full_nodes_are_answered_with_the_fitting_node_objects_themselves(http):
    body = sample("filter-nodecachecapable-false.request")
    with_inv = node("node-a")  # the sample's node-a, with an inventory annotation
    body["Nodes"]["items"][1]["metadata"]["annotations"] = with_inv["metadata"]["annotations"]
    reply = await post(http, "filter", body)
    assert set(reply) == set(sample("filter-nodecachecapable-false.response"))
    assert reply["Nodes"]["items"] == [body["Nodes"]["items"][1]], "echoed byte for byte"
    assert reply["NodeNames"] is None
    assert reply["FailedAndUnresolvableNodes"] == {"node-b": "node has no GPU inventory"}


async def test_prioritize_replies_host_and_score_for_every_node_in_request_order(http):
    body = sample("prioritize-nodecachecapable-true.request")
    body["NodeNames"] = ["node-x", "node-a"]
    reply = await post(http, "prioritize", body)
    keys = {k for h in sample("prioritize-nodecachecapable-true.response") for k in h}
    assert [set(h) for h in reply] == [keys, keys]
    assert [h["Host"] for h in reply] == ["node-x", "node-a"]


async def test_a_follower_answers_filter_but_refuses_bind_so_the_scheduler_retries(http):
    body = sample("filter-nodecachecapable-true.request")
    body["NodeNames"] = ["node-a"]
    assert (await post(http, "filter", body))["NodeNames"] == ["node-a"]
    reply = await post(http, "bind", sample("bind.request"))
    assert reply == {"Error": NOT_LEADER}


async def test_unreadable_bodies_get_an_error_not_a_crash(http):
    assert "missing required field `Pod`" in (await post(http, "filter", {"pod": {}}))["Error"]
    assert "BindingArgs" in (await post(http, "bind", b"{"))["Error"]
    r = await http.post("/prioritize", data=b"[]")
    assert r.status == 400


async def test_an_invalid_gpu_request_is_the_filter_error_with_the_parsers_message(http):
    reply = await post(http, "filter", {"Pod": pod("bad", cores=150), "NodeNames": ["node-a"]})
    assert "nvidia.com/gpucores=150" in reply["Error"]


async def test_a_pod_of_another_profile_passes_filter_untouched(http):
    other = pod("other", mem=999999)
    other["spec"]["schedulerName"] = "default-scheduler"
    reply = await post(http, "filter", {"Pod": other, "NodeNames": ["node-a", "node-x"]})
    assert reply["NodeNames"] == ["node-a", "node-x"] and reply["FailedNodes"] == {}


async def test_readyz_says_why_and_metrics_show_latency_and_per_gpu_allocation(http):
    r = await http.get("/readyz")
    assert r.status == 503 and "cache of pods not synced yet" in await r.text()
    await post(http, "filter", {"Pod": pod("p"), "NodeNames": ["node-a"]})
    text = await (await http.get("/metrics")).text()
    assert 'gpuslice_extender_request_seconds_count{verb="filter"} 1.0' in text
    assert ('gpuslice_gpu_allocated_memory_mib{gpu="GPU-node-a-0",model="NVIDIA A10",'
            'node="node-a"} 2048.0') in text


async def test_a_pod_that_fits_nowhere_is_counted_by_its_reason(http):
    await post(http, "filter", {"Pod": pod("huge", mem=65536), "NodeNames": ["node-a", "node-x"]})
    text = await (await http.get("/metrics")).text()
    assert 'gpuslice_scheduler_pods_refused_total{reason="insufficient GPU memory"} 1.0' in text


async def test_before_the_caches_sync_every_verb_answers_an_error_never_no_inventory():
    """A restarted extender must not call every node empty: kube-scheduler would mark the pod
    unresolvable and wait minutes; an error makes it retry with back-off instead."""
    state = ExtenderState(timeout_s=30, clock=Clock())
    why = "gpuslice-scheduler is starting: its cache of pods is not synced yet"
    app = make_app(Evaluator(state, parse_policy("binpack")), _NoBinder(),  # type: ignore[arg-type]
                   Metrics(state), ready=lambda: why, is_leader=lambda: True,
                   starting=lambda: why)
    async with TestClient(TestServer(app)) as http:
        reply = await post(http, "filter", {"Pod": pod("p"), "NodeNames": ["n1"]})
        assert reply["Error"] == why and reply["FailedAndUnresolvableNodes"] == {}
        assert (await http.post("/prioritize", data=b"{}")).status == 503
        assert (await post(http, "bind", sample("bind.request")))["Error"] == why


async def test_a_verb_that_comes_while_the_caches_sync_waits_for_them():
    """A restarted extender holds kube-scheduler's call for a moment instead of failing it:
    each failed call costs the pod a FailedScheduling event, a status write and a back-off."""
    state = ExtenderState(timeout_s=30, clock=Clock())
    synced = asyncio.Event()
    why = "gpuslice-scheduler is starting: its cache of pods is not synced yet"
    app = make_app(Evaluator(state, parse_policy("binpack")), _NoBinder(),  # type: ignore[arg-type]
                   Metrics(state), ready=lambda: None, is_leader=lambda: True,
                   starting=lambda: None if synced.is_set() else why, synced=synced.wait,
                   start_wait_s=5.0)

    async def sync() -> None:
        await asyncio.sleep(0.2)
        state.on_node("ADDED", node("n1"))
        synced.set()

    async with TestClient(TestServer(app)) as http:
        syncing = asyncio.create_task(sync())
        reply = await post(http, "filter", {"Pod": pod("p"), "NodeNames": ["n1"]})
        await syncing
        assert reply["Error"] == "" and reply["NodeNames"] == ["n1"], reply


async def test_a_sync_that_takes_longer_than_the_wait_is_still_an_error():
    state = ExtenderState(timeout_s=30, clock=Clock())
    why = "gpuslice-scheduler is starting: its cache of pods is not synced yet"
    app = make_app(Evaluator(state, parse_policy("binpack")), _NoBinder(),  # type: ignore[arg-type]
                   Metrics(state), ready=lambda: why, is_leader=lambda: True,
                   starting=lambda: why, synced=asyncio.Event().wait, start_wait_s=0.1)
    async with TestClient(TestServer(app)) as http:
        reply = await post(http, "filter", {"Pod": pod("p"), "NodeNames": ["n1"]})
        assert reply["Error"] == why, "kube-scheduler retries it with back-off"
        assert (await post(http, "bind", sample("bind.request")))["Error"] == why


async def test_preempt_answers_in_the_go_shape(http):
    body = {"Pod": pod("p", mem=4096), "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"node-a": {"Pods": [{"UID": "uid-held"}],
                                                 "NumPDBViolations": 0}}}
    reply = await post(http, "preempt", body)
    assert reply == {"NodeNameToMetaVictims": {"node-a": {"Pods": [{"UID": "uid-held"}],
                                                          "NumPDBViolations": 0}}}
    assert (await http.post("/preempt", data=b"[]")).status == 400


@pytest.fixture
async def choosing() -> AsyncIterator[TestClient]:
    """Three nodes, node-b the fullest (binpack's choice); the filter chooses the node."""
    state = ExtenderState(timeout_s=30, clock=Clock())
    for name in ("node-a", "node-b", "node-c"):
        state.on_node("ADDED", node(name))
    state.on_pod("ADDED", assigned(pod("held", mem=8192), "node-b", ["GPU-node-b-0"],
                                   allocated="main"))
    app = make_app(Evaluator(state, parse_policy("binpack")), _NoBinder(),  # type: ignore[arg-type]
                   Metrics(state), ready=lambda: None, is_leader=lambda: False,
                   choose_node=True)
    async with TestClient(TestServer(app)) as client:
        yield client


async def test_the_filter_answers_only_the_node_prioritize_would_score_best(choosing):
    names = ["node-a", "node-b", "node-c"]
    reply = await post(choosing, "filter", {"Pod": pod("p"), "NodeNames": names})
    assert reply["NodeNames"] == ["node-b"], "one node: kube-scheduler neither scores nor asks"
    scores = await post(choosing, "prioritize", {"Pod": pod("p"), "NodeNames": names})
    assert max(scores, key=lambda h: h["Score"])["Host"] == "node-b", "the same choice"
    assert reply["FailedNodes"] == {} and reply["FailedAndUnresolvableNodes"] == {}, \
        "the nodes left out are not refused: nothing for preemption to cure"


async def test_refused_nodes_keep_their_reasons_when_the_filter_chooses(choosing):
    reply = await post(choosing, "filter", {"Pod": pod("p", mem=16384),
                                            "NodeNames": ["node-a", "node-b", "node-c"]})
    assert reply["NodeNames"] == ["node-b"], "binpack: the fuller node, on its free GPU"
    reply = await post(choosing, "filter", {"Pod": pod("q", mem=16384, gpus=2),
                                            "NodeNames": ["node-a", "node-b", "node-c"]})
    assert reply["NodeNames"] == ["node-a"], "the first of equals, in the order offered"
    assert list(reply["FailedNodes"]) == ["node-b"], "a refusal is still reported"


@pytest.mark.parametrize("spec", [
    {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a"]}]}}]}}},
    {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}},
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                                    "whenUnsatisfiable": "ScheduleAnyway"}]},
])
async def test_a_pod_with_preferences_of_its_own_is_scored_by_kube_scheduler(choosing, spec):
    p = pod("p")
    p["spec"].update(spec)
    names = ["node-a", "node-b", "node-c"]
    assert (await post(choosing, "filter", {"Pod": p, "NodeNames": names}))["NodeNames"] == names


async def test_hard_constraints_are_no_preference(choosing):
    p = pod("p")
    p["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone",
                                               "whenUnsatisfiable": "DoNotSchedule"}]
    reply = await post(choosing, "filter", {"Pod": p, "NodeNames": ["node-a", "node-b"]})
    assert reply["NodeNames"] == ["node-b"], "kube-scheduler applied them before the extender"

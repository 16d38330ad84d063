"""The kube-scheduler driver against a stub extender: the bodies it POSTs have the key sets of
the real kube-scheduler's (wire-samples/), and it filters, prioritizes, binds, reports and
retries like kube-scheduler does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from kubeapi.raw import node_body, pod_body
from kubeapi.scheduler_driver import DriverConfig, SchedulerDriver

# what a real kube-scheduler v1.36 sent (copied from the shared wire-samples)
SAMPLES = Path(__file__).parents[2] / "unit" / "scheduler" / "samples"
GPU = "example.com/gpu-slice"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / name).read_text())


class StubExtender:
    """Records every call; answers filter/prioritize/bind from the test's settings."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.calls: list[tuple[str, dict]] = []
        self.failed: dict[str, str] = {}  # node -> reason
        self.scores: dict[str, int] = {}
        self.delay = 0.0
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        verb = request.match_info["verb"]
        body = await request.json()
        self.calls.append((verb, body))
        await asyncio.sleep(self.delay)
        if verb == "filter":
            names = body["NodeNames"] or [n["metadata"]["name"] for n in body["Nodes"]["items"]]
            keep = [n for n in names if n not in self.failed]
            failed = {n: r for n, r in self.failed.items() if n in names}
            if body["NodeNames"] is None:
                items = [n for n in body["Nodes"]["items"] if n["metadata"]["name"] in keep]
                return web.json_response({"Nodes": {"metadata": {}, "items": items},
                                          "NodeNames": None, "FailedNodes": failed,
                                          "FailedAndUnresolvableNodes": {}, "Error": ""})
            return web.json_response({"Nodes": None, "NodeNames": keep, "FailedNodes": failed,
                                      "FailedAndUnresolvableNodes": {}, "Error": ""})
        if verb == "prioritize":
            names = body["NodeNames"] or [n["metadata"]["name"] for n in body["Nodes"]["items"]]
            return web.json_response([{"Host": n, "Score": self.scores.get(n, 0)}
                                      for n in names])
        code, reply = await self.raw.bind(body["PodName"], body["Node"], body["PodNamespace"],
                                          uid=body["PodUID"])
        return web.json_response({"Error": "" if code == 201 else reply["message"]})

    def verbs(self) -> list[str]:
        return [v for v, _ in self.calls]


@pytest.fixture
async def extender(raw):
    stub = StubExtender(raw)
    app = web.Application()
    app.router.add_post("/ext/{verb}", stub.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stub.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/ext"
    yield stub
    await runner.cleanup()


def gpu_pod(name: str, scheduler: str = "gpuslice-scheduler") -> dict:
    body = pod_body(name, schedulerName=scheduler)
    body["spec"]["containers"][0]["resources"] = {"limits": {GPU: "1"}}
    return body


def config(extender: StubExtender, **changes) -> DriverConfig:
    base = {"urlPrefix": extender.url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
            "bindVerb": "bind", "nodeCacheCapable": True, "httpTimeout": "5s",
            "managedResources": [{"name": GPU, "ignoredByScheduler": True}]}
    return DriverConfig.from_extender({**base, **changes}, initial_backoff=0.1, seed=1)


async def _events(raw, name: str) -> list[tuple[str, str]]:
    _, reply = await raw.call("GET", "/api/v1/namespaces/default/events",
                              fieldSelector=f"involvedObject.name={name}")
    return [(e["reason"], e["message"]) for e in reply["items"]]


async def test_filter_prioritize_and_bind_bodies_have_the_real_schedulers_keys(
        kube_api, raw, extender):
    for name in ("node-a", "node-b"):
        await raw.create(node_body(name))
    extender.scores = {"node-b": 10}
    async with SchedulerDriver(kube_api.kubeconfig, config(extender)) as driver:
        await raw.create(gpu_pod("gpu-1"))
        assert await driver.wait_until_bound(1, 10) == 1
    assert extender.verbs() == ["filter", "prioritize", "bind"]
    (_, filt), (_, prio), (_, bind) = extender.calls
    real = sample("extender-filter-nodecachecapable-true.request.json")
    for body in (filt, prio):
        assert body.keys() == real.keys() and body["Nodes"] is None
        assert sorted(body["NodeNames"]) == ["node-a", "node-b"]
        assert body["Pod"].keys() == real["Pod"].keys(), "no kind/apiVersion, like the sample"
        assert body["Pod"]["metadata"].keys() == real["Pod"]["metadata"].keys(), \
            "same metadata keys; managedFields stripped"
        assert body["Pod"]["spec"].keys() == real["Pod"]["spec"].keys(), \
            "the API server's defaults match a real one's"
    assert bind.keys() == sample("extender-bind.request.json").keys()
    assert bind["Node"] == "node-b", "prioritize's best score wins"
    _, pod = await raw.call("GET", "/api/v1/namespaces/default/pods/gpu-1")
    assert pod["spec"]["nodeName"] == "node-b"
    assert ("Scheduled", "Successfully assigned default/gpu-1 to node-b") in await _events(
        raw, "gpu-1")


async def test_without_node_cache_the_driver_sends_a_full_node_list(kube_api, raw, extender):
    for name in ("node-a", "node-b"):  # labels: fields a manager owns (a node created with
        await raw.create(node_body(name, {"zone": "a"}))  # status only has no managedFields)
    async with SchedulerDriver(kube_api.kubeconfig,
                               config(extender, nodeCacheCapable=False)) as driver:
        await raw.create(gpu_pod("gpu-1"))
        assert await driver.wait_until_bound(1, 10) == 1
    body = extender.calls[0][1]
    real = sample("extender-filter-nodecachecapable-false.request.json")
    assert body.keys() == real.keys() and body["NodeNames"] is None
    assert body["Nodes"].keys() == real["Nodes"].keys()
    item = body["Nodes"]["items"][0]
    assert item.keys() <= real["Nodes"]["items"][0].keys()
    assert "managedFields" in item["metadata"], "nodes are sent whole, managedFields included"


async def test_with_one_feasible_node_prioritize_is_skipped(kube_api, raw, extender):
    await raw.create(node_body("only"))
    async with SchedulerDriver(kube_api.kubeconfig, config(extender)) as driver:
        await raw.create(gpu_pod("gpu-1"))
        await driver.wait_until_bound(1, 10)
    assert extender.verbs() == ["filter", "bind"]


async def test_an_unfit_pod_gets_the_real_failed_scheduling_message_then_a_retry(
        kube_api, raw, extender):
    for name in ("node-a", "node-b"):
        await raw.create(node_body(name))
    extender.failed = {"node-a": "Insufficient GPU memory", "node-b": "Insufficient GPU memory"}
    async with SchedulerDriver(kube_api.kubeconfig, config(extender)) as driver:
        await raw.create(gpu_pod("gpu-1"))
        for _ in range(50):
            if driver.stats.failed:
                break
            await asyncio.sleep(0.05)
        extender.failed = {}
        await raw.create(node_body("node-c"))  # a cluster event: the pod is tried again
        assert await driver.wait_until_bound(1, 10) == 1
    message = ("0/2 nodes are available: 2 Insufficient GPU memory. preemption: 0/2 nodes are "
               "available: 2 No preemption victims found for incoming pod.")
    assert ("FailedScheduling", message) in await _events(raw, "gpu-1")


async def test_a_slow_extender_fails_like_go_and_an_ignorable_one_is_skipped(
        kube_api, raw, extender):
    await raw.create(node_body("node-a"))
    extender.delay = 0.5
    strict = config(extender, httpTimeout="100ms", bindVerb="")
    async with SchedulerDriver(kube_api.kubeconfig, strict) as driver:
        await raw.create(gpu_pod("slow-1"))
        for _ in range(40):
            if driver.stats.failures:
                break
            await asyncio.sleep(0.05)
    assert driver.stats.failures[0][1] == (
        f'Post "{extender.url}/filter": context deadline exceeded (Client.Timeout exceeded '
        "while awaiting headers)")
    lenient = config(extender, httpTimeout="100ms", bindVerb="", ignorable=True)
    async with SchedulerDriver(kube_api.kubeconfig, lenient) as driver:
        assert await driver.wait_until_bound(1, 10) == 1, "skipped, then bound by the driver"


async def test_pods_of_other_schedulers_and_without_managed_resources_skip_the_extender(
        kube_api, raw, extender):
    await raw.create(node_body("node-a"))
    async with SchedulerDriver(kube_api.kubeconfig, config(extender)) as driver:
        await raw.create(gpu_pod("theirs", scheduler="volcano"))
        await raw.create(pod_body("plain", schedulerName="gpuslice-scheduler"))
        assert await driver.wait_until_bound(1, 10) == 1
        await asyncio.sleep(0.2)
    assert extender.calls == [], "no managed resource: the extender is not asked"
    _, theirs = await raw.call("GET", "/api/v1/namespaces/default/pods/theirs")
    assert "nodeName" not in theirs["spec"]


async def test_a_gated_pod_waits_until_its_scheduling_gates_are_removed(kube_api, raw,
                                                                        extender):
    await raw.create(node_body("node-a"))
    gated = gpu_pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    async with SchedulerDriver(kube_api.kubeconfig, config(extender)) as driver:
        await raw.create(gated)
        await asyncio.sleep(0.3)
        assert extender.calls == [] and driver.stats.attempts == 0
        code, _ = await raw.call("PATCH", "/api/v1/namespaces/default/pods/gated",
                                 [{"op": "remove", "path": "/spec/schedulingGates"}],
                                 "application/json-patch+json")
        assert code == 200
        assert await driver.wait_until_bound(1, 10) == 1


def test_the_config_reads_a_kube_scheduler_configuration_extender_entry():
    cfg = DriverConfig.from_extender({
        "urlPrefix": "http://x/ext", "filterVerb": "filter", "bindVerb": "bind",
        "weight": 2, "nodeCacheCapable": True, "httpTimeout": "1500ms", "ignorable": True,
        "managedResources": [{"name": "nvidia.com/gpu"},
                             {"name": "nvidia.com/gpumem", "ignoredByScheduler": True}]})
    assert (cfg.prioritize_verb, cfg.weight, cfg.http_timeout, cfg.ignorable) == ("", 2, 1.5,
                                                                                  True)
    assert cfg.managed_resources == {"nvidia.com/gpu": False, "nvidia.com/gpumem": True}
    with pytest.raises(ValueError, match="Go duration"):
        DriverConfig.from_extender({"urlPrefix": "u", "httpTimeout": "soon"})

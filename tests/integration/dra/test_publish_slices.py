"""The node's ResourceSlice on an API server: created, left alone while nothing changes,
rewritten (generation +1) on a health change, retried on 409, read back (a gate-off server's
silent drop of the sharing fields is reported), removed at uninstall. In-process server unless
marked; the gate-off cases need it (a real server is started with its gates)."""

from __future__ import annotations

import logging
import uuid

import msgspec
import pytest

from gpuslice.dra.publisher import GATE_OFF, SlicePublisher
from gpuslice.dra.slices import build_slice, same_devices
from gpuslice.kube import errors
from gpuslice.kube.events import EventRecorder
from gpuslice.node.inventory import node_gpus
from gpuslice.node.nvml import DeviceInfo, fake_uuid
from gpuslice.node.settings import DraConfig, load
from kubeapi import dra_gates, dra_samples

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
DEVICES = [DeviceInfo(index=i, uuid=fake_uuid(i), model="Fake GPU", memory_bytes=16 << 30,
                      sm_count=80, numa_node=0) for i in range(4)]
GPUS = node_gpus(DEVICES, load(None, {"nodeName": "n"}, environ={}), {})


@pytest.fixture
def node() -> str:
    """A node name of this test alone (a real API server keeps other tests' slices)."""
    return f"node-{uuid.uuid4().hex[:8]}"


def publisher(kube_api, node, **kw) -> SlicePublisher:
    return SlicePublisher(kube_api.async_client(), node, DraConfig(), **kw)


async def stored(raw, node) -> dict:
    code, obj = await raw.call("GET", f"{SLICES}/{node}-gpu.gpuslice.io")
    assert code == 200, obj
    return obj


async def test_the_first_publish_creates_the_contracts_slice(kube_api, raw, node):
    await publisher(kube_api, node).publish(GPUS)
    obj, want = await stored(raw, node), build_slice(node, GPUS)
    # kube-apiserver stores quantities canonically ("16384Mi" as "16Gi"): compare by value
    assert same_devices(obj, want) and obj["spec"]["pool"] == want["spec"]["pool"]


async def test_publishing_the_same_gpus_again_writes_nothing(kube_api, raw, node):
    pub = publisher(kube_api, node)
    await pub.publish(GPUS)
    before = await stored(raw, node)
    await publisher(kube_api, node).publish(GPUS)  # an agent restart
    await pub.publish(GPUS)
    after = await stored(raw, node)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert pub.problem is None


async def test_a_gpu_turning_unhealthy_rewrites_the_slice_with_the_next_generation(
        kube_api, raw, node):
    pub = publisher(kube_api, node)
    await pub.publish(GPUS)
    await pub.publish([msgspec.structs.replace(g, healthy=g.index != 2) for g in GPUS])
    obj = await stored(raw, node)
    assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0", "gpu-1", "gpu-3"]
    assert obj["spec"]["pool"]["generation"] == 2
    await pub.publish(GPUS)
    obj = await stored(raw, node)
    assert len(obj["spec"]["devices"]) == 4 and obj["spec"]["pool"]["generation"] == 3


async def test_hidden_gpus_and_memory_scaling_reach_the_slice(kube_api, raw, node):
    cfg = load(None, {"nodeName": node, "hideGPUs": ["0", GPUS[1].uuid], "memoryScaling": 0.5},
               environ={})
    await publisher(kube_api, node).publish(node_gpus(DEVICES, cfg, {}))
    devices = (await stored(raw, node))["spec"]["devices"]
    assert [d["name"] for d in devices] == ["gpu-2", "gpu-3"]
    # half of 16 GiB, sent as "8192Mi": the API server stores quantities canonically
    assert build_slice(node, node_gpus(DEVICES, cfg, {}))["spec"]["devices"][0]["capacity"][
        "memory"]["value"] == "8192Mi"
    assert devices[0]["capacity"]["memory"]["value"] == "8Gi"


async def test_a_409_on_update_is_retried_after_a_fresh_read(kube_api, raw, node):
    faults = kube_api.need_faults()
    pub = publisher(kube_api, node)
    await pub.publish(GPUS)
    faults.fail_next(2, code=409, method="PUT", resource="resourceslices")
    await pub.publish(GPUS[:2])
    obj = await stored(raw, node)
    assert len(obj["spec"]["devices"]) == 2 and obj["spec"]["pool"]["generation"] == 2


async def test_a_slice_created_by_someone_else_meanwhile_is_updated_not_lost(kube_api, raw, node):
    faults = kube_api.need_faults()
    faults.fail_next(1, code=409, method="POST", resource="resourceslices")
    await publisher(kube_api, node).publish(GPUS)
    assert len((await stored(raw, node))["spec"]["devices"]) == 4


async def test_a_gate_off_server_is_reported_loudly_and_once(kube_api, raw, caplog, node):
    kube_api.need_faults()
    client = kube_api.async_client()
    events = EventRecorder(client, "gpuslice-node-agent")
    pub = SlicePublisher(client, node, DraConfig(), events=events)
    with dra_gates.consumable_capacity_off(), caplog.at_level(logging.ERROR):
        await pub.publish(GPUS)
        await pub.publish(GPUS)
        await events.flush()
    assert pub.problem == GATE_OFF
    assert "enable the feature gate or use the device-plugin path" in pub.problem
    assert sum(GATE_OFF in r.getMessage() for r in caplog.records) == 1, "said once"
    obj = await stored(raw, node)
    assert "allowMultipleAllocations" not in obj["spec"]["devices"][0]
    assert obj["spec"]["pool"]["generation"] == 1, "the dropped fields are no device change"
    _, listed = await raw.call("GET", "/api/v1/namespaces/default/events")
    warnings = [e for e in listed["items"] if e["reason"] == "DRASharingDropped"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
    assert warnings[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": node}
    await pub.publish(GPUS)  # the gate was turned on
    assert pub.problem is None
    assert (await stored(raw, node))["spec"]["devices"][0]["allowMultipleAllocations"] is True


async def test_the_gate_off_stand_in_stores_what_a_real_gate_off_server_stored(kube_api, raw):
    kube_api.need_faults()
    sent = next(o for n, o in dra_samples.load("input") if n.startswith("02-"))
    real = next(o for n, o in dra_samples.load("returned") if n.startswith("e1-"))
    with dra_gates.consumable_capacity_off():
        code, obj = await raw.call("POST", SLICES, dra_samples.sent(sent))
    assert code == 201 and obj["spec"] == real["spec"]


async def test_remove_deletes_this_nodes_slices_only(kube_api, raw, node):
    other = f"{node}-other"
    await publisher(kube_api, node).publish(GPUS)
    await publisher(kube_api, other).publish(GPUS)
    pub = publisher(kube_api, node)
    await pub.remove()
    await pub.remove()  # nothing left: fine
    _, listed = await raw.call("GET", SLICES)
    names = {s["metadata"]["name"] for s in listed["items"]}
    assert f"{other}-gpu.gpuslice.io" in names and f"{node}-gpu.gpuslice.io" not in names


async def test_an_api_server_that_keeps_answering_409_gives_a_typed_conflict(kube_api, node):
    faults = kube_api.need_faults()
    faults.fail_next(10, code=409, method="POST", resource="resourceslices")
    with pytest.raises(errors.Conflict):
        await publisher(kube_api, node, attempts=3).publish(GPUS)

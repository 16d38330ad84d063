"""A claim's allocation -> this node's shares, on the objects a real kube-scheduler v1.36 wrote
(tests/golden/dra-samples/returned/), and the errors for claims this node cannot honour."""

from __future__ import annotations

import copy
import functools

import pytest

from gpuslice import model
from gpuslice.container.limits import ClaimShares, Share, region_spec
from gpuslice.dra import claims
from gpuslice.dra.claims import DraError
from gpuslice.dra.slices import build_slice
from gpuslice.node.inventory import node_gpus
from gpuslice.node.nvml import DeviceInfo
from gpuslice.node.settings import load
from kubeapi import dra_samples

DRIVER = "gpu.example.com"  # the samples' driver
GIB = 1024
DEVICES = {f"gpu-{i}": claims.NodeDevice(f"gpu-{i}", f"GPU-{i}0000000-0000-0000-0000-000000000000",
                                        i, 80 * GIB, True) for i in range(2)}
UUID0, UUID1 = DEVICES["gpu-0"].uuid, DEVICES["gpu-1"].uuid


@functools.cache
def _claims() -> list[dict]:
    return [o for _, o in dra_samples.load("returned", ("ResourceClaim",))]


def sample(name: str) -> dict:
    """The first state of claim `name` the samples hold with an allocation (a1 before a5)."""
    objs = [o for o in _claims()
            if o["metadata"]["name"] == name and (o.get("status") or {}).get("allocation")]
    return copy.deepcopy(objs[0])


def shares_of(claim: dict, node: str = "node-a", devices=None) -> ClaimShares:
    return claims.shares(claim, driver=DRIVER, node=node, devices=devices or DEVICES)


@pytest.mark.parametrize(("claim", "node", "expected"), [
    pytest.param("share-claim-1", "node-a",
                 [Share("gpu", "gpu-0", UUID0, 0, 30 * GIB, 40,
                        "e4db67a0-2f6c-4a9a-8e46-36279f468e0e")], id="a 30Gi / 40 share"),
    pytest.param("rounding-claim", "node-a",
                 [Share("gpu", "gpu-0", UUID0, 0, 2 * GIB, 3,
                        "87bcd72d-f13e-41d3-9a7c-5f025e3db897")],
                 id="1500Mi / 2500m asked, consumedCapacity 2Gi / 3 enforced"),
    pytest.param("nocap-claim", "node-a",
                 [Share("gpu", "gpu-0", UUID0, 0, GIB, 1, "31688fad-6f38-4dbc-a5cd-4f0ffe61421c")],
                 id="no capacity asked: the policy default consumed"),
    pytest.param("c-share-1-claim", "node-c",
                 [Share("gpu", "gpu-0", UUID0, 0, 80 * GIB, 100, None)],
                 id="exclusive device: no consumedCapacity, no shareID = the whole GPU"),
    pytest.param("distinct-claim", "node-a",
                 [Share("a", "gpu-0", UUID0, 0, 10 * GIB, 10,
                        "b5f579ed-8a8d-47e6-b02d-92078d379a2e"),
                  Share("b", "gpu-1", UUID1, 1, 10 * GIB, 10,
                        "d3a28bba-3c7c-4c8b-9462-c1035b1cae5f")],
                 id="two requests on two GPUs"),
    pytest.param("ext-pod-1-extended-resources-cq66q", "node-a",
                 [Share("container-0-request-0", "gpu-0", UUID0, 0, GIB, 1,
                        "263b859e-6da0-4c4b-8a30-1f9f136f3224")],
                 id="the scheduler's extended-resource claim"),
])
def test_the_schedulers_allocations_give_the_consumed_capacity_as_limits(claim, node, expected):
    got = shares_of(sample(claim), node)
    assert list(got.shares) == expected
    assert got.name == claim and got.namespace == "default"


def test_the_pods_come_from_reserved_for():
    got = shares_of(sample("share-claim-1"))
    assert got.pods == (("share-pod-1", "351334d2-cf84-4456-ab32-fc5a7c1f99fe"),)
    assert got.uid == "f9e5ee98-602d-4677-a402-1792e3d46836"


def test_memory_is_rounded_up_to_whole_mib():
    claim = sample("share-claim-1")
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] = \
        "1048577"  # one byte over 1 MiB
    assert shares_of(claim).shares[0].memory_mib == 2


def test_results_of_other_drivers_and_pools_are_not_ours():
    claim = sample("distinct-claim")
    results = claim["status"]["allocation"]["devices"]["results"]
    results[0]["driver"] = "other.example.com"
    results.append({**results[1], "pool": "node-z"})
    assert [s.device for s in shares_of(claim).shares] == ["gpu-1"]


@pytest.mark.parametrize(("edit", "words"), [
    pytest.param(lambda c: c["status"].pop("allocation"), ["not allocated"], id="not allocated"),
    pytest.param(lambda c: c["status"]["allocation"]["devices"]["results"][0].update(
        pool="node-b"), ["none of its gpu.example.com devices is on node node-a", "node-b",
                         "delete the pod"], id="allocated for another node"),
    pytest.param(lambda c: c["status"]["allocation"]["devices"]["results"][0].update(
        device="gpu-7"), ["claim default/share-claim-1 device node-a/gpu-7",
                          "has no such GPU now", "gpu-0, gpu-1"], id="a GPU that is gone"),
    pytest.param(lambda c: c["status"]["allocation"]["devices"]["results"][0][
        "consumedCapacity"].update(memory="lots"), ["consumedCapacity.memory", "lots"],
        id="a malformed quantity"),
    pytest.param(lambda c: c["status"]["allocation"]["devices"]["results"][0][
        "consumedCapacity"].update(memory="81Gi"), ["82944 MiB", "publishes 81920 MiB",
                                                    "memoryScaling"],
        id="more than the GPU publishes"),
    pytest.param(lambda c: c["status"]["allocation"]["devices"]["results"][0][
        "consumedCapacity"].update(cores="150"), ["150 cores"], id="more than 100 cores"),
    pytest.param(lambda c: c["status"]["allocation"]["devices"]["results"][0].update(
        consumedCapacity="30Gi"), ["not a map"], id="consumedCapacity not a map"),
])
def test_claims_this_node_cannot_honour_say_which_claim_device_and_what_to_do(edit, words):
    claim = sample("share-claim-1")
    edit(claim)
    with pytest.raises(DraError) as e:
        shares_of(claim)
    for w in words:
        assert w in str(e.value)


def test_a_claim_on_an_unhealthy_gpu_is_refused():
    sick = {**DEVICES, "gpu-0": claims.NodeDevice("gpu-0", UUID0, 0, 80 * GIB, False)}
    with pytest.raises(DraError, match=f"GPU {UUID0} is unhealthy"):
        shares_of(sample("share-claim-1"), devices=sick)


def test_node_devices_publish_memory_rounded_down_to_the_step_and_keep_unhealthy_ones():
    gpus = [model.GPU(uuid=UUID0, model="m", memory_mib=81559, index=0),
            model.GPU(uuid=UUID1, model="m", memory_mib=81559, index=3, healthy=False)]
    got = claims.node_devices(gpus, 256)
    assert got == {"gpu-0": claims.NodeDevice("gpu-0", UUID0, 0, 81408, True),
                   "gpu-3": claims.NodeDevice("gpu-3", UUID1, 3, 81408, False)}


def test_the_region_holds_each_gpu_once_with_its_shares_added_and_the_largest_cores():
    c = ClaimShares("u", "ns", "c", (
        Share("a", "gpu-0", UUID0, 0, 1024, 20, "s1"),
        Share("b", "gpu-1", UUID1, 1, 2048, 30, "s2"),
        Share("c", "gpu-0", UUID0, 0, 512, 90, "s3")), ())
    spec = region_spec(c, compute_mode="work-conserving")
    assert spec.device_uuids == (UUID0, UUID1)
    assert spec.limits == (1536 << 20, 2048 << 20)
    assert spec.sm_limit == 100  # 20 + 90 on gpu-0, capped at one GPU
    assert spec.compute_mode == "work-conserving"


@pytest.mark.parametrize("scaling", [1.0, 0.9, 1.5])
def test_the_plugin_sizes_each_gpu_as_the_slice_publishes_it(scaling):
    devices = [DeviceInfo(index=i, uuid=f"GPU-{i}", model="m", memory_bytes=(81559 << 20) + i,
                          sm_count=1) for i in range(2)]
    cfg = load(None, {"nodeName": "n", "memoryScaling": scaling}, environ={})
    gpus = node_gpus(devices, cfg, {})
    published = {d["name"]: d["capacity"]["memory"]["value"]
                 for d in build_slice("n", gpus, step_mib=256)["spec"]["devices"]}
    mine = {n: f"{d.memory_mib}Mi" for n, d in claims.node_devices(gpus, 256).items()}
    assert mine == published


def test_a_share_names_the_device_node_nvml_gives_its_gpu_not_its_index():
    gpus = [model.GPU(uuid=UUID0, model="m", memory_mib=1024, index=0)]
    assert claims.node_devices(gpus, 256, {UUID0: 7})["gpu-0"].minor == 7
    assert claims.node_devices(gpus, 256)["gpu-0"].minor == 0, "NVML without minors: the index"

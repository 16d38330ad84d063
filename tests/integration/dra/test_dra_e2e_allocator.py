"""The stand-in allocator allocates like kube-scheduler v1.36 did in dra-samples (the same
claims against the same slices give the same devices and consumedCapacity), never
over-commits a device, and rounds every share onto the device's policy."""

from __future__ import annotations

import uuid
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuslice.quantity import parse_quantity
from kubeapi import dra_samples
from kubeapi.dra_allocator import (
    DELETE_PROTECTION,
    StandInAllocator,
    Usage,
    devices_of,
    format_quantity,
    plan,
    results,
)

CLASSES = {"gpu.example.com": next(o for _, o in dra_samples.load("input", ("DeviceClass",)))}


def sample(prefix: str, kind: str = "ResourceClaim") -> list[dict]:
    return [o for n, o in dra_samples.load("input", (kind,)) if n.startswith(prefix)]


def allocate(claims: list[dict], slices: list[dict], held: list[dict] = ()) -> list[dict | None]:
    usage, devices = Usage.of(held), devices_of(slices)
    return [plan(c, devices, usage, CLASSES) for c in claims]


def picked(allocation: dict | None) -> list[tuple[str, str, dict | None]]:
    return [(r["pool"], r["device"], r.get("consumedCapacity"))
            for r in (allocation or {}).get("devices", {}).get("results", [])]


def with_status(claim: dict, allocation: dict | None) -> dict:
    return {**claim, "status": {"allocation": allocation} if allocation else {}}


NODE_A, NODE_BC = sample("02-", "ResourceSlice"), sample("09-", "ResourceSlice")
SHARE = {"cores": "40", "memory": "30Gi"}


def test_five_30gi_claims_fill_two_80gi_gpus_two_each_and_the_fifth_waits():
    got = allocate(sample("03-"), NODE_A)
    real = [o for n, o in dra_samples.load("returned") if n.startswith("a1-")]
    assert [picked(a) for a in got] == [
        [("node-a", "gpu-0", SHARE)], [("node-a", "gpu-0", SHARE)],
        [("node-a", "gpu-1", SHARE)], [("node-a", "gpu-1", SHARE)], []]
    assert sorted(p for a in real for p in picked(a["status"].get("allocation"))) == \
        sorted(p for a in got for p in picked(a)), "the same shares as the real scheduler"
    first = got[0]["devices"]["results"][0]
    assert uuid.UUID(first["shareID"]) and first["request"] == "gpu"
    assert got[0]["nodeSelector"] == real[0]["status"]["allocation"]["nodeSelector"]


def test_no_capacity_takes_the_default_and_requests_round_up_to_the_step():
    held = [with_status(c, a) for c, a in zip(sample("03-"), allocate(sample("03-"), NODE_A),
                                               strict=True)]
    nocap, fullcap, rounding = allocate(sample("07-"), NODE_A, held)
    assert picked(nocap) == [("node-a", "gpu-0", {"cores": "1", "memory": "1Gi"})]  # c1
    assert fullcap is None, "pending while every device holds a share (c3)"
    assert picked(rounding)[0][2] == {"cores": "3", "memory": "2Gi"}  # c2: 1500Mi / 2500m


def test_without_a_policy_no_capacity_takes_the_whole_value_and_a_second_waits():
    node_b = [s for s in NODE_BC if s["spec"]["nodeName"] == "node-b"]
    first, second = allocate(sample("10-b-nocap-1") + sample("10-b-nocap-2"), node_b)
    assert picked(first) == [("node-b", "gpu-0", {"cores": "100", "memory": "80Gi"})]  # c4
    assert picked(second) == [("node-b", "gpu-1", {"cores": "100", "memory": "80Gi"})]
    share, = allocate(sample("10-b-share"), node_b, [with_status(sample("10-b-nocap-1")[0],
                                                                 first)])
    assert picked(share) == [("node-b", "gpu-1", SHARE)]  # c5


def test_an_exclusive_device_is_taken_whole_without_consumed_capacity_or_share_id():
    node_c = [s for s in NODE_BC if s["spec"]["nodeName"] == "node-c"]
    first, second = allocate(sample("10-c-share-1") + sample("10-c-share-2"), node_c)
    assert first["devices"]["results"][0].keys() == {"request", "driver", "pool", "device"}
    assert second is None, "the device is held whole (c8)"


def test_distinct_attribute_puts_two_requests_on_two_gpus_and_count_3_of_2_waits():
    distinct, = allocate(sample("11-"), NODE_A)
    assert [p[1] for p in picked(distinct)] == ["gpu-0", "gpu-1"]  # c10
    count3, = allocate(sample("15-"), NODE_A)
    assert count3 is None, "one request never takes one device twice"


def test_quantities_are_spelled_as_the_api_server_spells_them():
    assert format_quantity(Fraction(30 << 30), True) == "30Gi"
    assert format_quantity(Fraction(1500 << 20), True) == "1500Mi"
    assert format_quantity(Fraction(40), False) == "40"
    assert format_quantity(Fraction(5, 2), False) == "2500m"
    assert format_quantity(Fraction(2000), False) == "2k"


def gpu_slice(node: str, memories: list[int], step: int, shareable: list[bool]) -> dict:
    devices = []
    for i, (mib, share) in enumerate(zip(memories, shareable, strict=True)):
        value = f"{mib // step * step}Mi"
        device = {"name": f"gpu-{i}", "capacity": {"memory": {"value": value},
                                                   "cores": {"value": "100"}}}
        if share:
            device["allowMultipleAllocations"] = True
            device["capacity"]["memory"]["requestPolicy"] = {"default": value, "validRange": {
                "min": f"{step}Mi", "max": value, "step": f"{step}Mi"}}
            device["capacity"]["cores"]["requestPolicy"] = {"default": "100", "validRange": {
                "min": "1", "max": "100", "step": "1"}}
        devices.append(device)
    return {"spec": {"driver": "gpu.example.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1}, "devices": devices}}


def claim(i: int, memory: int | None, cores: int | None, count: int) -> dict:
    caps = {k: v for k, v in (("memory", f"{memory}Mi" if memory else None),
                              ("cores", str(cores) if cores else None)) if v}
    exact = {"deviceClassName": "gpu.example.com", "count": count,
             **({"capacity": {"requests": caps}} if caps else {})}
    return {"metadata": {"name": f"c{i}", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exact}]}}}


@settings(max_examples=60, deadline=None)
@given(step=st.sampled_from([1, 256, 1024]),
       nodes=st.lists(st.tuples(st.lists(st.integers(1024, 81559), min_size=1, max_size=4),
                                st.lists(st.booleans(), min_size=4, max_size=4)),
                      min_size=1, max_size=3),
       asks=st.lists(st.tuples(st.one_of(st.none(), st.integers(1, 40000)),
                               st.one_of(st.none(), st.integers(1, 100)),
                               st.integers(1, 2)), min_size=1, max_size=25))
def test_no_device_is_over_committed_and_every_share_lies_on_its_policy(step, nodes, asks):
    slices = [gpu_slice(f"n{i}", mems, step, share[:len(mems)])
              for i, (mems, share) in enumerate(nodes)]
    claims = [claim(i, *a) for i, a in enumerate(asks)]
    held = [with_status(c, a) for c, a in zip(claims, allocate(claims, slices), strict=True)]
    devices = {(d.pool, d.name): d for d in devices_of(slices)}
    per_device: dict[tuple[str, str], list[dict | None]] = {}
    for c in held:
        for r in results(c):
            per_device.setdefault((r["pool"], r["device"]), []).append(r.get("consumedCapacity"))
            asked = c["spec"]["devices"]["requests"][0]["exactly"].get("capacity", {})
            for name, q in (r.get("consumedCapacity") or {}).items():
                cap = devices[(r["pool"], r["device"])].capacity[name]
                valid = cap["requestPolicy"]["validRange"]
                low, got = parse_quantity(valid["min"]), parse_quantity(q)
                assert (got - low) % parse_quantity(valid["step"]) == 0, "on the step"
                wanted = asked.get("requests", {}).get(name)
                assert got >= parse_quantity(wanted or cap["requestPolicy"]["default"])
    for key, shares in per_device.items():
        device = devices[key]
        if not device.shareable:
            assert shares == [None], f"{key}: an exclusive device holds one claim, whole"
            continue
        for name, cap in device.capacity.items():
            used = sum(parse_quantity(s[name]) for s in shares)
            assert used <= parse_quantity(cap["value"]), f"{key} {name} over-committed"


async def test_the_stand_in_writes_allocations_and_the_finalizer_through_the_api(kube_api, raw):
    base = "/apis/resource.k8s.io/v1"
    await raw.call("POST", f"{base}/deviceclasses", dra_samples.sent(CLASSES["gpu.example.com"]))
    await raw.call("POST", f"{base}/resourceslices", dra_samples.sent(NODE_A[0]))
    for c in sample("03-"):
        code, made = await raw.call("POST", f"{base}/namespaces/default/resourceclaims",
                                    dra_samples.sent(c))
        assert code == 201, made
    allocator = StandInAllocator(kube_api.async_client())
    assert await allocator.allocate_pending() == (4, 1)
    assert await allocator.allocate_pending() == (0, 1), "allocated claims stay as they are"
    _, listed = await raw.call("GET", f"{base}/namespaces/default/resourceclaims")
    done = [c for c in listed["items"] if results(c)]
    assert len(done) == 4
    assert all(c["metadata"]["finalizers"] == [DELETE_PROTECTION] for c in done)
    assert {r["consumedCapacity"]["memory"] for c in done for r in results(c)} == {"30Gi"}

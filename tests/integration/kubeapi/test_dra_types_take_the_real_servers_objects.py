"""The resource.k8s.io/v1 types of the test API server take every DRA object a real v1.36
server took (dra-samples/input) or returned (dra-samples/returned) and give it back as the real
one does: the spec as sent plus the decoder's defaults, claim status as written through
/status (either backend)."""

from __future__ import annotations

import copy

from kubeapi import dra_samples

PLURAL = {"ResourceSlice": "resourceslices", "ResourceClaim": "resourceclaims",
          "ResourceClaimTemplate": "resourceclaimtemplates", "DeviceClass": "deviceclasses"}


def _path(obj: dict) -> str:
    ns = obj["metadata"].get("namespace")
    where = f"namespaces/{ns or 'default'}/" if obj["kind"] in (
        "ResourceClaim", "ResourceClaimTemplate") else ""
    return f"/apis/resource.k8s.io/v1/{where}{PLURAL[obj['kind']]}"


def test_the_samples_hold_every_dra_kind():
    kinds = {obj["kind"] for folder in ("input", "returned")
             for _, obj in dra_samples.load(folder)}
    assert kinds == set(dra_samples.DRA_KINDS)


async def _delete(raw, url: str) -> None:
    await raw.call("PATCH", url, {"metadata": {"finalizers": None}},
                   "application/merge-patch+json")
    await raw.call("DELETE", url)


def served(obj: dict) -> dict:
    """`obj`'s spec as a v1.36 server returns it: with the defaults its decoder adds, which
    the returned samples show (an ExactCount of 1 for a device request that names no mode,
    `metadata: {}` in a claim template's spec)."""
    spec = copy.deepcopy(obj["spec"])
    if obj["kind"] == "ResourceClaimTemplate":
        spec = {"metadata": {}, **spec}
    claim = spec.get("spec", spec) if obj["kind"] == "ResourceClaimTemplate" else spec
    if obj["kind"] in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in claim["devices"]["requests"]:
            exactly = request.get("exactly")
            if exactly is not None:
                exactly.setdefault("allocationMode", "ExactCount")
                if exactly["allocationMode"] == "ExactCount":
                    exactly.setdefault("count", 1)
    return spec


async def test_every_sample_round_trips_through_the_server(raw):
    for folder in ("input", "returned"):
        for name, obj in dra_samples.load(folder):
            if raw.kube_api.is_real:  # it keeps other tests' DRA objects
                await _delete(raw, f"{_path(obj)}/{obj['metadata']['name']}")
            code, made = await raw.call("POST", _path(obj), dra_samples.sent(obj))
            assert code == 201, (name, made)
            url = f"{_path(obj)}/{made['metadata']['name']}"
            want = served(obj)
            assert made["spec"] == want, f"{name}: the spec comes back as a real server's"
            assert made["metadata"].get("finalizers") == obj["metadata"].get("finalizers")
            if obj["kind"] == "ResourceClaim":
                assert made["status"] == {}, "a new claim's status is empty, not absent"
            if obj.get("status"):
                code, written = await raw.call("PUT", f"{url}/status",
                                               {**made, "status": obj["status"]})
                assert code == 200, (name, written)
                # the reply, not a later read: on a real cluster kube-controller-manager frees
                # a claim reserved for pods that do not exist right after
                assert written["status"] == obj["status"], name
            code, got = await raw.call("GET", url)
            assert code == 200 and got["spec"] == want, name
            await _delete(raw, url)


def test_the_returned_samples_already_hold_those_defaults():
    """served() only adds what the real server added to what it was sent."""
    for name, obj in dra_samples.load("returned"):
        assert served(obj) == obj["spec"], name


async def test_resource_slices_are_listed_by_node_and_driver(raw):
    for _, obj in dra_samples.load("input", ("ResourceSlice",)):
        await raw.call("POST", _path(obj), dra_samples.sent(obj))
    code, found = await raw.call("GET", "/apis/resource.k8s.io/v1/resourceslices",
                                 fieldSelector="spec.nodeName=node-b,spec.driver=gpu.example.com")
    assert code == 200
    assert [s["metadata"]["name"] for s in found["items"]] == ["node-b-gpu.example.com"]


async def test_a_slice_whose_generation_is_a_string_is_a_400(raw):
    _, obj = dra_samples.load("input", ("ResourceSlice",))[0]
    body = dra_samples.sent(obj)
    body["spec"]["pool"]["generation"] = "1"
    code, reply = await raw.call("POST", _path(obj), body)
    assert code == 400 and reply["message"] == (
        'ResourceSlice in version "v1" cannot be handled as a ResourceSlice: json: cannot '
        "unmarshal string into Go struct field ResourcePool.spec.pool.generation of type int64")

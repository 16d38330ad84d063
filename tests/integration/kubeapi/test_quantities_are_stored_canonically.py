"""Quantities come back in the text kube-apiserver stores, not as sent: "3000" is "3k",
"16384Mi" is "16Gi", pod and node values are rounded up to a milli ("0.1n" is "1m"). The
in-process server's port (kubeapi.quantity) is checked against examples the real Go library
printed (quantity_examples.json, made by quantity_examples.go), then both backends against it
through the API: pods, nodes, ResourceSlices, ResourceClaims. Code that compares quantity
strings (instead of values) breaks on a real cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeapi.quantity import FORMAT_WRONG, SUFFIX, QuantityError, stored
from kubeapi.raw import node_body, pod_body

EXAMPLES = json.loads((Path(__file__).parent / "quantity_examples.json").read_text())
PODS = "/api/v1/namespaces/default/pods"


def _stored_or_error(text: str, milli: bool) -> str:
    try:
        return stored(text, milli=milli)
    except QuantityError as e:
        return f"error: {e}"


def test_the_port_gives_what_the_real_library_gives_for_every_example():
    assert len(EXAMPLES) > 8000
    wrong = [(text, milli, want, _stored_or_error(text, milli == 2))
             for text, *wants in EXAMPLES for milli, want in enumerate(wants, 1)
             if _stored_or_error(text, milli == 2) != want]
    assert wrong == []


@pytest.mark.parametrize(("sent", "want", "want_milli"), [
    ("3000", "3k", "3k"), ("16384Mi", "16Gi", "16Gi"), ("8192Mi", "8Gi", "8Gi"),
    ("0.5Gi", "512Mi", "512Mi"), ("1.5", "1500m", "1500m"), ("1e3", "1e3", "1e3"),
    ("100m", "100m", "100m"), ("0.1n", "1n", "1m"), ("1536Ki", "1536Ki", "1536Ki"),
    ("+5", "+5", "+5"), ("1000E", "1", "1"), ("9Ei", "9223372036854775807",
                                            "9223372036854775807"),
])
def test_known_examples(sent, want, want_milli):
    assert (stored(sent), stored(sent, milli=True)) == (want, want_milli)


def test_json_numbers_and_null_are_quantities_too():
    assert (stored(3000), stored(1), stored(None)) == ("3k", "1", "0")
    with pytest.raises(QuantityError, match="must match the regular expression"):
        stored(True)


@given(st.text(alphabet="0123456789.+-eEinumkKMGTP", max_size=10), st.booleans())
def test_what_is_stored_stores_as_itself(text, milli):
    try:
        once = stored(text, milli=milli)
    except QuantityError:
        return
    assert stored(once, milli=milli) == once


async def test_pod_resources_come_back_canonical_and_rounded_to_a_milli(raw):
    limits = {"cpu": "1.0001", "memory": "16384Mi", "nvidia.com/gpumem": "3000",
              "nvidia.com/gpu": 1, "example.com/units": "1e3"}
    body = pod_body("q", containers=[{"name": "c", "image": "registry.invalid/pause:1",
                                      "resources": {"limits": limits,
                                                    "requests": {"cpu": "0.5"}}}])
    made = await raw.create(body)
    resources = made["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {k: stored(v, milli=True) for k, v in limits.items()}
    assert resources["limits"] == {"cpu": "1001m", "memory": "16Gi", "nvidia.com/gpumem": "3k",
                                   "nvidia.com/gpu": "1", "example.com/units": "1e3"}
    assert resources["requests"] == {**resources["limits"], "cpu": "500m"}, \
        "requests default to limits"
    assert list(resources["limits"]) == sorted(resources["limits"]), "keys sorted, as Go"


async def test_extended_resources_compare_by_value_not_by_text(raw):
    body = pod_body("v", containers=[{"name": "c", "image": "registry.invalid/pause:1",
                                      "resources": {"limits": {"example.com/units": "1e3"},
                                                    "requests": {"example.com/units": "1k"}}}])
    made = await raw.create(body)
    assert made["spec"]["containers"][0]["resources"]["requests"] == {"example.com/units": "1k"}


async def test_a_fractional_extended_resource_is_refused_in_stored_text(raw):
    body = pod_body("f", containers=[{"name": "c", "image": "registry.invalid/pause:1",
                                      "resources": {"limits": {"example.com/units": "1.5"}}}])
    code, reply = await raw.call("POST", PODS, body)
    assert code == 422
    assert reply["details"]["causes"][0] == {
        "reason": "FieldValueInvalid", "field": "spec.containers[0].resources.limits"
        "[example.com/units]", "message": 'Invalid value: "1500m": must be an integer'}


@pytest.mark.parametrize(("value", "why"), [("abc", FORMAT_WRONG), ("1e", SUFFIX),
                                            ("1Qi", FORMAT_WRONG), (True, FORMAT_WRONG)])
async def test_a_value_that_is_no_quantity_is_a_400_from_the_decoder(raw, value, why):
    body = pod_body("bad", containers=[{"name": "c", "image": "registry.invalid/pause:1",
                                        "resources": {"limits": {"cpu": value}}}])
    code, reply = await raw.call("POST", PODS, body)
    assert (code, reply["message"]) == (
        400, f'Pod in version "v1" cannot be handled as a Pod: {why}')


async def test_node_capacity_is_stored_canonically_and_allocatable_defaults_to_it(raw):
    body = node_body("n", allocatable={"memory": "32768Mi", "nvidia.com/gpumem": "16000"})
    del body["status"]["allocatable"]
    made = await raw.create(body)
    assert made["status"]["capacity"] == {"cpu": "8", "memory": "32Gi",
                                          "nvidia.com/gpumem": "16k", "pods": "110"}
    assert made["status"]["allocatable"] == made["status"]["capacity"]


async def test_resource_slice_and_claim_quantities_are_stored_canonically(raw):
    slice_ = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
              "metadata": {"name": "quantities-node-gpu.example.com"},
              "spec": {"driver": "gpu.example.com", "nodeName": "quantities-node",
                       "pool": {"name": "quantities-node", "generation": 1,
                                "resourceSliceCount": 1},
                       "devices": [{"name": "gpu-0", "allowMultipleAllocations": True,
                                    "capacity": {
                                        "memory": {"value": "16384Mi", "requestPolicy": {
                                            "default": "1024Mi", "validRange": {
                                                "min": "1024Mi", "step": "1024Mi"}}},
                                        "cores": {"value": 100}}}]}}
    path = "/apis/resource.k8s.io/v1/resourceslices"
    await raw.call("DELETE", f"{path}/{slice_['metadata']['name']}")  # a real server keeps it
    code, made = await raw.call("POST", path, slice_)
    assert code == 201, made
    assert made["spec"]["devices"][0]["capacity"] == {
        "cores": {"value": "100"},
        "memory": {"value": "16Gi", "requestPolicy": {"default": "1Gi", "validRange": {
            "min": "1Gi", "step": "1Gi"}}}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "quantities"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.example.com",
                 "capacity": {"requests": {"memory": "3072Mi", "cores": "0.0005"}}}}]}}}
    code, made = await raw.call("POST", "/apis/resource.k8s.io/v1/namespaces/default/"
                                "resourceclaims", claim)
    assert code == 201, made
    assert made["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == {
        "cores": "500u", "memory": "3Gi"}, "not rounded to a milli: DRA quantities are not " \
        "a core/v1 ResourceList"

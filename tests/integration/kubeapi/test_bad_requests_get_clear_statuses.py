"""Garbage in gets a Status out: a 4xx that says what is wrong, never a crash or a 500
(either backend, except the property test, which hammers the in-process server)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubeapi.raw import pod_body

PODS = "/api/v1/namespaces/default/pods"


@pytest.mark.parametrize(("method", "path", "body", "content_type", "code"), [
    ("POST", PODS, "{not json", "application/json", 400),
    ("POST", PODS, "[1, 2]", "application/json", 400),
    ("POST", PODS, json.dumps({"apiVersion": "v1", "kind": "Node",
                               "metadata": {"name": "x"}}), "application/json", 400),
    ("GET", "/api/v1/namespaces/default/gizmos", None, "application/json", 404),
    ("PATCH", f"{PODS}/p", "{}", "text/plain", 415),
    ("PATCH", f"{PODS}/p", '{"op": "add"}', "application/json-patch+json", 400),
    ("PATCH", f"{PODS}/p", '[{"op": "add"}]', "application/json-patch+json", 422),
    ("DELETE", f"{PODS}/p?gracePeriodSeconds=soon", None, "application/json", 400),
    ("GET", f"{PODS}?limit=many", None, "application/json", 400),
    ("GET", f"{PODS}?resourceVersion=abc&resourceVersionMatch=Exact", None,
     "application/json", 400),
    ("POST", "/api/v1/namespaces", "k8s\x00\x0a\xff\xff", "application/vnd.kubernetes.protobuf",
     400),
], ids=["not-json", "not-an-object", "wrong-kind", "unknown-resource", "unknown-patch-type",
        "json-patch-not-a-list", "json-patch-op-without-path",
        "bad-grace-period", "bad-limit", "bad-resource-version", "broken-protobuf"])
async def test_a_malformed_request_is_a_status_naming_the_problem(
        kube_api, raw, method, path, body, content_type, code):
    await raw.create(pod_body("p"))
    async with kube_api.http() as http:
        reply = await http.request(method, path, content=body,
                                   headers={"Content-Type": content_type})
    assert reply.status_code == code, reply.text
    status = reply.json()
    assert status["kind"] == "Status" and status["status"] == "Failure" and status["message"]


@pytest.mark.parametrize("path", ["/apis/nope.example.com/v1", "/apis/nope.example.com",
                                  "/apis/nope.example.com/v1/gizmos", "/nope"])
async def test_a_path_no_api_serves_is_a_plain_404_page(kube_api, path):
    """No Status here: an unknown group (or path) never reaches an API handler, and Go's
    http.NotFound answers. A known group with an unknown version or resource is a Status."""
    async with kube_api.http() as http:
        reply = await http.get(path)
        known = await http.get("/apis/coordination.k8s.io/v2")
    assert (reply.status_code, reply.text) == (404, "404 page not found\n")
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"
    assert known.status_code == 404 and known.json()["reason"] == "NotFound"


async def test_a_protobuf_body_of_a_kind_it_cannot_read_is_415(kube_api):
    if kube_api.is_real:
        pytest.skip("a real kube-apiserver reads every kind as protobuf")
    pod = b"k8s\x00\x0a\x09\x0a\x02v1\x12\x03Pod"  # runtime.Unknown{typeMeta: v1 Pod}
    async with kube_api.http() as http:
        reply = await http.post(PODS, content=pod,
                                 headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
    assert reply.status_code == 415
    assert "only Namespace, ConfigMap and Secret" in reply.json()["message"]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
METADATA = st.fixed_dictionaries({"name": st.sampled_from(["p", "q", "Bad_Name", ""])},
                                 optional={"labels": JSON, "annotations": JSON,
                                           "finalizers": JSON, "resourceVersion": JSON})
BODIES = st.fixed_dictionaries({"metadata": METADATA}, optional={
    "apiVersion": st.sampled_from(["v1", "v2", 7]), "kind": st.sampled_from(["Pod", 3]),
    "spec": JSON | st.fixed_dictionaries({"containers": JSON}), "status": JSON})


PATCH_TYPES = st.sampled_from(["application/merge-patch+json",
                                "application/strategic-merge-patch+json",
                                "application/json-patch+json"])
OPS = st.lists(st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", 5]),
     "path": st.sampled_from(["", "/metadata/labels", "/metadata/labels/a", "/spec", "/x/y",
                              "/spec/containers/0", "/spec/containers/-", "nope", 3])},
    optional={"value": JSON, "from": st.sampled_from(["/metadata", "/q", 1])}), max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(body=BODIES, patch=JSON | OPS, patch_type=PATCH_TYPES, binding=JSON,
       proto=st.binary(max_size=48))
def test_random_bodies_patches_and_bindings_never_break_the_server(kube_api, body, patch,
                                                                   patch_type, binding, proto):
    if kube_api.server is None:
        pytest.skip("hammers the in-process server only")
    from lightkube.config.client_adapter import Client, ConnectionParams

    with Client(kube_api.config().get(), ConnectionParams()) as http:
        http.post(PODS, json=pod_body("p"))  # the target of the patches (409 once it exists)
        created = http.post(PODS, content=json.dumps(body).encode(),
                            headers={"Content-Type": "application/json"})
        patched = http.patch(f"{PODS}/p", content=json.dumps(patch).encode(),
                             headers={"Content-Type": patch_type})
        bound = http.post(f"{PODS}/p/binding", content=json.dumps(binding).encode(),
                          headers={"Content-Type": "application/json"})
        protobuf = http.post("/api/v1/namespaces", content=b"k8s\x00" + proto,
                             headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
        listed = http.get(PODS)
    for reply in (created, patched, bound, protobuf):
        assert reply.status_code < 500, reply.text
        assert reply.status_code in (200, 201) or reply.json()["kind"] == "Status"
    assert listed.status_code == 200

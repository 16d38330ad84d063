"""The AdmissionReview a real kube-apiserver v1.36 sent (samples/, copied from the project's
shared wire-samples) decodes, and our replies have the shape of the reply it accepted."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_pods import apply_patch

from gpuslice.webhook import review
from gpuslice.webhook.admit import Options, admit

SAMPLES = Path(__file__).parent / "samples"
REQUEST = (SAMPLES / "admissionreview-pod-create.request.json").read_bytes()
ACCEPTED = json.loads((SAMPLES / "admissionreview-pod-create.response.json").read_text())


def answer(body: bytes) -> dict:
    req = review.decode(body)
    d = admit(req.operation, req.object, {}, Options(), kind=req.kind.kind,
              sub_resource=req.sub_resource)
    return json.loads(review.encode(req.uid, allowed=d.allowed, patch=list(d.patch),
                                    message=d.message, warnings=list(d.warnings)))


def _shape(reply: dict) -> tuple:
    return (reply["apiVersion"], reply["kind"], sorted(reply["response"]))


def test_the_real_request_decodes_with_every_field_we_read():
    req = review.decode(REQUEST)
    assert (req.uid, req.operation, req.namespace, req.name, req.dry_run) == (
        "8d5ff7e4-6b52-492f-95a0-44c971507812", "CREATE", "default", "wh-1", False)
    assert req.kind == review.GroupVersionKind("", "v1", "Pod") and req.sub_resource == ""
    assert req.object["spec"]["containers"][0]["name"] == "c"


def test_the_sample_pod_asks_for_no_slice_and_passes_with_the_uid_echoed():
    reply = answer(REQUEST)
    assert reply == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "response": {"uid": ACCEPTED["response"]["uid"], "allowed": True}}


def test_the_sample_as_a_gpu_pod_gets_a_reply_shaped_like_the_accepted_one():
    body = REQUEST.replace(b"example.com/gpu-slice", b"nvidia.com/gpumem")
    reply = answer(body)
    assert _shape(reply) == _shape(ACCEPTED), "same keys as the reply kube-apiserver accepted"
    assert reply["response"]["uid"] == ACCEPTED["response"]["uid"]
    assert reply["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(reply["response"]["patch"]))
    pod = apply_patch(json.loads(body)["request"]["object"], ops)
    assert pod["metadata"]["labels"] == {"gpuslice.io/managed": "true"}
    assert pod["spec"]["schedulerName"] == "gpuslice-scheduler"
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpumem": "1", "nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpumem": "1", "nvidia.com/gpu": "1"}}


def test_a_denial_carries_every_line_in_status_message():
    body = REQUEST.replace(b'"example.com/gpu-slice": "1"', b'"nvidia.com/gpucores": "150"')
    response = answer(body)["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["message"].startswith('container "c": nvidia.com/gpucores=150')


def test_a_dry_run_gets_the_same_answer_as_a_real_create():
    gpu = REQUEST.replace(b"example.com/gpu-slice", b"nvidia.com/gpu")
    dry = gpu.replace(b'"dryRun": false', b'"dryRun": true')
    assert review.decode(dry).dry_run is True
    assert answer(dry) == answer(gpu), "no side effects: dryRun changes nothing"


@pytest.mark.parametrize(("body", "expected"), [
    (b"not json", "body is not an AdmissionReview"),
    (b"[]", "body is not an AdmissionReview"),
    (REQUEST.replace(b"admission.k8s.io/v1", b"admission.k8s.io/v1beta1"),
     "admissionReviewVersions: [v1]"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "has no request"),
    (REQUEST.replace(b'"uid": "8d5', b'"xid": "8d5'), "missing required field `uid`"),
    (REQUEST.replace(b'"dryRun": false', b'"dryRun": "yes"'), "Expected `bool`"),
])
def test_a_malformed_body_is_a_review_error_that_says_what_is_wrong(body, expected):
    with pytest.raises(review.ReviewError) as caught:
        review.decode(body)
    assert expected in str(caught.value)


def test_a_garbage_pod_inside_a_good_envelope_is_answered_with_a_denial():
    body = msgspec.json.encode({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                "request": {"uid": "u", "operation": "CREATE",
                                            "kind": {"kind": "Pod"}, "object": [1, 2]}})
    response = answer(body)["response"]
    assert response["uid"] == "u" and response["allowed"] is False


def test_warnings_and_status_are_encoded_as_the_api_expects():
    reply = json.loads(review.encode("u", allowed=True, warnings=["w"]))
    assert reply["response"] == {"uid": "u", "allowed": True, "warnings": ["w"]}
    reply = json.loads(review.encode("u", allowed=False, code=422, reason="Invalid",
                                     message="a\nb"))
    assert reply["response"]["status"] == {"code": 422, "reason": "Invalid", "message": "a\nb"}


_ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["uid", "operation", "kind", "object",
                                                       "dryRun", "request", "apiVersion"]),
                                      inner, max_size=4), max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64) | _ANY.map(lambda v: msgspec.json.encode(
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": v})))
def test_any_body_decodes_or_is_a_review_error(body):
    try:
        got = review.decode(body)
    except review.ReviewError as exc:
        assert str(exc), "a ReviewError always says what is wrong"
    else:
        assert isinstance(got, review.Request) and isinstance(got.uid, str)


def test_the_requesting_user_is_read_so_only_a_node_may_create_a_mirror_pod():
    req = review.decode(REQUEST)
    assert req.user_info.username == "admin"
    sample = json.loads(REQUEST)
    obj = sample["request"]["object"]
    obj["metadata"].setdefault("annotations", {})["kubernetes.io/config.mirror"] = "x"
    obj["metadata"]["annotations"]["gpuslice.io/assignment"] = "forged"
    assert not answer(json.dumps(sample).encode())["response"]["allowed"]
    sample["request"]["userInfo"] = {"username": "system:node:n1"}
    req = review.decode(json.dumps(sample).encode())
    assert admit(req.operation, req.object, {}, Options(),
                 user=req.user_info.username).allowed

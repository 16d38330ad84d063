"""AdmissionReview v1 on the wire: decode what kube-apiserver sends, encode what it accepts.

Owns: the admission.k8s.io/v1 envelope (WIRE.md "Admission webhook"; golden sample in
shared/wire-samples/admissionreview-pod-create.*), lower-case keys as the Go json tags say.
Does not: decide anything (admit.py) or speak HTTP (app.py).
Invariants: the reply echoes apiVersion, kind and the request's uid; a patch travels as base64
of a JSON Patch array with patchType JSONPatch; an allowed reply without changes has no patch.
Failure: ReviewError (a sentence saying what is wrong with the body and how to fix it) for
anything that is not an admission.k8s.io/v1 AdmissionReview with a request; the pod object
itself is not checked here (admit.py answers garbage pods with a denial).
Tests: tests/unit/webhook/test_review.py
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from gpuslice.errors import GpusliceError

__all__ = ["API_VERSION", "KIND", "Request", "ReviewError", "UserInfo", "decode", "encode"]

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class ReviewError(GpusliceError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""


class GroupVersionKind(msgspec.Struct, frozen=True):
    group: str = ""
    version: str = ""
    kind: str = ""


class UserInfo(msgspec.Struct, frozen=True):
    """Who sent the request (authentication.k8s.io/v1 UserInfo; only what admit reads)."""

    username: str = ""


class Request(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The fields of AdmissionRequest this webhook reads (others are ignored)."""

    uid: str
    operation: str
    kind: GroupVersionKind = GroupVersionKind()
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    object: Any = None  # the pod as sent; admit.py checks its shape
    dry_run: bool = False
    user_info: UserInfo = UserInfo()


class _Review(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    api_version: str = ""
    kind: str = ""
    request: Request | None = None


class _Status(msgspec.Struct, frozen=True, omit_defaults=True):
    code: int = 0
    reason: str = ""
    message: str = ""


class _Response(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                rename="camel"):
    uid: str
    allowed: bool
    status: _Status | None = None
    patch_type: str | None = None
    patch: str | None = None
    warnings: list[str] | None = None


class _Reply(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    api_version: str
    kind: str
    response: _Response


_decoder = msgspec.json.Decoder(_Review)
_encoder = msgspec.json.Encoder()


def decode(body: bytes) -> Request:
    """The request inside an AdmissionReview body; ReviewError says what is wrong."""
    try:
        review = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ReviewError(f"body is not an AdmissionReview: {exc}; send the JSON "
                          f"{API_VERSION} AdmissionReview that kube-apiserver sends") from None
    if review.api_version != API_VERSION or review.kind != KIND:
        raise ReviewError(f"apiVersion={review.api_version!r} kind={review.kind!r}: only "
                          f"{API_VERSION} {KIND} is supported; set admissionReviewVersions: "
                          "[v1] in the MutatingWebhookConfiguration")
    if review.request is None:
        raise ReviewError("AdmissionReview has no request; send the review kube-apiserver sends")
    return review.request


def encode(uid: str, *, allowed: bool, patch: list[dict[str, Any]] | None = None,
           code: int = 0, reason: str = "", message: str = "",
           warnings: list[str] | None = None) -> bytes:
    """The AdmissionReview reply for request `uid` (patch: JSON Patch operations)."""
    status = _Status(code=code, reason=reason, message=message) if code or message else None
    response = _Response(
        uid=uid, allowed=allowed, status=status,
        patch_type="JSONPatch" if patch else None,
        patch=base64.b64encode(_encoder.encode(patch)).decode() if patch else None,
        warnings=warnings or None)
    return _encoder.encode(_Reply(api_version=API_VERSION, kind=KIND, response=response))

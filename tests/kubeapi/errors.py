"""API errors as the real kube-apiserver words them: one exception carrying a v1 Status.
Owns: the Status bodies (kind Status, apiVersion v1, status Failure, reason, code, message,
details) for NotFound, AlreadyExists, Conflict, Invalid, BadRequest, Expired/Gone, and friends.
Does not: decide when an error happens (store.py, server.py do).
Messages copy k8s.io/apimachinery/pkg/api/errors word for word, so clients that match on them
(kubectl, lightkube, kopf) behave as against a real server.
Tests: tests/integration/kubeapi/test_resource_versions_and_conflicts.py (exact bodies)"""

from __future__ import annotations

from typing import Any

from .resources import ResourceType


class ApiProblem(Exception):
    """An error reply: `status` is the whole v1 Status body, `code` its HTTP status."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        if not reason:  # omitempty, as Go marshals it
            del self.status["reason"]
        if details is not None:
            self.status["details"] = details


def _details(rt: ResourceType, name: str, kind: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = kind or rt.plural
    return details


def not_found(rt: ResourceType, name: str) -> ApiProblem:
    return ApiProblem(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiProblem:
    return ApiProblem(
        409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str, why: str, subresource: str = "") -> ApiProblem:
    what = rt.qualified + (f"/{subresource}" if subresource else "")
    details = _details(rt, name, kind=rt.plural + (f"/{subresource}" if subresource else ""))
    return ApiProblem(
        409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}', details
    )


def conflict_kind(rt: ResourceType, name: str, why: str) -> ApiProblem:
    """409 from a DELETE's preconditions, which name the kind (`ConfigMap`, `Lease.coordination
    .k8s.io`), not the resource."""
    what = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiProblem(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": '
                      f"{why}", _details(rt, name, kind=rt.kind))


def storage_precondition(rt: ResourceType, ns: str | None, name: str, what: str, wanted: str,
                         actual: str) -> str:
    """The storage layer's words for a failed UID or ResourceVersion precondition (an update
    or a binding that carries another one)."""
    key = f"/registry/{rt.plural if not rt.group else rt.group + '/' + rt.plural}/" \
          f"{ns + '/' if ns else ''}{name}"
    return (f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, "
            f"AdditionalErrorMsg: Precondition failed: {what} in precondition: {wanted}, "
            f"{what} in object meta: {actual}")


STALE = ("the object has been modified; please apply your changes to the latest version and "
         "try again")


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiProblem:
    """422 Invalid; `causes` are (field, reason, message) like field.Error (every one at once)."""
    lines = list(dict.fromkeys(f"{field}: {message}" for field, _, message in causes))
    text = ", ".join(lines)  # ErrorList.ToAggregate: each message once
    details = _details(rt, name, kind=rt.kind)
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for field, reason, message in causes
    ]
    if len(lines) > 1:
        text = f"[{text}]"
    return ApiProblem(422, "Invalid", f'{rt.kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiProblem:
    return ApiProblem(400, "BadRequest", message)


def expired(message: str) -> ApiProblem:
    """410 Gone, the reply to a resourceVersion older than the server's history."""
    return ApiProblem(410, "Expired", message)


def path_not_found() -> ApiProblem:
    return ApiProblem(404, "NotFound", "the server could not find the requested resource", {})


def method_not_allowed(method: str, what: str) -> ApiProblem:
    return ApiProblem(
        405, "MethodNotAllowed", f"the server does not allow this method on the requested "
        f"resource ({method} {what})", {}
    )


def unsupported_media_type(content_type: str) -> ApiProblem:
    return ApiProblem(
        415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
        "accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/strategic-merge-patch+json, "
        f'application/apply-patch+yaml (got "{content_type}")')


def internal(message: str) -> ApiProblem:
    return ApiProblem(500, "InternalError", f"Internal error occurred: {message}",
                      {"causes": [{"message": message}]})


def timeout(message: str) -> ApiProblem:
    return ApiProblem(504, "Timeout", message, {})

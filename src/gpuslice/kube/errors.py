"""Kubernetes API failures as a small typed tree, so callers catch what they can act on.

APIError (GpusliceError)      any failed call; .code (HTTP status, 0 = no answer), .reason
 ├── Conflict                 409: stale resourceVersion or AlreadyExists; re-read and retry
 ├── NotFound                 404: the object (or its namespace) is gone
 ├── Gone                     410: a watch or list resourceVersion is too old; relist
 ├── Forbidden                401/403: RBAC or credentials; exit code 3 (fix the deployment)
 ├── Invalid                  400/422: the request itself is wrong; retrying cannot help
 └── Unavailable              no answer, timeout, 5xx, 429, undecodable reply; retry later
                              (.retry_after holds the server's Retry-After seconds, if any)
Why our own tree (as kopf): lightkube raises ApiError for JSON replies but bare httpx2 errors
for transport failures and non-JSON replies (a proxy's 502 page); callers should not care.
Messages keep the Status message only, cut to 256 characters, so no object or token reaches
a log. The original exception is chained (`raise ... from`).
Tests: tests/unit/kube/test_errors.py
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx2
import msgspec
from lightkube import ApiError

from gpuslice.errors import GpusliceError

__all__ = ["APIError", "Conflict", "Forbidden", "Gone", "Invalid", "NotFound", "Unavailable",
           "from_exception", "from_reply", "from_status", "translate"]

MAX_TEXT = 256


class APIError(GpusliceError):
    """A Kubernetes API call failed. `code` is the HTTP status (0 when no answer came)."""

    def __init__(self, message: str, *, code: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class Conflict(APIError):
    """409: someone else changed the object first (or it already exists)."""


class NotFound(APIError):
    """404: the object does not exist (any more)."""


class Gone(APIError):
    """410: the resourceVersion asked for is older than the server's history; list again."""


class Forbidden(APIError):
    """401/403: the service account may not do this; grant the RBAC verb or fix credentials."""

    exit_code = 3


class Invalid(APIError):
    """400/422: the server rejected the request as malformed; retrying will not help."""


class Unavailable(APIError):
    """The server did not answer usefully (down, slow, overloaded, 5xx, 429); retry later."""

    exit_code = 3

    def __init__(self, message: str, *, code: int = 0, reason: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(message, code=code, reason=reason)
        self.retry_after = retry_after


_BY_CODE: dict[int, type[APIError]] = {
    400: Invalid, 401: Forbidden, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
    422: Invalid, 429: Unavailable,
}


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _class_for(code: int) -> type[APIError]:
    return _BY_CODE.get(code) or (Unavailable if code >= 500 else APIError)


def _make(cls: type[APIError], what: str, detail: str, code: int, reason: str,
          retry_after: float | None = None) -> APIError:
    status = f" (HTTP {code}{' ' + reason if reason else ''})" if code else ""
    message = f"{what}: {_cut(detail)}{status}" if what else f"{_cut(detail)}{status}"
    if cls is Unavailable:
        return Unavailable(message, code=code, reason=reason, retry_after=retry_after)
    return cls(message, code=code, reason=reason)


def from_status(status: Mapping[str, Any], what: str = "",
                retry_after: float | None = None) -> APIError:
    """The error a v1 Status body stands for (a watch ERROR event carries one)."""
    code = status.get("code") if isinstance(status.get("code"), int) else 0
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or reason or "the API server reported an error")
    return _make(_class_for(code), what, message, code, reason, retry_after)


def _seconds(retry_after: str | None) -> float | None:
    """A Retry-After header's seconds (None: absent or not a number)."""
    try:
        return max(0.0, float(retry_after or ""))
    except ValueError:
        return None


def _retry_after(response: httpx2.Response) -> float | None:
    return _seconds(response.headers.get("Retry-After"))


def from_reply(code: int, body: bytes, retry_after: str | None, what: str = "") -> APIError:
    """The error a non-2xx reply stands for: its v1 Status when it is one, else its text (a
    proxy's page); `retry_after` is its Retry-After header (kube/post.py's replies)."""
    try:
        status = msgspec.json.decode(body)
    except msgspec.DecodeError:
        status = None
    if not (isinstance(status, dict) and status.get("kind") == "Status"):
        status = {"message": body.decode("utf-8", "replace").strip() or f"HTTP {code}"}
    return from_status({**status, "code": code}, what, _seconds(retry_after))


def from_exception(exc: BaseException, what: str = "") -> APIError | None:
    """The typed error for a lightkube/httpx2/msgspec failure, or None if `exc` is none of those.
    `what` names the attempted call ("patch pod default/web-0") and leads the message."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ApiError):
        status, response = exc.status, exc.response  # response is None for a watch ERROR
        code = status.code or (response.status_code if response is not None else 0)
        reason = status.reason or ""
        return _make(_class_for(code), what, status.message or reason or "API error", code,
                     reason, _retry_after(response) if response is not None else None)
    if isinstance(exc, httpx2.HTTPStatusError):  # a reply that is not a Status (proxy, LB)
        response = exc.response
        try:
            text = response.text
        except httpx2.StreamError:  # a streamed watch reply that was not read
            text = ""
        code = response.status_code
        return _make(_class_for(code), what, text or response.reason_phrase, code,
                     response.reason_phrase, _retry_after(response))
    if isinstance(exc, httpx2.TimeoutException):
        return _make(Unavailable, what, f"no answer in time ({type(exc).__name__})", 0, "")
    if isinstance(exc, httpx2.TransportError):
        return _make(Unavailable, what, f"cannot reach the API server: {exc or type(exc).__name__}",
                     0, "")
    if isinstance(exc, msgspec.DecodeError | msgspec.ValidationError):
        return _make(Unavailable, what, f"undecodable reply from the API server: {exc}", 0, "")
    return None


@contextmanager
def translate(what: str = "") -> Iterator[None]:
    """Run a block of API calls; lightkube/httpx2 failures leave it as the typed errors above.

        with errors.translate(f"patch pod {key}"):
            await client.patch(Pod, name, body, namespace=ns, patch_type=PatchType.MERGE)
    """
    try:
        yield
    except Exception as exc:
        typed = from_exception(exc, what)
        if typed is None and isinstance(exc, KeyError) and isinstance(
                exc.__context__, httpx2.HTTPStatusError):
            # lightkube 1.0 raises KeyError('Content-Type') for an error reply without that
            # header (a bare 503 from a proxy): use the reply it was handling
            exc = exc.__context__
            typed = from_exception(exc, what)
        if typed is None or typed is exc:
            raise
        raise typed from exc

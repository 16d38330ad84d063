"""kube/errors.py: every way lightkube and httpx2 fail becomes one typed, short, safe error."""

from __future__ import annotations

import httpx2
import msgspec
import pytest
from kube_helpers import mock_client
from lightkube import ApiError
from lightkube.resources.core_v1 import Pod

from gpuslice.errors import GpusliceError
from gpuslice.kube import errors

REQUEST = httpx2.Request("PATCH", "https://api.test/api/v1/namespaces/default/pods/web-0")


def api_error(code: int, reason: str, message: str, headers: dict | None = None) -> ApiError:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    response = httpx2.Response(code, json=body, request=REQUEST, headers=headers)
    return ApiError(request=REQUEST, response=response)


def raised(exc: BaseException, what: str = "patch pod default/web-0") -> errors.APIError:
    with pytest.raises(errors.APIError) as info, errors.translate(what):
        raise exc
    assert info.value.__cause__ is exc, "the client's error stays chained for debugging"
    return info.value


@pytest.mark.parametrize(("code", "reason", "cls"), [
    (409, "Conflict", errors.Conflict),
    (409, "AlreadyExists", errors.Conflict),
    (404, "NotFound", errors.NotFound),
    (410, "Expired", errors.Gone),
    (403, "Forbidden", errors.Forbidden),
    (401, "Unauthorized", errors.Forbidden),
    (422, "Invalid", errors.Invalid),
    (400, "BadRequest", errors.Invalid),
    (429, "TooManyRequests", errors.Unavailable),
    (500, "InternalError", errors.Unavailable),
    (503, "ServiceUnavailable", errors.Unavailable),
    (418, "Teapot", errors.APIError),
], ids=lambda v: str(v) if not isinstance(v, type) else v.__name__)
def test_each_status_code_maps_to_its_class(code, reason, cls):
    error = raised(api_error(code, reason, f"the {reason} message"))
    assert type(error) is cls
    assert (error.code, error.reason) == (code, reason)
    assert str(error) == f"patch pod default/web-0: the {reason} message (HTTP {code} {reason})"
    assert isinstance(error, GpusliceError), "the CLI prints it as one error line"


def test_a_long_status_message_is_cut_to_256_characters_so_objects_stay_out_of_logs():
    error = raised(api_error(422, "Invalid", "x" * 5000), what="")
    assert len(str(error)) == 256 + len(" (HTTP 422 Invalid)")
    assert str(error).endswith("... (HTTP 422 Invalid)")


def test_retry_after_of_a_429_is_kept_for_the_caller_to_honour():
    error = raised(api_error(429, "TooManyRequests", "slow down", {"Retry-After": "3"}))
    assert isinstance(error, errors.Unavailable) and error.retry_after == 3.0


def test_a_non_json_reply_from_a_proxy_is_classified_by_its_status_code():
    response = httpx2.Response(502, text="<html>Bad Gateway</html>", request=REQUEST)
    error = raised(httpx2.HTTPStatusError("bad gateway", request=REQUEST, response=response))
    assert isinstance(error, errors.Unavailable) and error.code == 502
    assert "<html>Bad Gateway</html>" in str(error)


@pytest.mark.parametrize("exc", [
    httpx2.ConnectError("connection refused", request=REQUEST),
    httpx2.ReadError("connection reset by peer", request=REQUEST),
    httpx2.RemoteProtocolError("peer closed connection", request=REQUEST),
    httpx2.ReadTimeout("timed out", request=REQUEST),
    httpx2.ConnectTimeout("timed out", request=REQUEST),
], ids=lambda e: type(e).__name__)
def test_transport_failures_and_timeouts_are_unavailable_with_code_0(exc):
    error = raised(exc)
    assert isinstance(error, errors.Unavailable) and error.code == 0
    assert str(error).startswith("patch pod default/web-0: ")


def test_a_garbled_reply_is_unavailable_not_a_crash():
    with pytest.raises(msgspec.DecodeError) as info:
        msgspec.json.decode(b"<html>")
    assert isinstance(raised(info.value), errors.Unavailable)


def test_a_watch_error_event_status_becomes_gone():
    status = {"kind": "Status", "code": 410, "reason": "Expired",
              "message": "too old resource version: 5 (120)"}
    error = errors.from_status(status, "watch pods")
    assert isinstance(error, errors.Gone)
    assert str(error) == "watch pods: too old resource version: 5 (120) (HTTP 410 Expired)"


def test_a_status_without_code_or_message_still_gives_a_readable_error():
    error = errors.from_status({})
    assert type(error) is errors.APIError and error.code == 0
    assert str(error) == "the API server reported an error"


def test_other_exceptions_pass_through_untouched():
    with pytest.raises(KeyError), errors.translate("anything"):
        raise KeyError("not an API failure")


def test_an_already_typed_error_is_not_wrapped_twice():
    inner = errors.NotFound("gone", code=404)
    with pytest.raises(errors.NotFound) as info, errors.translate("outer"):
        raise inner
    assert info.value is inner


async def test_an_error_reply_without_content_type_is_unavailable_not_a_key_error():
    async with mock_client(lambda r: httpx2.Response(503, content=b"")) as client:
        with pytest.raises(errors.Unavailable, match=r"get pod: .*HTTP 503"), \
                errors.translate("get pod"):
            await client.get(Pod, "web-0", namespace="ml")

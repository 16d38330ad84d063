"""kube/post.py: the Binding POST carries the client's credentials (a token file re-read after a
401, as lightkube does), its field manager and the body as given; every failure reaches the
caller as the typed error lightkube's path would have raised (errors.translate)."""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from lightkube import AsyncClient, KubeConfig
from lightkube.config.client_adapter import BearerTokenFileAuth
from lightkube.config.models import Cluster, User

from gpuslice.kube import errors
from gpuslice.kube.post import Poster

PATH = "/api/v1/namespaces/default/pods/web-0/binding"
BODY = b'{"apiVersion":"v1","kind":"Binding"}'
Reply = Callable[[web.Request], Any]  # a response, or an awaitable of one


def status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "message": message, "reason": reason, "code": code}, status=code)


@pytest.fixture
async def api() -> AsyncIterator[tuple[str, list[dict[str, Any]], list[Reply]]]:
    """A server that records each request and answers with the next reply queued (201 when none
    is)."""
    seen: list[dict[str, Any]] = []
    replies: list[Reply] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append({"path": request.path_qs, "headers": dict(request.headers),
                     "body": await request.read()})
        if replies:
            reply = replies.pop(0)(request)
            return await reply if inspect.isawaitable(reply) else reply
        return web.json_response({"kind": "Status", "status": "Success", "code": 201},
                                 status=201)

    app = web.Application()
    app.router.add_post(PATH, handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", seen, replies
    await runner.cleanup()


def poster(url: str, token_file: Path, timeout_s: float = 5.0) -> Poster:
    return Poster(url, False, BearerTokenFileAuth(str(token_file)), timeout_s=timeout_s,
                  field_manager="gpuslice")


async def test_the_post_carries_the_token_the_field_manager_and_the_body(api: Any,
                                                                          tmp_path: Path) -> None:
    url, seen, _ = api
    (tmp_path / "token").write_text("t0ken\n")
    p = poster(url, tmp_path / "token")
    await p.post(PATH, BODY, "bind pod default/web-0")
    await p.close()
    assert seen[0]["path"] == f"{PATH}?fieldManager=gpuslice"
    assert seen[0]["headers"]["Authorization"] == "Bearer t0ken"
    assert seen[0]["headers"]["Content-Type"] == "application/json"
    assert seen[0]["body"] == BODY


async def test_a_401_rereads_a_rotated_token_and_sends_once_more(api: Any, tmp_path: Path) -> None:
    url, seen, replies = api
    token = tmp_path / "token"
    token.write_text("old")
    p = poster(url, token)
    await p.post(PATH, BODY, "bind")  # the flow has read "old"

    def rotated(request: web.Request) -> web.Response:
        token.write_text("new")  # the kubelet rotated it while this request was on its way
        return status(401, "Unauthorized", "Unauthorized")

    replies.append(rotated)
    await p.post(PATH, BODY, "bind")
    assert [s["headers"]["Authorization"] for s in seen] == ["Bearer old", "Bearer old",
                                                             "Bearer new"]
    replies.extend([lambda r: status(401, "Unauthorized", "Unauthorized")] * 2)
    with pytest.raises(errors.Forbidden, match="bind: Unauthorized"):
        await p.post(PATH, BODY, "bind")  # still refused with the fresh token: no third try
    assert len(seen) == 5
    await p.close()


@pytest.mark.parametrize(("reply", "kind", "text"), [
    (lambda r: status(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "web-0": '
                      "pod web-0 is already assigned to node \"n1\""), errors.Conflict,
     "already assigned"),
    (lambda r: status(422, "Invalid", 'Binding "web-0" is invalid'), errors.Invalid, "invalid"),
    (lambda r: status(404, "NotFound", 'pods "web-0" not found'), errors.NotFound, "not found"),
    (lambda r: web.Response(status=503, text="<html>upstream down</html>",
                            headers={"Retry-After": "2"}), errors.Unavailable, "upstream down"),
])
async def test_refusals_are_the_typed_errors_with_the_servers_words(
        api: Any, tmp_path: Path, reply: Reply, kind: type[errors.APIError], text: str) -> None:
    url, _, replies = api
    (tmp_path / "token").write_text("t")
    p = poster(url, tmp_path / "token")
    replies.append(reply)
    with pytest.raises(kind, match=text) as caught:
        await p.post(PATH, BODY, "bind pod default/web-0")
    await p.close()
    assert str(caught.value).startswith("bind pod default/web-0: ")
    if kind is errors.Unavailable:
        assert caught.value.retry_after == 2.0  # type: ignore[attr-defined]


async def test_no_answer_is_unavailable(api: Any, tmp_path: Path) -> None:
    url, _, replies = api
    (tmp_path / "token").write_text("t")

    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(status=201)

    replies.append(hang)
    p = poster(url, tmp_path / "token", timeout_s=0.2)
    with pytest.raises(errors.Unavailable, match="no answer in time"):
        await p.post(PATH, BODY, "bind")
    await p.close()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    p = poster(closed, tmp_path / "token")
    with pytest.raises(errors.Unavailable, match="cannot reach the API server"):
        await p.post(PATH, BODY, "bind")
    await p.close()


def test_from_client_speaks_as_the_client(tmp_path: Path) -> None:
    config = KubeConfig.from_one(cluster=Cluster(server="https://api.test:6443/"),
                                 user=User(token="t0ken"))
    p = Poster.from_client(AsyncClient(config), field_manager="gpuslice")
    assert p.server == "https://api.test:6443"
    assert p.field_manager == "gpuslice"
    assert p.auth is not None

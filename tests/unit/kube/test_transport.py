"""kube/transport.py: lightkube's requests go out through aiohttp unchanged (method, path,
headers, body, auth), replies come back whole or streamed, and aiohttp's failures reach
callers as the same typed errors httpx2's did."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
import yarl
from aiohttp import web
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.resources.core_v1 import Pod

from gpuslice.kube import errors
from gpuslice.kube.client import dict_view
from gpuslice.kube.transport import AiohttpTransport


def client_for(url: str, read_timeout: float = 5.0) -> AsyncClient:
    config = KubeConfig.from_one(cluster=Cluster(server=url), user=User(token="t0ken"),
                                 namespace="default")
    return AsyncClient(config, timeout=httpx2.Timeout(5.0, read=read_timeout),
                       transport=AiohttpTransport(False), field_manager="test")


@pytest.fixture
async def api() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A small server that records each request and answers like the API for a few paths."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append({"method": request.method, "path": request.path_qs,
                     "headers": dict(request.headers), "body": await request.read()})
        if request.path.endswith("/pods/slow"):
            await asyncio.sleep(1)
        if request.query.get("watch"):
            reply = web.StreamResponse(headers={"Content-Type": "application/json"})
            await reply.prepare(request)
            for i in range(3):
                event = {"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}}
                await reply.write(json.dumps(event).encode() + b"\n")
            return reply
        if request.method == "PATCH":
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "message": "the object has been modified",
                                      "reason": "Conflict", "code": 409}, status=409)
        return web.json_response({"apiVersion": "v1", "kind": "Pod",
                                  "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_route("*", "/api/v1/namespaces/{ns}/pods/{name}", handle)
    app.router.add_route("GET", "/api/v1/pods", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_a_get_goes_out_with_lightkubes_path_and_auth_and_decodes(api):
    url, seen = api
    client = client_for(url)
    pod = await client.get(dict_view(Pod), "web-0", namespace="default")
    await client.close()
    assert pod["metadata"]["name"] == "web-0"
    assert seen[0]["method"] == "GET" and seen[0]["path"] == "/api/v1/namespaces/default/pods/web-0"
    assert seen[0]["headers"]["Authorization"] == "Bearer t0ken", "httpx2's auth flow still runs"


async def test_a_status_reply_becomes_the_typed_error_with_its_message(api):
    url, seen = api
    client = client_for(url)
    with pytest.raises(errors.Conflict, match="the object has been modified"), \
            errors.translate("patch pod default/web-0"):
        await client.patch(dict_view(Pod), "web-0", {"metadata": {"labels": {"a": "b"}}},
                           namespace="default")
    await client.close()
    assert json.loads(seen[0]["body"]) == {"metadata": {"labels": {"a": "b"}}}, \
        "the body is sent as lightkube encoded it"


async def test_a_watch_streams_its_lines_as_they_come(api):
    url, _ = api
    transport = AiohttpTransport(False)
    async with httpx2.AsyncClient(transport=transport, base_url=url) as client, \
            client.stream("GET", "/api/v1/pods", params={"watch": "true"}) as reply:
        names = [json.loads(line)["object"]["metadata"]["name"]
                 async for line in reply.aiter_lines() if line]
    assert names == ["p0", "p1", "p2"]


async def test_no_answer_in_time_is_unavailable_not_a_hang(api):
    url, _ = api
    client = client_for(url, read_timeout=0.2)
    with pytest.raises(errors.Unavailable, match="no answer in time"), \
            errors.translate("get pod default/slow"):
        await client.get(dict_view(Pod), "slow", namespace="default")
    await client.close()


async def test_a_server_that_is_not_there_is_unavailable_saying_so(unused_tcp_port):
    client = client_for(f"http://127.0.0.1:{unused_tcp_port}")
    with pytest.raises(errors.Unavailable, match="cannot reach the API server"), \
            errors.translate("get pod default/p"):
        await client.get(dict_view(Pod), "p", namespace="default")
    await client.close()


@pytest.fixture
def api_url_in_thread() -> Iterator[str]:
    """A plain HTTP server on its own thread, answering every GET with a pod named p."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "p"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_one_transport_serves_event_loops_one_after_another(api_url_in_thread):
    """A client made before asyncio.run (as services do) or reused by later loops works."""
    client = client_for(api_url_in_thread)

    async def get() -> str:
        return str((await client.get(dict_view(Pod), "p", namespace="default"))["metadata"]
                   ["name"])

    assert asyncio.run(get()) == "p"
    assert asyncio.run(get()) == "p", "a second loop gets its own aiohttp session"


def test_the_environments_proxy_is_looked_up_once_per_origin(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    transport = AiohttpTransport(False)
    found = transport.proxy_for(yarl.URL("http://api.test:6443/api/v1/pods"))
    assert str(found[0]) == "http://proxy.test:3128"
    monkeypatch.setenv("HTTP_PROXY", "http://other.test:3128")
    assert transport.proxy_for(yarl.URL("http://api.test:6443/api/v1/nodes")) == found, \
        "cached per origin: no lookup (and no thread hop) per request"
    assert AiohttpTransport(False, trust_env=False).proxy_for(
        yarl.URL("http://api.test:6443/"))[0] is None

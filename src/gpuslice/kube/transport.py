"""The bytes under lightkube: an httpx2 transport that sends each request with aiohttp.

Why: httpx2's own pool is pure Python (h11, anyio TLS streams, a probe of every idle connection
per request): 1.3-2.2 ms of client CPU per GET against the test API server, 0.7-0.8 ms through
aiohttp (C parser, asyncio TLS, keep-alive pool). lightkube stays the client: request building,
auth flows (token files re-read on 401), errors and decoding are unchanged.
Owns: `AiohttpTransport` (one aiohttp session per event loop, made on first use; httpx
timeouts mapped: pool -> waiting for a connection, connect, read -> between reads, so a quiet
watch lives as long as under httpx2; bodies stream) and aiohttp's failures as httpx2's
(ConnectError, ReadError, ConnectTimeout, ReadTimeout), which kube/errors.py translates.
Does not: choose TLS settings (client.py hands over lightkube's SSL context), retry, decode.
Tests: tests/unit/kube/test_transport.py; every integration test that talks to an API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import yarl
from aiohttp.helpers import get_env_proxy_for_url

__all__ = ["AiohttpTransport"]


class _Body(httpx2.AsyncByteStream):
    """A reply body as it arrives (watch lines included); closing it releases the connection."""

    def __init__(self, reply: aiohttp.ClientResponse) -> None:
        self._reply = reply

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._reply.content.iter_any():
                yield chunk
        except TimeoutError as exc:
            raise httpx2.ReadTimeout(f"no data in time: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        self._reply.release()  # an unfinished body closes its connection instead


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """httpx2.AsyncClient(transport=AiohttpTransport(ssl_context)) sends through aiohttp."""

    def __init__(self, ssl_context: ssl.SSLContext | bool, *, trust_env: bool = True,
                 limit: int = 100) -> None:
        self._ssl, self._trust_env, self._limit = ssl_context, trust_env, limit
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxies: dict[str, tuple[yarl.URL | None, aiohttp.BasicAuth | None]] = {}

    def proxy_for(self, url: yarl.URL) -> tuple[yarl.URL | None, aiohttp.BasicAuth | None]:
        """The environment's proxy for `url`'s origin, looked up once (aiohttp's trust_env
        would look it up, and .netrc, in a thread on every request)."""
        origin = str(url.origin())
        if origin not in self._proxies:
            found: tuple[yarl.URL | None, aiohttp.BasicAuth | None] = (None, None)
            if self._trust_env:
                with contextlib.suppress(LookupError):
                    found = get_env_proxy_for_url(url)
            self._proxies[origin] = found
        return self._proxies[origin]

    def session(self) -> aiohttp.ClientSession:
        """The running loop's session, made on first use (kube/post.py sends through it too)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            # a session belongs to one loop; a client reused on another loop gets a new one
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._limit),
                auto_decompress=False,  # httpx2 decodes
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"))
            self._loop = loop
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        timeout = aiohttp.ClientTimeout(total=None, connect=timeouts.get("pool"),  # + a free slot
                                        sock_connect=timeouts.get("connect"),
                                        sock_read=timeouts.get("read"))
        body = await request.aread()
        url = yarl.URL(str(request.url), encoded=True)
        proxy, proxy_auth = self.proxy_for(url)
        try:
            reply = await self.session().request(
                request.method, url, headers=request.headers.multi_items(), data=body or None,
                timeout=timeout, allow_redirects=False, proxy=proxy, proxy_auth=proxy_auth)
        except TimeoutError as exc:
            late = (httpx2.ConnectTimeout if isinstance(exc, aiohttp.ConnectionTimeoutError)
                    else httpx2.ReadTimeout)
            raise late(str(exc) or type(exc).__name__, request=request) from exc
        except aiohttp.ClientConnectionError as exc:
            raise httpx2.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        return httpx2.Response(reply.status, headers=list(reply.raw_headers),
                               stream=_Body(reply), request=request,
                               extensions={"http_version": b"HTTP/1.1",
                                           "reason_phrase": (reply.reason or "").encode()})

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

"""One hot write without lightkube's request and response objects: POST a JSON body (a pod's
Binding) through aiohttp, with the lightkube client's own server, TLS and credentials.

Why: lightkube over httpx2 spends about 0.5 ms of CPU on each call's request building, client
layers and reply decoding; the extender's `bind` verb makes one such call per pod, its largest
single cost (docs/benchmarks.md, "A lighter Binding POST"). Every other call stays on lightkube.
Owns: `Poster.from_client(client)` (the client's SingleConfig as lightkube reads it: server,
cluster CA, client certificate, user); the user's auth flow run for every request (a bearer
token, a token file re-read after a 401, an exec plugin), resent once when the flow answers a 401
with new credentials; replies other than 2xx as kube/errors.py's typed errors (the Status
message, Retry-After), no answer or a timeout as Unavailable.
Does not: retry (the caller does), decode a successful reply, follow redirects.
Tests: tests/unit/kube/test_post.py; every bind of the integration and real-Kubernetes tiers.
"""

from __future__ import annotations

import ssl

import aiohttp
import httpx2
import yarl
from lightkube import AsyncClient
from lightkube.config.client_adapter import user_auth, verify_cluster

from gpuslice.kube import errors
from gpuslice.kube.transport import AiohttpTransport

__all__ = ["Poster"]

_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


class Poster:
    """`await poster.post(path, body, what)`: 2xx or a typed errors.APIError."""

    def __init__(self, server: str, tls: ssl.SSLContext | bool, auth: httpx2.Auth | None, *,
                 timeout_s: float = 10.0, field_manager: str | None = None) -> None:
        self.server = server.rstrip("/")
        self.auth = auth
        self.field_manager = field_manager
        self._transport = AiohttpTransport(tls)  # its session and proxy choice, not its httpx2 side
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    @classmethod
    def from_client(cls, client: AsyncClient, *, timeout_s: float = 10.0,
                    field_manager: str | None = None) -> Poster:
        """A poster speaking to `client`'s API server as `client` does."""
        single = client.config
        return cls(single.cluster.server, verify_cluster(single.cluster, single.user,
                                                         single.abs_file),
                   user_auth(single.user), timeout_s=timeout_s, field_manager=field_manager)

    async def post(self, path: str, body: bytes, what: str) -> None:
        url = f"{self.server}{path}"
        if self.field_manager:
            url += f"?fieldManager={self.field_manager}"
        flow = None
        headers: dict[str, str] = dict(_HEADERS)
        if self.auth is not None:
            request = httpx2.Request("POST", url, headers=headers)
            flow = self.auth.async_auth_flow(request)
            headers = _sendable(await anext(flow))
        status, reply, retry_after = await self._send(url, body, headers, what)
        if status == 401 and flow is not None:  # a rotated token: the flow may have a new one
            try:
                retry = await flow.asend(httpx2.Response(401, request=request))
            except StopAsyncIteration:
                retry = None
            if retry is not None:
                status, reply, retry_after = await self._send(url, body, _sendable(retry), what)
        if not 200 <= status < 300:
            raise errors.from_reply(status, reply, retry_after, what)

    async def _send(self, url: str, body: bytes, headers: dict[str, str],
                    what: str) -> tuple[int, bytes, str | None]:
        target = yarl.URL(url, encoded=True)
        proxy, proxy_auth = self._transport.proxy_for(target)
        try:
            async with self._transport.session().post(
                    target, data=body, headers=headers, timeout=self._timeout,
                    allow_redirects=False, proxy=proxy, proxy_auth=proxy_auth) as r:
                return r.status, await r.read(), r.headers.get("Retry-After")
        except TimeoutError as exc:
            raise errors.Unavailable(f"{what}: no answer in time") from exc
        except aiohttp.ClientError as exc:
            raise errors.Unavailable(
                f"{what}: cannot reach the API server: {exc or type(exc).__name__}") from exc

    async def close(self) -> None:
        await self._transport.aclose()


def _sendable(request: httpx2.Request) -> dict[str, str]:
    """The headers the auth flow left on `request`, less those aiohttp writes for the body
    (httpx2 put a length of 0 there: the flow's request has no body)."""
    return {k: v for k, v in request.headers.items() if k not in ("host", "content-length")}


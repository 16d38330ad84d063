"""The HTTP extender client of the scheduler driver: kube-scheduler's requests and how it
reads the replies.
Owns: ExtenderArgs (`{"Pod", "Nodes", "NodeNames"}`: the pod without kind, apiVersion or
managedFields; names with nodeCacheCapable, else a NodeList of whole nodes), the bind body
(`{"PodName", "PodNamespace", "PodUID", "Node"}`), Go's headers, replies read with keys in any
case (as Go's encoding/json does), errors worded as Go's (`Post "URL": context deadline
exceeded (Client.Timeout exceeded while awaiting headers)`), and each verb's latencies.
Does not: decide what to do with an error (scheduler_driver.py: retry, skip if ignorable).
Tests: tests/integration/kubeapi/test_scheduler_driver_speaks_the_extender_wire.py"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import msgspec

Obj = dict[str, Any]
GO_HEADERS = {"User-Agent": "Go-http-client/1.1", "Content-Type": "application/json",
              "Accept-Encoding": "gzip"}


class ExtenderError(Exception):
    """The extender could not be reached or answered with an error; the text is Go's."""


class ExtenderClient:
    def __init__(self, url_prefix: str, timeout: float, node_cache_capable: bool,
                 latencies: dict[str, list[float]]) -> None:
        self.url_prefix = url_prefix.rstrip("/")
        self.node_cache_capable = node_cache_capable
        self.latencies = latencies
        self._session = aiohttp.ClientSession(
            headers=GO_HEADERS, timeout=aiohttp.ClientTimeout(total=timeout))

    async def close(self) -> None:
        await self._session.close()

    def args(self, pod: Obj, names: list[str], nodes: Mapping[str, Obj]) -> Obj:
        """ExtenderArgs exactly as kube-scheduler marshals it."""
        if self.node_cache_capable:
            return {"Pod": as_sent(pod), "Nodes": None, "NodeNames": names}
        items = [{k: v for k, v in nodes[n].items() if k not in ("kind", "apiVersion")}
                 for n in names]
        return {"Pod": as_sent(pod), "Nodes": {"metadata": {}, "items": items},
                "NodeNames": None}

    async def filter(self, verb: str, pod: Obj, names: list[str], nodes: Mapping[str, Obj]
                     ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """(nodes that pass, failed node -> reason, unresolvable node -> reason)."""
        result = _fold_keys(await self._post(verb, self.args(pod, names, nodes)))
        if result.get("error"):
            raise ExtenderError(result["error"])
        if self.node_cache_capable:
            passed = list(result.get("nodenames") or [])
        else:
            passed = [n["metadata"]["name"] for n in (result.get("nodes") or {}).get("items")
                      or []]
        return (passed, dict(result.get("failednodes") or {}),
                dict(result.get("failedandunresolvablenodes") or {}))

    async def prioritize(self, verb: str, pod: Obj, names: list[str],
                         nodes: Mapping[str, Obj]) -> dict[str, int]:
        reply = await self._post(verb, self.args(pod, names, nodes))
        items = reply if isinstance(reply, list) else []
        try:  # Go's own key spelling, as extenders answer
            return {str(item["Host"]): int(item["Score"] or 0) for item in items}
        except (KeyError, TypeError):
            folded = [_fold_keys(item) for item in items]
            return {str(item.get("host")): int(item.get("score") or 0) for item in folded}

    async def bind(self, verb: str, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        result = _fold_keys(await self._post(verb, {
            "PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
            "Node": node}))
        if result.get("error"):
            raise ExtenderError(result["error"])

    async def _post(self, verb: str, body: Any) -> Any:
        url = f"{self.url_prefix}/{verb}"
        start = time.perf_counter()
        try:
            async with self._session.post(url, data=msgspec.json.encode(body)) as reply:
                if reply.status != 200:
                    raise ExtenderError(f"failed {verb} with extender at URL {url}, code "
                                        f"{reply.status}")
                raw = await reply.read()
        except TimeoutError:
            raise ExtenderError(f'Post "{url}": context deadline exceeded (Client.Timeout '
                                "exceeded while awaiting headers)") from None
        except aiohttp.ClientConnectorError as e:
            raise ExtenderError(f'Post "{url}": dial tcp {e.host}:{e.port}: connect: '
                                f"{e.strerror or e}") from None
        except aiohttp.ClientError as e:
            raise ExtenderError(f'Post "{url}": {e}') from None
        finally:
            self.latencies.setdefault(verb, []).append(time.perf_counter() - start)
        try:
            return msgspec.json.decode(raw)
        except msgspec.DecodeError as e:
            raise ExtenderError(f"{verb}: extender reply is not JSON: {e}") from None


def as_sent(pod: Obj) -> Obj:
    """The pod as kube-scheduler's informer holds it: no kind/apiVersion, no managedFields."""
    meta = {k: v for k, v in pod["metadata"].items() if k != "managedFields"}
    return {**{k: v for k, v in pod.items() if k not in ("kind", "apiVersion")},
            "metadata": meta}


def _fold_keys(value: Any) -> Any:
    """Go's encoding/json matches keys case-insensitively; fold the top level."""
    return {str(k).lower(): v for k, v in value.items()} if isinstance(value, dict) else {}

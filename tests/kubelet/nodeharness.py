"""Running a node agent (fake GPUs) registered with the kubelet emulator, against an API server."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuslice.node.agent import Agent
from gpuslice.node.nvml import FakeBackend
from gpuslice.node.settings import load
from kubeapi.waiting import wait_for

from .emulator import Kubelet, short_dir
from .pods import NODE


@dataclass
class Node:
    agent: Agent
    kubelet: Kubelet
    backend: FakeBackend
    client: Any
    state: Path
    api: Any


async def create(client: Any, obj: dict[str, Any]) -> dict[str, Any]:
    from lightkube.resources.core_v1 import Pod

    from gpuslice.kube.client import dict_view

    return dict(await client.create(dict_view(Pod)(obj)))


@contextlib.asynccontextmanager
async def started_agent(cfg: Any, client: Any, base: Path
                        ) -> AsyncIterator[tuple[Agent, Kubelet, FakeBackend]]:
    """The agent for `cfg` (its paths under `base`) with 2 fake GPUs, `client` its API client,
    running beside a fresh emulated kubelet; everything stopped and `base` removed after."""
    lib = base / "libgpuslice.so"
    lib.write_bytes(b"\x7fELF not really")
    backend = FakeBackend.with_count(2)
    agent = Agent(cfg, backend, client, library=lib)
    agent.kubelet.poll_s = 0.05
    kubelet = Kubelet(str(base / "dp"), str(base / "pr.sock"))
    await kubelet.start()
    task = asyncio.create_task(agent.run())
    try:
        yield agent, kubelet, backend
    finally:
        agent.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        await kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


def agent_paths(base: Path) -> dict[str, str]:
    """The config keys that put an agent's host paths under `base` (what started_agent uses)."""
    return {"devicePluginDir": str(base / "dp"), "stateDir": str(base / "state"),
            "podResourcesSocket": str(base / "pr.sock"), "metricsAddress": "127.0.0.1:0"}


@contextlib.asynccontextmanager
async def running_node(kube_api: Any, **overrides: Any) -> AsyncIterator[Node]:
    """A running agent with 2 fake GPUs (split 4), registered with a fresh emulated kubelet."""
    from lightkube.resources.core_v1 import Node as NodeRes

    from gpuslice.kube.client import dict_view

    base = Path(short_dir())
    client = kube_api.async_client()
    await client.create(dict_view(NodeRes)({"apiVersion": "v1", "kind": "Node",
                                            "metadata": {"name": NODE}}))
    cfg = load(None, flags={
        "nodeName": NODE, **agent_paths(base), "splitCount": 4, "verifyIntervalSeconds": 0.2,
        "healthIntervalSeconds": 0.05, "xidRecoverySeconds": 0.5, **overrides}, environ={})
    async with started_agent(cfg, client, base) as (agent, kubelet, backend):
        for r in cfg.resources:
            await wait_for(lambda r=r: r in kubelet.endpoints, f"{r} registered")
        yield Node(agent, kubelet, backend, client, base / "state", kube_api)

"""`wait_for`: poll a condition (plain or async) until it holds, or fail naming what was awaited.
Shared by every integration harness (scheduler, node agent, demo). Tests: used throughout
tests/integration/."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


async def wait_for(cond: Callable[[], object | Awaitable[object]], what: str,
                   timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)

"""asyncio helpers the long-running loops share.

`wait_set(event, timeout)` replaces `asyncio.wait_for(event.wait(), timeout)` in loops that
are stopped by cancelling their task: on Python 3.11, wait_for drops a cancellation that
arrives as the event is set (the inner wait finishes first), so the loop goes on and whoever
awaits the cancelled task waits forever. asyncio.timeout never does.
Tests: tests/unit/test_aio.py"""

from __future__ import annotations

import asyncio

__all__ = ["wait_set"]


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds pass; whether it is set."""
    try:
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()

"""aio.wait_set: waits, times out, and never drops the cancellation of the loop using it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gpuslice.aio import wait_set


async def test_it_says_whether_the_event_was_set():
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 5) is True
    assert await wait_set(event, -1) is True, "a negative timeout is no wait, not an error"


async def waiting_loop(event: asyncio.Event, wait) -> None:
    while True:  # stopped only by cancelling its task, as the agents' loops are
        await wait(event)
        event.clear()


async def _wait_for(event: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), 1)


@pytest.mark.parametrize("wait", [lambda e: wait_set(e, 1), _wait_for],
                         ids=["wait_set", "asyncio.wait_for"])
async def test_a_cancel_that_comes_with_the_event_stops_the_loop(wait):
    event = asyncio.Event()
    task = asyncio.create_task(waiting_loop(event, wait))
    stopped = 0
    for _ in range(20):
        await asyncio.sleep(0.01)  # the loop is waiting
        event.set()
        task.cancel()  # in the same step: the event's waiter and the cancel race
        done, _ = await asyncio.wait([task], timeout=0.2)
        if done:
            stopped += 1
            break
    if wait is _wait_for and not stopped:
        pytest.xfail("Python 3.11's asyncio.wait_for dropped the cancellation (why aio exists)")
    assert stopped, "the loop went on after its task was cancelled"

"""A deadline-bound wait never loses its task's cancellation (worker/waits.py)."""

from __future__ import annotations

import asyncio

import pytest

from worker.waits import wait_set


async def test_a_cancellation_that_arrives_as_the_event_is_set_is_not_lost() -> None:
    """The gap in Python 3.11's ``wait_for``: there, this task returns True and runs on after being cancelled
    (a stopping host waited out a 20 s long poll)."""
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_set(event, 10))
    await asyncio.sleep(0)  # one turn of the loop: the task is now waiting on the event
    event.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_it_says_whether_the_event_was_set_or_the_time_ran_out() -> None:
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    asyncio.get_running_loop().call_soon(event.set)
    assert await wait_set(event, 10) is True
    assert await wait_set(event, None) is True

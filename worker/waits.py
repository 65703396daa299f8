"""Waiting for an event with a deadline, without losing a cancellation.

On Python 3.11, ``asyncio.wait_for`` returns normally when its task is
cancelled just as the awaited event is set (CPython gh-86296, fixed in 3.12 by
rebuilding it on ``asyncio.timeout``). The cancellation is then lost: a
stopping host waited out a whole 20-second long poll, and a lease scheduler
cancelled at stop would go on looping. ``asyncio.timeout`` counts the
cancellations it did not cause and lets them through, so the host never uses
``asyncio.wait_for``: a wait for an event with a deadline goes through
:func:`wait_set`, and other deadline-bound awaits use ``asyncio.timeout`` itself,
or (an async handler's functionTimeout, on every message) a timer that cancels the
task and, as ``asyncio.timeout`` does, takes back only the cancellation it caused.

This module imports nothing of the package: every layer may use it.
"""

from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set (True) or ``timeout`` seconds have passed (False; None waits without limit)."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True

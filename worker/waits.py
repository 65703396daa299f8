"""Waiting for an event with a deadline, without losing a cancellation.

On Python 3.11, ``asyncio.wait_for`` can swallow a cancellation (CPython gh-86296, fixed in 3.12).
So the host never uses it: event waits use :func:`wait_set`, other deadlines ``asyncio.timeout``.
An async handler's functionTimeout uses a timer that takes back only the cancellation it caused.
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

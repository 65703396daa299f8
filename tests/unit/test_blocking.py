"""Blocking calls in threads (worker/backends/blocking.py): a cancelled caller goes at once, what its call brings
is released, and close waits for that; the backends' own runs are in tests/conformance (OCI Queue, SQS)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from worker.backends.blocking import BlockingCalls
from worker.backends.queues import QueueError

WAIT = 10.0


def gated(started: threading.Event, go: threading.Event, result: str) -> Callable[[], str]:
    """A blocking call that says it has started, then waits for ``go``."""

    def call() -> str:
        started.set()
        assert go.wait(WAIT)
        return result

    return call


async def test_a_cancelled_caller_goes_at_once_and_what_its_call_brings_is_released_before_close_ends() -> None:
    calls = BlockingCalls("backend", "test", 2)
    started, go, released = threading.Event(), threading.Event(), []
    caller = asyncio.create_task(calls.run(gated(started, go, "messages"), long=True, release=released.append))
    assert await asyncio.to_thread(started.wait, WAIT)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(caller, WAIT)  # gone while the call still blocks
    assert released == []
    closing = asyncio.create_task(calls.close(WAIT))
    done, _ = await asyncio.wait({closing}, timeout=0.1)
    assert not done  # close waits for the release
    go.set()
    await asyncio.wait_for(closing, WAIT)
    assert released == ["messages"]


async def test_a_call_whose_caller_went_before_it_started_is_skipped() -> None:
    calls = BlockingCalls("backend", "test", 1)
    started, go = threading.Event(), threading.Event()
    ran: list[str] = []
    first = asyncio.create_task(calls.run(gated(started, go, "first")))
    assert await asyncio.to_thread(started.wait, WAIT)
    second = asyncio.create_task(calls.run(lambda: ran.append("second"), release=ran.append))
    await asyncio.sleep(0)  # the second call is queued behind the first, on the pool's one thread
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    go.set()
    assert await first == "first"
    await calls.close(WAIT)
    assert ran == []


async def test_close_tells_a_caller_whose_call_had_not_started_and_refuses_new_calls() -> None:
    calls = BlockingCalls("backend", "test", 1)
    started, go = threading.Event(), threading.Event()
    first = asyncio.create_task(calls.run(gated(started, go, "first")))
    assert await asyncio.to_thread(started.wait, WAIT)
    queued = asyncio.create_task(calls.run(lambda: "never"))
    await asyncio.sleep(0)
    await calls.close(WAIT)
    with pytest.raises(QueueError, match="backend was closed during the call"):
        await asyncio.wait_for(queued, WAIT)
    with pytest.raises(QueueError, match="backend is closed"):
        await calls.run(lambda: "late")
    go.set()
    assert await first == "first"


async def test_a_failure_reaches_the_caller_after_on_error_saw_it_in_the_call_thread() -> None:
    seen: list[tuple[str, str]] = []
    calls = BlockingCalls(
        "backend", "test", 1, on_error=lambda exc: seen.append((str(exc), threading.current_thread().name))
    )

    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        await calls.run(fail)
    await calls.close(WAIT)
    assert [(text, name.startswith("test")) for text, name in seen] == [("refused", True)]

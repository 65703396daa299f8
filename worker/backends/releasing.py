"""What every backend shares about receives cancelled under way: what they bring is released at once.

The host cancels receives in flight when it stops (:mod:`worker.runtime.listener`).
A service may still hand messages to a caller gone; dropped, they would stay hidden a whole lease.
So a cancelled receive runs to its end, its messages are made visible, and ``close`` waits for that.
Event-loop backends (embedded, Azure) use :class:`CancelledReceives`.
Blocking-SDK backends (OCI Queue, SQS) run on in their threads, counted by :class:`PendingReleases`
(:class:`worker.backends.blocking.BlockingCalls`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import structlog

from worker.backends.queues import QueueBackend, RawMessage

T = TypeVar("T")

log = structlog.get_logger("worker.backends.releasing")

#: Longest a backend's ``close`` waits for receives cancelled under way to end and release what they bring, in
#: seconds: a receive's read timeout and a retry or two. What is still under way then is dropped (its messages come
#: back when their lease ends).
RELEASE_WAIT = 10.0


class PendingReleases:
    """A count of calls whose result may still have to be released, and a wait for it to reach zero (any thread)."""

    def __init__(self) -> None:
        self._zero = threading.Condition()
        self.pending = 0

    def hold(self) -> None:
        with self._zero:
            self.pending += 1

    def released(self) -> None:
        with self._zero:
            self.pending -= 1
            self._zero.notify_all()

    def wait(self, timeout: float) -> bool:
        """Whether the count reached zero within ``timeout`` seconds."""
        with self._zero:
            return self._zero.wait_for(lambda: self.pending == 0, timeout)


class CancelledReceives:
    """A backend's receives on the event loop: one whose caller is cancelled runs on, and what it brings goes to
    ``release``; :meth:`wait` (in ``close``) waits for those."""

    def __init__(self) -> None:
        self._left: set[asyncio.Task[None]] = set()

    async def run(self, receive: Awaitable[T], release: Callable[[T], Awaitable[Any]]) -> T:
        """Await ``receive``; cancelled meanwhile, it is not cut but its result handed to ``release`` (also one that
        came just before the cancellation, which the caller never read)."""
        call = asyncio.ensure_future(receive)
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            left = asyncio.ensure_future(_release_when_done(call, release))
            self._left.add(left)
            left.add_done_callback(self._left.discard)
            raise

    async def wait(self, timeout: float = RELEASE_WAIT) -> bool:
        """Wait until every cancelled receive has ended and released what it brought, up to ``timeout`` seconds;
        what is still under way then is cancelled. Whether all ended in time."""
        if not self._left:
            return True
        log.info(
            "waiting for cancelled receives to end, to release what they bring",
            receives=len(self._left),
            at_most_seconds=timeout,
        )
        _, late = await asyncio.wait(set(self._left), timeout=timeout)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
        if late:
            log.warning(
                "cancelled receives did not end in time; what they bring stays hidden for its lease", receives=len(late)
            )
        return not late


async def _release_when_done(call: asyncio.Future[T], release: Callable[[T], Awaitable[Any]]) -> None:
    try:
        got = await call
    except Exception:  # a receive that failed brought nothing (and its error has nobody left to tell)
        return
    try:
        await release(got)
    except Exception as exc:  # storage gone or down meanwhile: nobody is left to raise it to
        log.warning(
            "what a cancelled receive brought could not be released; it comes back when its lease ends",
            error=f"{type(exc).__name__}: {exc}",
        )


async def release_now(
    backend: QueueBackend, queue: str, messages: Sequence[RawMessage], what: str, logger: Any = log
) -> None:
    """Make ``messages`` of ``queue`` visible again at once (visibility 0), for any worker to take, and log it as
    ``what``. Their delivery has been counted; one whose release fails comes back when its lease ends."""
    if not messages:
        return
    results = await asyncio.gather(
        *(backend.update(queue, m.id, m.pop_receipt or "", 0) for m in messages), return_exceptions=True
    )
    failures = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    logger.info(f"{what} were released", queue=queue, count=len(messages) - len(failures))
    if failures:
        logger.warning(f"releasing {what} failed; they come back when their lease ends", queue=queue, errors=failures)

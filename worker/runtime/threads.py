"""The threads that run synchronous handlers, and the ones the host had to give up on.

A sync handler runs on one of ``handlerThreads`` threads, never blocking the event loop.
Python cannot stop a thread: a handler given up on keeps its thread until it returns.
Such threads count as abandoned; when all are, the host reports itself stuck.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from worker.waits import wait_set

log = structlog.get_logger("worker.runtime.threads")


#: Seconds a sync handler past its timeout has to notice ``message.cancelled`` and return before it is given up on.
TIMEOUT_GRACE = 2.0


class TimedOut(Exception):  # noqa: N818 -- what happened, as the log says it
    """The handler ran past functionTimeout: an async one was cancelled, a sync one returned once told to stop."""


class Overran(TimedOut):
    """A sync handler ran past its timeout and the grace after it, and still runs in its thread (nothing can stop
    it)."""


class HandlerThreads:
    def __init__(self, size: int) -> None:
        self.size = size
        self._pool = ThreadPoolExecutor(size, thread_name_prefix="handler")
        self._slots = asyncio.Semaphore(size)
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        #: Threads still running a handler the host gave up on (timed out or cancelled).
        self._abandoned: set[Future[None]] = set()

    async def run(
        self,
        call: Callable[[], None],
        timeout: float | None,
        *,
        on_start: Callable[[], None],
        on_timeout: Callable[[], None],
        about: dict[str, str],
    ) -> None:
        """Wait for a free thread, call ``on_start``, run ``call`` there (in a copy of this context) within ``timeout``.

        Past ``timeout``, ``on_timeout`` tells the handler to stop, and it has
        :data:`TIMEOUT_GRACE` to return: then :class:`TimedOut` is raised, else
        :class:`Overran`. Otherwise raises whatever ``call`` raised. If the
        caller stops waiting (overrun, cancellation), the thread is recorded as
        abandoned until ``call`` returns; ``about`` names the invocation in the
        warning.
        """
        await self._slots.acquire()
        on_start()
        self._busy += 1
        self._idle.clear()
        loop = asyncio.get_running_loop()
        future = self._pool.submit(contextvars.copy_context().run, call)
        future.add_done_callback(lambda done: loop.call_soon_threadsafe(self._free, done))
        try:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.wrap_future(future)
                return
            except TimeoutError:
                if future.done():  # it returned (or raised a TimeoutError of its own) as the deadline came
                    future.result()
                    return
            # Past the deadline (the rare path): tell it to stop, and give it the grace to return.
            on_timeout()
            returned = asyncio.wrap_future(future)
            await asyncio.wait({returned}, timeout=TIMEOUT_GRACE)  # never cancels what it waits for
            reason = f"functionTimeout of {timeout:g}s exceeded"
            if not returned.done():
                self._abandon(future, about)
                returned.add_done_callback(_retrieve)
                raise Overran(reason)
            _retrieve(returned)  # whatever it raised once told to stop, the attempt failed by its timeout
            raise TimedOut(reason)
        except BaseException:
            if not future.done() and future not in self._abandoned:
                self._abandon(future, about)
            raise

    @property
    def busy(self) -> int:
        """Sync handlers still running in a thread, including ones the host has given up on."""
        return self._busy

    @property
    def abandoned(self) -> int:
        """Threads held by handlers the host gave up on; they come back only when those handlers return."""
        return len(self._abandoned)

    def stuck(self) -> str | None:
        """Why the host can no longer run sync handlers (every thread held by an abandoned one), or None."""
        if len(self._abandoned) < self.size:
            return None
        return (
            f"every handler thread ({self.size}) runs a handler that ran past functionTimeout or was cancelled; "
            "only a restart frees them"
        )

    async def wait_idle(self, timeout: float) -> bool:
        """Give cancelled sync handlers ``timeout`` to notice ``message.cancelled`` and return."""
        return await wait_set(self._idle, timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _abandon(self, future: Future[None], about: dict[str, str]) -> None:
        """The host stops waiting for a sync handler that still runs: its thread stays taken until it returns."""
        self._abandoned.add(future)
        log.warning(
            "handler thread is still running after the host gave up on it; it stays busy until the handler returns",
            **about,
            threads_abandoned=len(self._abandoned),
            handler_threads=self.size,
        )
        if (problem := self.stuck()) is not None:
            log.error("sync handlers can no longer run", problem=problem)

    def _free(self, future: Future[None]) -> None:
        """A thread is free only when its handler returns, not when the host stops waiting for it."""
        self._abandoned.discard(future)
        self._busy -= 1
        if self._busy == 0:
            self._idle.set()
        self._slots.release()


def _retrieve(returned: asyncio.Future[None]) -> None:
    """Read the outcome of a handler nobody waits for any more, so that asyncio does not report it as lost."""
    if not returned.cancelled():
        returned.exception()

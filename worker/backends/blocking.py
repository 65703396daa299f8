"""Blocking SDK calls awaited on the event loop: each runs in a thread, and a cancelled caller goes at once.

The SDKs of OCI Queue and Amazon SQS block, so their backends run every call
in a thread (:class:`BlockingCalls`): ordinary calls on a pool, calls that may
take long (OCI's long polls) on daemon threads, which nobody waits for
(:class:`DaemonThreads`). Cancelling a caller does not cut its request, and is
not meant to: the service may still hand messages to a request whose client
has hung up, and those would stay hidden for their whole lease. So the caller
goes at once, a call not yet started is skipped, and one under way runs to its
end with what it brings handed to a release callback (in a thread); ``close``
waits for those releases, up to a deadline (:mod:`worker.backends.releasing`
says why).
"""

from __future__ import annotations

import asyncio
import queue as jobs_queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

from worker.backends.queues import QueueError
from worker.backends.releasing import PendingReleases

T = TypeVar("T")

log = structlog.get_logger("worker.backends.blocking")

#: How long an idle daemon thread waits for its next job (and keeps the clients it made, with their connections).
IDLE_SECONDS = 60.0


class BlockingCalls:
    """One backend's blocking calls: a pool of ``threads`` for ordinary calls, daemon threads for long ones and for
    releases, and the count of releases still to be made.

    ``on_error`` runs in the failed call's thread with its exception (to note what only that thread knows, such as
    the endpoint it called); ``on_thread_exit`` runs in each daemon thread as it ends (to close the clients it made).
    ``owner`` names the backend in the errors its callers read; ``logger`` is the backend's.
    """

    def __init__(
        self,
        owner: str,
        name: str,
        threads: int,
        *,
        logger: Any = log,
        on_error: Callable[[BaseException], None] | None = None,
        on_thread_exit: Callable[[], None] | None = None,
    ) -> None:
        self._owner = owner
        self._log = logger
        self._on_error = on_error
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._daemons = DaemonThreads(f"{name}-long", IDLE_SECONDS, on_thread_exit or _nothing)
        self._releasing = PendingReleases()
        self._closed = False

    async def run(self, fn: Callable[[], T], *, long: bool = False, release: Callable[[T], None] | None = None) -> T:
        """Run ``fn`` in a thread (a daemon thread if ``long``) and await its result.

        If the caller is cancelled, a call not yet started is skipped, and one under way runs to its end (its
        request is not cut: the service may answer it anyway) with its result handed to ``release`` in a thread;
        so is a result that came just before the cancellation, which the caller never read. A call with a
        ``release`` counts, for :meth:`close`, until its caller has its result or ``release`` has had it.
        """
        call: Future[T] = Future()
        self._start(lambda: self._execute(fn, call), call, long)
        if release is not None:
            self._releasing.hold()  # until its caller has the result, or release has had it
        handed_on = False
        try:
            return await asyncio.shield(asyncio.wrap_future(call))
        except asyncio.CancelledError:
            if not call.cancel() and release is not None:  # under way or done: its caller has gone
                call.add_done_callback(lambda done: self._release_later(release, done))
                handed_on = True
            raise
        finally:
            if release is not None and not handed_on:
                self._releasing.released()

    def _start(self, job: Callable[[], None], call: Future[Any], long: bool) -> None:
        if self._closed:
            raise QueueError(f"{self._owner} is closed")
        try:
            if long:
                self._daemons.submit(job)
            else:
                self._pool.submit(job).add_done_callback(lambda started: self._dropped(started, call))
        except RuntimeError:  # closed meanwhile
            raise QueueError(f"{self._owner} is closed") from None

    def _dropped(self, job: Future[None], call: Future[Any]) -> None:
        """A job ``close`` dropped before it ran: its caller, if still there, hears why."""
        if job.cancelled() and call.set_running_or_notify_cancel():
            call.set_exception(QueueError(f"{self._owner} was closed during the call"))

    def _execute(self, fn: Callable[[], T], call: Future[T]) -> None:
        """In a thread: ``fn``, unless its caller went before it started."""
        if not call.set_running_or_notify_cancel():
            return
        try:
            result = fn()
        except BaseException as exc:
            if self._on_error is not None:
                self._on_error(exc)
            call.set_exception(exc)
        else:
            call.set_result(result)

    def _release_later(self, release: Callable[[T], None], done: Future[T]) -> None:
        """Hand what a call whose caller has gone brought to ``release``, on a daemon thread (one of its own once
        closed); a call that failed brought nothing."""

        def job() -> None:
            try:
                if done.exception() is None:
                    release(done.result())
            finally:
                self._releasing.released()

        try:
            self._daemons.submit(job)
        except RuntimeError:  # closed
            self._daemons.run_alone(job)

    async def close(self, wait: float) -> None:
        """Refuse new calls; wait up to ``wait`` seconds until every call with a ``release`` has ended and, if its
        caller has gone, released what it brought; then drop the threads (a call not yet started is dropped, its
        caller told)."""
        self._closed = True
        if self._releasing.pending:
            self._log.info(
                "waiting for cancelled receives to end, to release what they bring",
                receives=self._releasing.pending,
                at_most_seconds=wait,
            )
            if not await asyncio.to_thread(self._releasing.wait, wait):
                self._log.warning(
                    "cancelled receives did not end in time; what they bring stays hidden for its lease",
                    receives=self._releasing.pending,
                )
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._daemons.close()


class DaemonThreads:
    """Daemon threads for calls that may take long: nobody waits for them, neither a caller nor interpreter exit.

    A thread that finishes its job waits a while for the next one, so that its clients (and their
    connections) are reused from one long poll to the next; ``on_exit`` runs in a thread as it ends.
    """

    def __init__(self, name: str, idle_seconds: float, on_exit: Callable[[], None]) -> None:
        self._name = name
        self._idle_seconds = idle_seconds
        self._on_exit = on_exit
        self._jobs: jobs_queue.SimpleQueue[Callable[[], None] | None] = jobs_queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a job, less the jobs already handed to them
        self._closed = False
        self._started = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot start a call after close")
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
            self._started += 1
            name = f"{self._name}-{self._started}"
        threading.Thread(target=self._work, args=(job,), name=name, daemon=True).start()

    def run_alone(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a daemon thread of its own, which ends with it (even after :meth:`close`)."""
        threading.Thread(target=self._work, args=(job, False), name=f"{self._name}-alone", daemon=True).start()

    def _work(self, job: Callable[[], None] | None, stay: bool = True) -> None:
        try:
            while job is not None:
                try:
                    job()
                except Exception:  # pragma: no cover - jobs catch their own errors
                    log.exception("a blocking call's thread failed", thread=threading.current_thread().name)
                job = self._next() if stay else None
        finally:
            self._on_exit()

    def _next(self) -> Callable[[], None] | None:
        """The next job handed to this thread within the idle time; None when there is none, or when closed."""
        with self._lock:
            if self._closed:
                return None
            self._idle += 1
        try:
            return self._jobs.get(timeout=self._idle_seconds)
        except jobs_queue.Empty:
            with self._lock:  # a job handed over as we timed out is ours to run
                try:
                    return self._jobs.get_nowait()
                except jobs_queue.Empty:
                    self._idle -= 1
                    return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._jobs.put(None)


def _nothing() -> None:
    pass

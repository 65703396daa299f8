"""How the OCI backend's blocking SDK calls run: daemon threads for long polls, and sent requests told apart.

A long poll holds a thread up to 20 s, so it runs on a daemon thread (:class:`DaemonThreads`).
A cancelled poll runs to its end; the backend releases what it brings.
:func:`sending` notes a request's first byte out: a failed put that never left may be sent again.
Any other failed put may have been stored, so it is not.
Where the SDK's vendored pools differ (:func:`track_sending`), every failure counts as sent, after one warning.
"""

from __future__ import annotations

import queue as jobs_queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from worker.dependencies import fall_back

log = structlog.get_logger("worker.backends.oci.queues")


#: Per thread: whether the request of the call under way (see :func:`sending`) has sent anything.
SENDING = threading.local()


def tracked(pool_class: type) -> type:
    """``pool_class`` whose connections note, in the sending thread, that a request's first byte went out."""
    base = pool_class.ConnectionCls

    class Connection(base):  # type: ignore[misc, valid-type]
        def send(self, data: Any) -> None:
            if self.sock is None:  # http.client would connect here: a failure to connect sends nothing
                self.connect()
            SENDING.sent = True
            super().send(data)

    return type(f"Tracked{pool_class.__name__}", (pool_class,), {"ConnectionCls": Connection})


@contextmanager
def sending() -> Iterator[None]:
    """Around one SDK call in this thread: an exception out of it gets ``request_sent``, whether any byte of the
    request left for the service (on a tracked connection, see :func:`track_sending`).

    False proves the service never saw the request; True means it may have, and may have done it.
    """
    SENDING.sent = False
    try:
        yield
    except Exception as exc:
        # A thread whose clients could not be tracked cannot tell: the call may have been sent.
        exc.request_sent = SENDING.sent or getattr(SENDING, "untracked", False)  # type: ignore[attr-defined]
        raise


def track_sending(client: Any) -> None:
    """Make ``client``'s connections record the sending of each request (see :func:`sending`).

    The clients of a thread are its own, so where the SDK's pools are not as expected the thread is marked
    untracked (a per-thread flag) and :func:`sending` counts its failed calls as sent.
    """
    try:
        managers = [adapter.poolmanager for adapter in client.base_client.session.adapters.values()]
        classes = [manager.pool_classes_by_scheme for manager in managers]
        replaced = [{scheme: tracked(cls) for scheme, cls in pools.items()} for pools in classes]
        if not replaced or not all(callable(getattr(cls.ConnectionCls, "send", None)) for cls in classes[0].values()):
            raise AttributeError("no connection pools with a ConnectionCls that sends")
    except (AttributeError, TypeError) as exc:
        fall_back(
            "oci",
            f"the vendored connection pools of its clients: {exc}",
            "every failed call counts as possibly sent, so a put that never left is reported, not sent again",
        )
        SENDING.untracked = True
        return
    for manager, pools in zip(managers, replaced, strict=True):
        manager.pool_classes_by_scheme = pools


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

    def _work(self, job: Callable[[], None] | None) -> None:
        try:
            while job is not None:
                try:
                    job()
                except Exception:  # pragma: no cover - jobs catch their own errors
                    log.exception("OCI Queue call thread failed")
                with self._lock:
                    if self._closed:
                        return
                    self._idle += 1
                try:
                    job = self._jobs.get(timeout=self._idle_seconds)
                except jobs_queue.Empty:
                    with self._lock:  # a job handed over as we timed out is ours to run
                        try:
                            job = self._jobs.get_nowait()
                        except jobs_queue.Empty:
                            self._idle -= 1
                            job = None
        finally:
            self._on_exit()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._jobs.put(None)

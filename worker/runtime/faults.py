"""The host's own background tasks, and what happens when one of them fails.

A failed host task (a listener, the lease scheduler, a completion) would otherwise stall silently.
As in the WebJobs host, it is logged with its traceback and named by ``/readyz``.
The host then stops, and ``worker run`` exits :data:`FAULT` for its supervisor to start afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger("worker.runtime.faults")

#: The exit code of a ``worker run`` process whose host stopped because one of its own tasks failed.
FAULT = 1


class Faults:
    """Starts the host's tasks and watches them: the first that fails stops the host, and each is reported."""

    def __init__(self, stopping: asyncio.Event) -> None:
        self.stopping = stopping
        #: One line per failed task, in the order they failed: what ``/readyz`` answers, and why the process exits.
        self.failed: list[str] = []

    def start(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task named ``name``, watched."""
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self.watch)
        return task

    def watch(self, task: asyncio.Task[Any]) -> None:
        """A done callback: report ``task`` if it ended with an exception (cancelled is how the host stops it)."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            self.report(task.get_name(), exc)

    def report(self, name: str, exc: BaseException) -> None:
        """``name`` failed with ``exc``: say so with the traceback, and stop the host. A task of the same name that
        fails again meanwhile (a renewer started anew for the same due lease) is said once."""
        line = f"{name} failed: {type(exc).__name__}: {exc}"
        if line in self.failed:
            return
        self.failed.append(line)
        log.error(
            "a task of the host failed; stopping, so that the process exits and is started again",
            task=name,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=exc,
        )
        self.stopping.set()

    def not_ready(self) -> list[str]:
        """The failed tasks, for ``/readyz``."""
        return list(self.failed)

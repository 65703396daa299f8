"""The console's bulk poison actions (requeue all, purge), run beside the request that starts them.

An action can take minutes, so the request only starts it and answers at once; the state shows it.
One action runs at a time per function; a second is refused (409), since both would take the same messages.
Each moves at most what the poison queue held when it began (:meth:`worker.runtime.console.poison.PoisonOf.requeue_all`).
So it ends even while the host poisons requeued messages again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from worker.runtime.console.poison import ActionRefused, PoisonOf

log = structlog.get_logger("worker.runtime.console")

#: The actions run beside their request, by the last part of their path.
BULK = ("requeue-all", "purge")


@dataclass
class Running:
    """One bulk action: what it is, who asked, how far it is, and how it ended."""

    function: str
    action: str
    #: Who asked, for the log (:func:`worker.runtime.console.web.who`).
    asked_by: dict[str, Any]
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    #: What the poison queue held when it began: the most it will do (None until counted).
    most: int | None = None
    done: int = 0
    ended: datetime | None = None
    error: str | None = None

    def progress(self, done: int, most: int) -> None:
        self.done, self.most = done, most

    def view(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "action": self.action,
            "running": self.ended is None,
            "messages": self.done,
            "most": self.most,
            "error": self.error,
            "startedAt": self.started.isoformat(timespec="seconds"),
            "endedAt": self.ended.isoformat(timespec="seconds") if self.ended else None,
        }


class BulkActions:
    """The bulk actions of one host: the one running per function, and the last that ended."""

    def __init__(self, ended: Callable[[], Awaitable[object]]) -> None:
        """``ended`` is awaited after each action, so that the next view shows what it did."""
        self._ended = ended
        self._last: dict[str, Running] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, poison: PoisonOf, action: str, asked_by: dict[str, Any]) -> Running:
        """Start ``action`` on ``poison``; refused (409) while one runs for its function."""
        if action == "requeue-all":
            poison.readable()  # refused now, not in the background, where poison cannot be read
        self.check_idle(poison.function)
        running = Running(poison.function, action, asked_by)
        self._last[poison.function] = running
        task = asyncio.create_task(self._run(poison, running), name=f"console-{action}-{poison.function}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return running

    def check_idle(self, function: str) -> None:
        """Refuse (409) while an action of ``function`` runs."""
        last = self._last.get(function)
        if last is not None and last.ended is None:
            raise ActionRefused(
                409,
                f"{last.action} of {function} is still running ({last.done} of "
                f"{'?' if last.most is None else last.most} messages): wait for it to end",
            )

    def views(self) -> list[dict[str, Any]]:
        """Each function's running action, or the last one that ended."""
        return [running.view() for running in self._last.values()]

    def stop(self) -> None:
        """Cancel the actions still running (the host is stopping): a message is put back before it is deleted
        from the poison queue, so one cut short can be in both, never in neither."""
        for task in self._tasks:
            task.cancel()

    async def _run(self, poison: PoisonOf, running: Running) -> None:
        try:
            if running.action == "purge":
                await poison.purge(running.progress)
            else:
                await poison.requeue_all(running.progress)
        except ActionRefused as exc:
            running.error = str(exc)
        except Exception as exc:  # storage trouble: shown in the state and logged; what was moved stays moved
            running.error = f"{type(exc).__name__}: {exc}"
        finally:
            running.ended = datetime.now(UTC)
        log.warning(
            "poison action from the console",
            action=running.action,
            function=running.function,
            queue=poison.queue,
            messages=running.done,
            most=running.most,
            error=running.error,
            **running.asked_by,
        )
        try:
            await self._ended()
        except Exception as exc:  # the next look shows it anyway
            log.debug("console look after a poison action failed", error=f"{type(exc).__name__}: {exc}")

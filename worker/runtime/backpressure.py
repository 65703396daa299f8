"""Hold back receives while finished messages cannot be settled: storage that refuses deletes gets no new work.

A failed completion keeps its lease and is tried again (:mod:`worker.runtime.completion`).
More receives would only add unsettled messages, each renewed on the failing storage.
So while a completion on a backend fails, its listeners wait on :meth:`StoreTrouble.cleared`.
``/readyz`` says why; the log says so when it starts and ends. Other backends go on.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import structlog

from worker.backends.queues import QueueBackend
from worker.model import Lease

log = structlog.get_logger("worker.runtime.backpressure")


@dataclass
class _Trouble:
    """The failing completions on one backend, and since when there have been some."""

    failing: set[Lease] = field(default_factory=set)
    since: float = 0.0
    error: str = ""
    #: Set while nothing fails: what held-back listeners wait for.
    clear: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.clear.set()


class StoreTrouble:
    """Completions that storage failed, per backend; owned by the host, told by completion, asked by listeners."""

    def __init__(self) -> None:
        self._backends: dict[QueueBackend, _Trouble] = {}

    def _of(self, backend: QueueBackend) -> _Trouble:
        return self._backends.setdefault(backend, _Trouble())

    def failed(self, backend: QueueBackend, lease: Lease, error: str) -> None:
        """A completion of ``lease``'s message failed with a storage error and will be tried again."""
        trouble = self._of(backend)
        trouble.error = error
        if not trouble.failing:
            trouble.since = time.monotonic()
            trouble.clear.clear()
            log.warning(
                "completions are failing on storage; holding back receives until they succeed",
                function=lease.function,
                queue=lease.queue,
                error=error,
            )
        trouble.failing.add(lease)

    def settled(self, backend: QueueBackend, lease: Lease) -> None:
        """``lease``'s completion is over (done, skipped, or given up); the last one to end lets receives resume."""
        trouble = self._backends.get(backend)
        if trouble is None or lease not in trouble.failing:
            return
        trouble.failing.discard(lease)
        if not trouble.failing:
            trouble.clear.set()
            log.info(
                "completions succeed again; receiving resumes", held_back_seconds=round(time.monotonic() - trouble.since, 3)
            )

    def holding(self, backend: QueueBackend) -> bool:
        """Whether receives from ``backend`` are held back now."""
        return not self._of(backend).clear.is_set()

    def cleared(self, backend: QueueBackend) -> asyncio.Event:
        """Set while no completion on ``backend`` fails; a held-back listener waits for it."""
        return self._of(backend).clear

    def problems(self) -> list[str]:
        """One line per backend whose receives are held back, for ``/readyz``."""
        now = time.monotonic()
        return [
            f"receives held back: {len(trouble.failing)} finished messages of queue "
            f"{', '.join(sorted({lease.queue for lease in trouble.failing}))} not settled for "
            f"{now - trouble.since:.0f}s; storage: {trouble.error}"
            for trouble in self._backends.values()
            if trouble.failing
        ]

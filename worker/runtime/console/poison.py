"""Each function's poison as the console shows it (cached), and the requeue and purge actions.

The actions are the poison tools' own code, through the function's :class:`worker.runtime.poison.PoisonPolicy`.
So the page moves a message exactly as ``worker poison requeue`` does: put back first, then deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.backends.queues import QueueBackend, QueueNotFound, RawMessage
from worker.bindings.encoding import body_text
from worker.runtime.poison import PoisonPolicy, failure_of, policy_for

#: Messages of each poison queue the console shows (where the backend can look without receiving).
PEEK = 20
#: Longest body shown, in characters.
BODY_CHARS = 2000

#: Told how far a bulk action is: (messages done, at most how many it will do), first with (0, most) once counted.
Progress = Callable[[int, int], None]


class ActionRefused(Exception):
    """An action that cannot be done here (a dead-letter queue cannot be read, a message not found): its HTTP status
    and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass
class PoisonOf:
    """Where one function's poison goes, and how to look at it and act on it."""

    function: str
    queue: str
    backend: QueueBackend
    encoding: str

    @property
    def policy(self) -> PoisonPolicy:
        return policy_for(self.backend, self.queue)

    async def look(self) -> dict[str, Any]:
        """Its count and, where the backend can peek, its first messages."""
        policy = self.policy
        view: dict[str, Any] = {"function": self.function, "queue": self.queue, "where": policy.where(self.queue)}
        if policy.unreadable(self.queue) is not None:
            return view | {
                "deadLetter": True,
                "count": await policy.count(self.queue),
                "messages": None,
                "canRequeue": False,
            }
        poison = policy.where(self.queue)
        try:
            count = await self.backend.approximate_count(poison)
            peeked = (
                await self.backend.peek(poison, min(PEEK, self.backend.limits.max_batch))
                if self.backend.capabilities.peek
                else None
            )
        except QueueNotFound:  # made on first need: none yet means no poison
            count, peeked = 0, []
        return view | {
            "deadLetter": False,
            "count": count,
            "canRequeue": True,
            "messages": None if peeked is None else [self._row(m) for m in peeked],
        }

    def _row(self, message: RawMessage) -> dict[str, Any]:
        body = body_text(message.content, self.encoding)
        reason, attempts = failure_of(message)  # None where the backend kept neither (Azure Storage)
        return {
            "id": message.id,
            "dequeueCount": message.dequeue_count,
            "attempts": attempts,
            "lastFailure": reason,
            "inserted": message.insertion_time.isoformat(timespec="seconds"),
            "body": body[:BODY_CHARS],
            "truncated": len(body) > BODY_CHARS,
        }

    async def requeue(self, message_id: str) -> int:
        """Move the message ``message_id`` back to the trigger queue (1), or refuse (404) when it is not there."""
        policy = self.readable()
        try:
            if await policy.requeue_one(self.queue, message_id):
                return 1
        except QueueNotFound:
            pass
        raise ActionRefused(404, f"message {message_id} is not in {policy.where(self.queue)} (any more)")

    async def requeue_all(self, progress: Progress) -> int:
        """Move back to the trigger queue at most what the poison queue held when this began; how many moved."""
        policy = self.readable()
        return await self._drain(policy, True, progress)

    async def purge(self, progress: Progress) -> int:
        """Delete at most what the poison queue held when this began (all of the service's dead-letter queue, which
        it empties itself); how many there were."""
        return await self._drain(self.policy, False, progress)

    async def _drain(self, policy: PoisonPolicy, requeue: bool, progress: Progress) -> int:
        most = await policy.count(self.queue)
        progress(0, most)
        try:
            return await policy.drain(self.queue, requeue=requeue, limit=most, progress=lambda done: progress(done, most))
        except QueueNotFound:  # deleted meanwhile
            return 0

    def readable(self) -> PoisonPolicy:
        """The poison queue, which can be read; refused (409) where poison is the service's dead-letter queue."""
        policy = self.policy
        if (why := policy.unreadable(self.queue)) is not None:
            raise ActionRefused(409, why)
        return policy

"""Each function's poison as the console shows it (cached), and the requeue and purge actions.

The actions are the poison tools' own code (:class:`worker.runtime.poison.PoisonQueue` and
:class:`~worker.runtime.poison.DeadLetterQueue`), so a message moved from the page is moved exactly as
``worker poison requeue`` moves it: put back first, then deleted from the poison queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.backends.queues import QueueBackend, QueueNotFound, RawMessage
from worker.bindings.encoding import body_text
from worker.runtime.poison import DeadLetterQueue, PoisonQueue, policy_for

#: Messages of each poison queue the console shows (where the backend can look without receiving).
PEEK = 20
#: Longest body shown, in characters.
BODY_CHARS = 2000


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
    def policy(self) -> PoisonQueue | DeadLetterQueue:
        return policy_for(self.backend)

    async def look(self) -> dict[str, Any]:
        """Its count and, where the backend can peek, its first messages."""
        policy = self.policy
        view: dict[str, Any] = {"function": self.function, "queue": self.queue, "where": policy.where(self.queue)}
        if isinstance(policy, DeadLetterQueue):
            return view | {"deadLetter": True, "count": await policy.count(self.queue), "messages": None,
                           "canRequeue": False}
        poison = policy.where(self.queue)
        try:
            count = await self.backend.approximate_count(poison)
            peeked = await self.backend.peek(poison, min(PEEK, self.backend.limits.max_batch)) \
                if self.backend.capabilities.peek else None
        except QueueNotFound:  # made on first need: none yet means no poison
            count, peeked = 0, []
        return view | {"deadLetter": False, "count": count, "canRequeue": True,
                       "messages": None if peeked is None else [self._row(m) for m in peeked]}

    def _row(self, message: RawMessage) -> dict[str, Any]:
        body = body_text(message.content, self.encoding)
        return {"id": message.id, "dequeueCount": message.dequeue_count,
                "inserted": message.insertion_time.isoformat(timespec="seconds"),
                "body": body[:BODY_CHARS], "truncated": len(body) > BODY_CHARS}

    async def requeue(self, message_id: str | None) -> int:
        """Move one message (``message_id``) or all back to the trigger queue; how many moved."""
        policy = self.policy
        if isinstance(policy, DeadLetterQueue):
            raise ActionRefused(409, f"poison messages of {self.queue} are in the service's dead-letter queue, which "
                                     "its API cannot read, so they cannot be requeued; purge them, or use poison=host "
                                     "in the connection to keep them in <queue>-poison")
        try:
            if message_id is None:
                return await policy.drain(self.queue, requeue=True)
            if not await policy.requeue_one(self.queue, message_id):
                raise ActionRefused(404, f"message {message_id} is not in {policy.where(self.queue)} (any more)")
        except QueueNotFound:
            return 0
        return 1

    async def purge(self) -> int:
        """Delete every poison message of the function's queue; how many there were."""
        policy = self.policy
        if isinstance(policy, DeadLetterQueue):
            count = await policy.count(self.queue)
            await policy.purge(self.queue)
            return count
        try:
            return await policy.drain(self.queue, requeue=False)
        except QueueNotFound:
            return 0

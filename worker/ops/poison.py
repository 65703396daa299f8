"""Poison-queue tooling: move messages back to their source queue, or purge them.

A poison message is moved back as a new message (new id, dequeue count 0),
exactly as Azure's tools do: the service has no way to move a message. Each
one is put on the source queue before it is deleted from the poison queue, so
an interruption can duplicate a message but never lose one.
"""

from __future__ import annotations

from collections.abc import Callable

from worker.backends.queues import QueueBackend
from worker.runtime.completion import POISON_SUFFIX

#: How long a message taken for requeue or purge stays hidden; it comes back if the command dies.
HOLD_SECONDS = 60


def poison_queue(queue: str) -> str:
    return queue if queue.endswith(POISON_SUFFIX) else queue + POISON_SUFFIX


async def drain_poison(
    backend: QueueBackend,
    queue: str,
    *,
    requeue: bool,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Take up to ``limit`` messages off ``<queue>-poison``; put each back on ``queue`` first if ``requeue``.

    Returns how many were moved (or purged). ``progress`` is called with the running count.
    """
    poison = poison_queue(queue)
    source = poison[: -len(POISON_SUFFIX)]
    if requeue and backend.capabilities.creates_queues:
        await backend.create_queue(source)
    done = 0
    while limit is None or done < limit:
        most = backend.limits.max_batch
        want = most if limit is None else min(most, limit - done)
        batch = await backend.receive(poison, want, HOLD_SECONDS)
        if not batch:
            break
        for message in batch:
            if requeue:
                await backend.put(source, message.content)
            assert message.pop_receipt is not None
            await backend.delete(poison, message.id, message.pop_receipt)
            done += 1
            if progress is not None:
                progress(done)
    return done

"""Where poison goes: one strategy per kind of backend, used alike by completion, start-up and the poison tools.

:func:`policy_for` picks a :class:`PoisonPolicy` from the backend's capabilities.
:class:`PoisonQueue` copies a message to ``<queue>-poison``, then deletes it (Azure, embedded, OCI ``poison=host``).
A requeue puts back before it deletes: an interruption may duplicate a message, never lose one.
Where messages have properties, the copy carries its failure (:func:`failure_of`).
:class:`DeadLetterQueue`: the service's own queue takes it (OCI); the host releases it until then.
Tools ask the policy what it can do (:meth:`PoisonPolicy.unreadable`), never its class.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import structlog

from worker.backends.queues import (
    DeadLetters,
    LeaseGone,
    MessageTooLarge,
    PoisonByQueue,
    QueueBackend,
    QueueNotFound,
    RawMessage,
    RedrivePolicies,
    put_creating,
)
from worker.model import Fate, Finished
from worker.observability.redaction import redact

POISON_SUFFIX = "-poison"
FIFO_SUFFIX = ".fifo"
#: How long a message taken for requeue or purge stays hidden; it comes back if the command dies.
HOLD_SECONDS = 60
#: A poison message delivered again past maxDequeueCount is hidden 2**(n-1) seconds on its n-th such delivery, up
#: to this, before the service's dead-letter queue takes it: a delivery limit above maxDequeueCount costs a few slow
#: round trips, not a burst.
DEAD_LETTER_WAIT_MAX = 60.0
#: The properties of a poison copy that say why it failed last and after how many attempts (where the backend keeps
#: properties): read by :func:`failure_of`, left behind by a requeue.
REASON_PROPERTY = "worker-poison-reason"
ATTEMPTS_PROPERTY = "worker-poison-attempts"
#: The longest reason kept on a copy: SQS counts properties in a message's size.
REASON_CHARS = 1000


def failure_of(message: RawMessage) -> tuple[str | None, int | None]:
    """A poison message's last failure reason and how many attempts it took; None for what its backend did not
    keep (Azure Storage messages have no properties; copies made before they were kept)."""
    attempts = message.properties.get(ATTEMPTS_PROPERTY)
    return message.properties.get(REASON_PROPERTY), int(attempts) if attempts and attempts.isdigit() else None


def _without_failure(properties: Mapping[str, str]) -> dict[str, str] | None:
    """A requeued message's properties: its own, without the last failure the poison copy carried."""
    kept = {k: v for k, v in properties.items() if k not in (REASON_PROPERTY, ATTEMPTS_PROPERTY)}
    return kept or None


class CopyMemo(Protocol):
    """What a completion remembers across its retries: the poison copy already made, if any."""

    poison_copy_id: str | None


class PoisonPolicy(Protocol):
    """Where poison goes, and all the poison tools (``worker poison``, the console) may ask of it: they ask the
    policy what it can do rather than which class it is."""

    #: Where a function's poison goes, for logs and the tools' output.
    def where(self, queue: str) -> str: ...

    def unreadable(self, queue: str) -> str | None:
        """Why the tools cannot read (list, requeue) the poison of ``queue``, only count and purge it; None when
        they can."""

    async def count(self, queue: str) -> int:
        """How many poison messages of ``queue`` there are now."""

    async def purge(self, queue: str, *, limit: int, progress: Callable[[int], None] | None = None) -> int:
        """Delete poison of ``queue`` (at most ``limit`` where it is read one by one); how many were deleted."""

    async def drain(self, queue: str, *, requeue: bool, limit: int, progress: Callable[[int], None] | None = None) -> int:
        """Take up to ``limit`` poison messages of ``queue``, putting each back on ``queue`` first if ``requeue``
        (:class:`Unreadable` where :meth:`unreadable` says why not); how many."""

    async def requeue_one(self, queue: str, message_id: str, *, scan: int = 1000) -> bool:
        """Move one poison message back to ``queue``, False when it is not found (:class:`Unreadable` where
        :meth:`unreadable` says why not)."""

    async def startup_problem(self, queue: str, max_dequeue_count: int) -> str | None:
        """Why poison of ``queue`` could not be kept, found at start; None when it can."""

    async def take(self, item: Finished, reason: str, delete: Callable[[], Awaitable[None]], memo: CopyMemo) -> Fate:
        """Take the message out of circulation (``delete`` deletes it with its lease's receipt)."""


class Unreadable(Exception):  # noqa: N818 -- what the policy says of its poison
    """The tools asked to read poison that its policy keeps where nothing can read it (:meth:`PoisonPolicy.unreadable`
    says why)."""


def _stem(queue: str) -> tuple[str, str]:
    """A queue's name and its FIFO suffix apart: SQS requires ``.fifo`` at the end of every FIFO queue's name."""
    return (queue.removesuffix(FIFO_SUFFIX), FIFO_SUFFIX) if queue.endswith(FIFO_SUFFIX) else (queue, "")


def poison_queue(queue: str) -> str:
    """``<queue>-poison`` (``orders-poison.fifo`` for ``orders.fifo``: a FIFO queue's dead letters must be FIFO
    too), or ``queue`` itself when it is a poison queue already."""
    stem, fifo = _stem(queue)
    return queue if stem.endswith(POISON_SUFFIX) else stem + POISON_SUFFIX + fifo


def source_queue(poison: str) -> str:
    """The queue whose poison queue ``poison`` is (``poison`` itself when it is none)."""
    stem, fifo = _stem(poison)
    return stem.removesuffix(POISON_SUFFIX) + fifo


def is_poison_queue(queue: str) -> bool:
    """A poison queue has no poison queue of its own."""
    return _stem(queue)[0].endswith(POISON_SUFFIX)


async def _redrive_problem(backend: object, queue: str, max_dequeue_count: int) -> str | None:
    """Where the queue's own dead-letter rule disagrees with where its poison goes (a backend with redrive policies)."""
    if isinstance(backend, RedrivePolicies):
        return await backend.poison_problem(queue, max_dequeue_count)
    return None


def policy_for(backend: QueueBackend, queue: str) -> PoisonPolicy:
    """The service's dead-letter queue where the backend hands ``queue``'s poison to it, else ``<queue>-poison``.

    Where each queue's own rule decides (:class:`PoisonByQueue`: SQS without ``poison=``), what was found when it was
    last looked up: at the host's start (:func:`looked_up_policy`), for every trigger queue.
    """
    service = backend.dead_letters_for(queue) if isinstance(backend, PoisonByQueue) else backend.service_dead_letters
    if service and isinstance(backend, DeadLetters):
        return DeadLetterQueue(backend)
    return PoisonQueue(backend)


async def looked_up_policy(backend: QueueBackend, queue: str) -> PoisonPolicy:
    """:func:`policy_for`, with the queue's own rule read now where it decides (the host's start, the tools)."""
    if isinstance(backend, PoisonByQueue):
        await backend.look_up_dead_letters(queue)
    return policy_for(backend, queue)


class PoisonQueue:
    """The host copies poison to ``<queue>-poison`` (made on first need where the service creates queues quickly)."""

    def __init__(self, backend: QueueBackend) -> None:
        self.backend = backend

    def where(self, queue: str) -> str:
        return poison_queue(queue)

    def unreadable(self, queue: str) -> str | None:
        return None

    async def startup_problem(self, queue: str, max_dequeue_count: int) -> str | None:
        if problem := await _redrive_problem(self.backend, queue, max_dequeue_count):
            return problem
        if self.backend.capabilities.creates_queues:
            return None
        try:
            await self.backend.approximate_count(poison_queue(queue))
        except QueueNotFound:
            return f"poison queue {poison_queue(queue)!r} does not exist, and this host does not create queues here"
        return None

    async def take(self, item: Finished, reason: str, delete: Callable[[], Awaitable[None]], memo: CopyMemo) -> Fate:
        """Copy the message's text to ``<queue>-poison`` (as stored: its last checkpoint, if the handler made
        one), then delete the original.

        The copy never expires, so that nothing poisoned disappears unseen; the
        reason goes to the log together with the copy's id as soon as the copy
        exists. A retried completion whose copy was made already only deletes.
        """
        poison = poison_queue(item.queue)
        # Where messages have no time to live of their own, the poison queue's retention applies.
        forever = -1 if self.backend.capabilities.message_options else None
        if memo.poison_copy_id is None:
            text = item.raw.content if item.lease.content is None else item.lease.content  # as stored now
            # Stored where anyone who reads the queue reads it: redacted as the log line is; never empty (SQS
            # refuses an empty property).
            failure = {
                REASON_PROPERTY: redact(reason)[:REASON_CHARS] or "(none given)",
                ATTEMPTS_PROPERTY: str(item.raw.dequeue_count),
            }
            try:
                copy = await put_creating(
                    self.backend,
                    poison,
                    text,
                    time_to_live=forever,
                    **({"properties": failure} if self.backend.capabilities.message_properties else {}),
                )
            except MessageTooLarge:  # the reason did not fit beside the content (SQS): the copy goes without it
                copy = await put_creating(self.backend, poison, text, time_to_live=forever)
            memo.poison_copy_id = copy.id
            # Said before the original is deleted: a process killed in between leaves the original to come
            # back and be poisoned (and logged) again, so no copy in the poison queue is ever without its reason.
            item.log.error(
                "message moved to the poison queue", poison_queue=poison, poison_message_id=copy.id, reason=reason
            )
        await delete()
        return Fate.POISONED

    async def count(self, queue: str) -> int:
        """How many messages ``<queue>-poison`` holds now (visible or not); 0 when it was never made."""
        try:
            return await self.backend.approximate_count(poison_queue(queue))
        except QueueNotFound:  # made on first need: none yet means no poison
            return 0

    async def purge(self, queue: str, *, limit: int, progress: Callable[[int], None] | None = None) -> int:
        """Delete up to ``limit`` messages of ``<queue>-poison`` (see :meth:`drain`)."""
        return await self.drain(queue, requeue=False, limit=limit, progress=progress)

    async def drain(self, queue: str, *, requeue: bool, limit: int, progress: Callable[[int], None] | None = None) -> int:
        """Take up to ``limit`` messages off ``<queue>-poison``; put each back on ``queue`` first if ``requeue``.

        The limit is required, and callers pass what :meth:`count` found when the action began: inside a running
        host a requeued message that fails again comes back to the poison queue, and a drain that went on while
        the queue answered anything would feed itself for ever. Returns how many were moved (or purged).
        ``progress`` is called with the running count.
        """
        backend = self.backend
        poison = poison_queue(queue)
        if requeue and backend.capabilities.creates_queues:
            await backend.create_queue(source_queue(poison))
        done = 0
        while done < limit:
            batch = await backend.receive(poison, min(backend.limits.max_batch, limit - done), HOLD_SECONDS)
            if not batch:
                break
            for message in batch:
                await self._take(poison, message, requeue=requeue)
                done += 1
                if progress is not None:
                    progress(done)
        return done

    async def requeue_one(self, queue: str, message_id: str, *, scan: int = 1000) -> bool:
        """Move the message ``message_id`` of ``<queue>-poison`` back to ``queue``; False when it is not found.

        No service receives one message by id, so the poison queue is received in batches (up to ``scan``
        messages) until it turns up; the others are held meanwhile, so that none is looked at twice, and released
        at once after. As in :meth:`drain`, it is put back (with its properties) before it is deleted from the
        poison queue.
        """
        backend = self.backend
        poison = poison_queue(queue)
        passed: list[RawMessage] = []
        found = False
        try:
            while not found and len(passed) < scan:
                batch = await backend.receive(poison, backend.limits.max_batch, HOLD_SECONDS)
                if not batch:
                    break
                for message in batch:
                    if message.id == message_id and not found:
                        if backend.capabilities.creates_queues:
                            await backend.create_queue(source_queue(poison))
                        await self._take(poison, message, requeue=True)
                        found = True
                    else:
                        passed.append(message)
        finally:
            for message in passed:
                assert message.pop_receipt is not None
                try:
                    await backend.update(poison, message.id, message.pop_receipt, 0)
                except LeaseGone:  # someone else took it meanwhile
                    pass
        return found

    async def _take(self, poison: str, message: RawMessage, *, requeue: bool) -> None:
        """Delete a received poison message, first putting it back on its queue if ``requeue``: with its properties
        (the trace context its producer wrote), where the backend has them, so that its trace goes on."""
        if requeue:
            await self.backend.put(source_queue(poison), message.content, properties=_without_failure(message.properties))
        assert message.pop_receipt is not None
        await self.backend.delete(poison, message.id, message.pop_receipt)


class DeadLetterQueue:
    """The service's own dead-letter queue takes poison after the queue's delivery limit (OCI Queue)."""

    def __init__(self, backend: DeadLetters) -> None:
        self.backend = backend

    def where(self, queue: str) -> str:
        return f"the dead-letter queue of {queue}"

    def unreadable(self, queue: str) -> str | None:
        return (
            f"poison messages of {queue} are in the service's dead-letter queue, which its API cannot read, so "
            "they cannot be requeued; purge them, or use poison=host in the connection to keep them in "
            "<queue>-poison"
        )

    async def startup_problem(self, queue: str, max_dequeue_count: int) -> str | None:
        if problem := await _redrive_problem(self.backend, queue, max_dequeue_count):
            return problem
        limit = await self.backend.dead_letter_limit(queue)
        if limit == 0:
            return (
                f"queue {queue!r} has no dead-letter delivery limit (deadLetterQueueDeliveryCount 0), so a poison "
                "message would come back for ever: set one on the queue, or use poison=host in the connection"
            )
        log = structlog.get_logger("worker.runtime.poison")
        log.info(
            "poison messages go to the queue's dead-letter queue",
            queue=queue,
            delivery_limit=limit,
            max_dequeue_count=max_dequeue_count,
        )
        if limit < max_dequeue_count:
            log.warning(
                "the queue's dead-letter delivery limit is below maxDequeueCount: the service takes a message "
                "before the host has tried it maxDequeueCount times (deliveries released at stops count too)",
                queue=queue,
                delivery_limit=limit,
                max_dequeue_count=max_dequeue_count,
            )
        elif limit > max_dequeue_count:
            log.warning(
                "the queue's dead-letter delivery limit is above maxDequeueCount: each poison message is "
                "delivered and released again, with back-off, until the service takes it",
                queue=queue,
                delivery_limit=limit,
                max_dequeue_count=max_dequeue_count,
                extra_deliveries=limit - max_dequeue_count,
            )
        return None

    async def take(self, item: Finished, reason: str, delete: Callable[[], Awaitable[None]], memo: CopyMemo) -> Fate:
        """Release it: the service moves it to its dead-letter queue once its delivery limit is reached, and each
        delivery until then comes straight back here (the dequeue-count gate) without running the handler. After
        the maxDequeueCount-th delivery it is visible again at once (where the two counts agree, the service takes
        it then); each delivery past it is hidden 1 s, then 2, 4 ... (:data:`DEAD_LETTER_WAIT_MAX` at most), so that
        a delivery limit above maxDequeueCount is not a burst of round trips."""
        receipt = item.lease.pop_receipt
        assert receipt is not None
        past = item.raw.dequeue_count - item.options.max_dequeue_count
        wait = 0.0 if past <= 0 else min(DEAD_LETTER_WAIT_MAX, 2.0 ** (past - 1), item.backend.limits.max_visibility)
        await item.backend.update(item.queue, item.raw.id, receipt, wait)
        item.log.error("message released for the queue's dead-letter queue", reason=reason, visible_in=wait)
        return Fate.RELEASED

    async def count(self, queue: str) -> int:
        return await self.backend.dead_letter_count(queue)

    async def purge(self, queue: str, *, limit: int = 0, progress: Callable[[int], None] | None = None) -> int:
        """Empty the dead-letter queue (the service purges it whole: ``limit`` does not apply); how many it held."""
        count = await self.count(queue)
        await self.backend.purge_dead_letters(queue)
        if progress is not None:
            progress(count)
        return count

    async def drain(self, queue: str, *, requeue: bool, limit: int, progress: Callable[[int], None] | None = None) -> int:
        """A purge; a requeue is refused (:class:`Unreadable`)."""
        if requeue:
            raise Unreadable(self.unreadable(queue))
        return await self.purge(queue, limit=limit, progress=progress)

    async def requeue_one(self, queue: str, message_id: str, *, scan: int = 1000) -> bool:
        raise Unreadable(self.unreadable(queue))

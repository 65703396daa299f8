"""Recycling the process when a sync handler runs past functionTimeout: its side effects never outlive its attempt.

Python cannot stop a thread; released at once, the message could run again while the old handler still writes.
So the :class:`Recycler` keeps that lease, stops receiving, and lets other invocations drain.
It writes the message to the handover file (:mod:`worker.runtime.handover`; even empty, it marks a recycle).
The fresh process settles it first (:func:`settle_handed_over`): released after the delay, or poisoned.
So nothing the handler does lands after its next attempt began; Functions instead kills every invocation.
Without a supervisor there is no handover file: the message comes back when its lease ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import structlog

from worker.backends.queues import QueueBackend, RawMessage
from worker.invocation import Delivery, Invocation
from worker.model import Finished, FunctionSpec, Lease, Outcome, Result
from worker.observability.metrics import Metrics
from worker.runtime.completion import CompletionProcessor
from worker.runtime.handover import HandedOver, write
from worker.runtime.lease import LeaseScheduler
from worker.settings.config import FunctionOptions

log = structlog.get_logger("worker.runtime.recycle")


class Recycler:
    """Holds the messages of sync handlers that ran past functionTimeout until this process exits."""

    def __init__(self, scheduler: LeaseScheduler, stopping: asyncio.Event) -> None:
        self.scheduler = scheduler
        self.stopping = stopping
        #: Why the process is recycled (the first timeout), or None while it is not.
        self.reason: str | None = None
        #: (invocation, message, why its attempt failed) for every message held for the next process.
        self._held: list[tuple[Invocation, Delivery, str]] = []

    def hold(self, inv: Invocation, deliveries: Sequence[Delivery], reason: str) -> None:
        """Keep the leases of ``deliveries`` (the messages ``inv``'s handler had) until the process exits, and stop
        the host receiving so that it can exit."""
        self._held += [(inv, delivery, reason) for delivery in deliveries]
        if self.reason is None:
            self.reason = f"function {inv.function.name}: a sync handler ran past functionTimeout ({reason})"
        # The other invocations finish first (drainTimeout); the next process settles this one's messages.
        inv.log.error("sync handler ran past functionTimeout; recycling the process", reason=reason)
        self.stopping.set()

    async def hand_over(self, path: Path | None) -> int:
        """Stop renewing the held leases and write them to ``path`` with why the process is recycled; returns how
        many were written.

        Without a path (no supervisor), the messages come back when their leases end.
        """
        handed: list[HandedOver] = []
        for inv, delivery, reason in self._held:
            lease, raw = delivery.lease, delivery.raw
            async with lease.lock:
                if lease.is_lost or lease.pop_receipt is None:
                    continue
                self.scheduler.forget(lease)
                lease_ends = time.time() + lease.seconds_left()
                handed.append(
                    HandedOver(
                        inv.function.name,
                        inv.id,
                        raw.id,
                        lease.pop_receipt,
                        raw.dequeue_count,
                        raw.content if lease.content is None else lease.content,
                        raw.insertion_time.isoformat(),
                        lease.message_expires,
                        reason,
                        lease_ends,
                    )
                )
        if path is None:
            log.warning(
                "no supervisor to hand the timed-out messages to; they come back when their leases end", messages=len(handed)
            )
        else:
            write(path, self.reason or "recycled", handed)
        return len(handed)


async def settle_handed_over(
    messages: Sequence[HandedOver],
    functions: Sequence[FunctionSpec],
    opened: Callable[[FunctionSpec], tuple[QueueBackend, FunctionOptions]],
    completion: CompletionProcessor,
    metrics: Metrics,
) -> None:
    """Complete each handed-over message as the failed attempt it was (retry or poison), now that the process that
    ran its handler is gone. ``opened`` gives a function's backend and settings."""
    by_name = {function.name: function for function in functions}
    for message in messages:
        function = by_name.get(message.function)
        if function is None:  # the app changed between the two processes
            log.warning(
                "a handed-over message's function is gone; the message comes back when its lease ends",
                function=message.function,
                message_id=message.message_id,
            )
            continue
        backend, options = opened(function)
        lease = Lease(
            backend,
            function.queue_name,
            message.message_id,
            message.pop_receipt,
            function=function.name,
            dequeue_count=message.dequeue_count,
            invocation_id=message.invocation_id,
            duration=options.lease_duration,
            message_expires=message.message_expires,
        )
        lease.expires_at = time.monotonic() + (message.lease_ends - time.time())
        raw = RawMessage(
            message.message_id,
            message.content,
            message.dequeue_count,
            datetime.fromisoformat(message.insertion_time),
            None,
            None,
            message.pop_receipt,
        )
        item_log = log.bind(
            function=function.name,
            queue=function.queue_name,
            invocation_id=message.invocation_id,
            message_id=message.message_id,
            dequeue_count=message.dequeue_count,
        )
        metrics.inc("recycles", function.name)
        item_log.info("settling a message handed over by the recycled process", reason=message.reason)
        item = Finished(function.name, message.invocation_id, backend, function.queue_name, raw, lease, options, item_log)
        await completion.complete(item, Result(Outcome.FAILED, message.reason))

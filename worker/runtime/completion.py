"""What to do with a message after its invocation: the WebJobs SDK's QueueProcessor (Complete).

To *settle* a message is to delete it, make it visible again, or poison it; only completion settles.
(A handed-over message is settled by the next process: :mod:`worker.runtime.recycle`.)
It carries out the message's :class:`worker.model.Fate`, as :mod:`worker.runtime.verdict` decides it:
success deletes, failure releases after a delay, poison goes to the backend's policy
(:mod:`worker.runtime.poison`), a shutdown releases at once. A lost lease means the message is someone else's:
nothing is done. Middleware hears ``after_completion``, in the same names.
While completions fail for storage, receives are held back (:mod:`worker.runtime.backpressure`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from worker.backends.queues import LeaseGone, MessageNotFound, QueueBackend, TransientError
from worker.middleware import Chain
from worker.model import Fate, Finished, Result
from worker.observability.metrics import Metrics
from worker.runtime import verdict
from worker.runtime.backpressure import StoreTrouble
from worker.runtime.lease import LeaseScheduler
from worker.runtime.poison import poison_queue, policy_for

#: Seconds between attempts of a completion that storage failed (each attempt has the backend's own retries).
COMPLETION_RETRY_INTERVAL = 2.0


class CompletionProcessor:
    def __init__(
        self,
        scheduler: LeaseScheduler,
        metrics: Metrics,
        middleware: Chain,
        trouble: StoreTrouble,
        sent: Callable[[QueueBackend, str], None] | None = None,
    ) -> None:
        """``trouble`` hears of every completion storage fails, and of its end, to hold receives back meanwhile;
        ``sent`` of every copy put in a poison queue, so that this host's listener there runs it at once, as
        Functions' does, rather than at the end of its back-off (up to maxPollingInterval)."""
        self.scheduler = scheduler
        self.metrics = metrics
        self.middleware = middleware
        self.trouble = trouble
        self.sent = sent

    async def complete(self, item: Finished, result: Result) -> None:
        """Delete, release or poison the message, under its lease lock so no renewal races the receipt.

        Storage trouble (:class:`TransientError`, left after the backend's own
        retries) does not give the message up: its lease is renewed again and
        the completion retried every ``COMPLETION_RETRY_INTERVAL`` until storage
        answers or the lease is lost. Letting go would hand a finished message
        to a second run once its lease ended (10 minutes later, by default).
        Any other error is logged and counted; the message then comes back when
        its lease ends, which is the safe direction.
        """
        lease = item.lease
        log = item.log
        progress = _Progress()
        try:
            while True:
                async with lease.lock:
                    if lease.is_lost:
                        log.warning("completion skipped: the lease was lost", outcome=result.outcome.value)
                        self.middleware.after_completion(item, result, Fate.SKIPPED)
                        return
                    self.scheduler.forget(lease)
                    try:
                        fate = await self._apply(item, result, progress)
                        if progress.failed_attempts:
                            log.info("completion done after storage returned", attempts=progress.failed_attempts + 1)
                        self.middleware.after_completion(item, result, fate)
                        return
                    except LeaseGone as exc:
                        log.warning("message changed hands before completion", error=type(exc).__name__)
                        self.middleware.after_completion(item, result, Fate.LEASE_LOST)
                        return
                    except TransientError as exc:
                        self.metrics.inc("storage_errors", item.function)
                        self.trouble.failed(item.backend, lease, str(exc) or type(exc).__name__)
                        progress.failed_attempts += 1
                        if progress.failed_attempts == 1:
                            log.error(
                                "completion failed; keeping the lease and retrying until storage answers",
                                outcome=result.outcome.value,
                                error=str(exc),
                                retry_every=COMPLETION_RETRY_INTERVAL,
                            )
                        self.scheduler.resume(lease)
                    except Exception as exc:
                        log.error(
                            "completion failed; the message returns when its lease ends",
                            outcome=result.outcome.value,
                            error=f"{type(exc).__name__}: {exc}",
                        )
                        self.middleware.after_completion(item, result, Fate.ERROR)
                        return
                await asyncio.sleep(COMPLETION_RETRY_INTERVAL)
        finally:  # however it ends (settled, lease lost, cancelled at shutdown), it no longer holds receives back
            self.trouble.settled(item.backend, lease)

    async def _apply(self, item: Finished, result: Result, progress: _Progress) -> Fate:
        """Give the message the fate its attempt's verdict decides; the fate it had (the poison policy may
        release poison for the service's dead-letter queue to take)."""
        receipt = item.lease.pop_receipt
        assert receipt is not None
        limit = item.options.max_dequeue_count
        fate = verdict.fate(item.queue, item.raw.dequeue_count, limit, result)
        match fate:
            case Fate.DELETED:
                await self._delete(item)
            case Fate.RELEASED:
                await item.backend.update(item.queue, item.raw.id, receipt, 0)
                item.log.info("message released", reason=result.reason)
            case Fate.LEFT:
                item.log.error("message failed on a poison queue; left for its lease to end", reason=result.reason)
            case Fate.POISONED:
                policy = policy_for(item.backend, item.queue)
                fate = await policy.take(item, result.reason, lambda: self._delete(item), progress)
                if fate is Fate.POISONED and self.sent is not None:  # a copy in <queue>-poison, not a release
                    self.sent(item.backend, poison_queue(item.queue))
            case Fate.RETRIED:
                # Never past the message's expiry, which the service would refuse: it is gone then anyway.
                delay = item.lease.within_expiry(self.middleware.retry_delay(item, item.options.visibility_timeout))
                await item.backend.update(item.queue, item.raw.id, receipt, delay)
                item.log.warning(
                    "message failed; it will be retried",
                    reason=result.reason,
                    visible_in=round(delay, 3),
                    attempts_left=limit - item.raw.dequeue_count,
                )
        return fate

    async def _delete(self, item: Finished) -> None:
        """Delete the message with the lease's receipt.

        MessageNotFound while the lease still holds (:meth:`Lease.holds`) means
        an earlier attempt of ours deleted it and its answer was lost (a retried
        call, or a completion retried after a storage failure). That is a
        deletion, not a lost lease.
        """
        lease = item.lease
        assert lease.pop_receipt is not None
        try:
            await item.backend.delete(item.queue, item.raw.id, lease.pop_receipt)
        except MessageNotFound:
            if not lease.holds():
                raise
            item.log.info("message already deleted by an earlier attempt whose answer was lost")


@dataclass(slots=True)
class _Progress:
    """What a completion has done so far, so that a retry after a storage failure does not do it twice."""

    failed_attempts: int = 0
    poison_copy_id: str | None = None

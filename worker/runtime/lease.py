"""Leases on in-flight messages, and the one scheduler that renews them all.

One heap of due times and one sleeping task serve every lease (the Pub/Sub client's model).
A renewal finding the message gone or its receipt changed marks the lease lost; completion skips it.
Any other renewal error is retried sooner, never fatal: the receipt holds until someone else receives.
A handler's checkpoint is an update like a renewal: under the lease's lock, with the current receipt.
No update hides a message past its expiry (:meth:`worker.model.Lease.within_expiry`): OCI and Azure refuse it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable

import structlog

from worker.backends.queues import (
    InvalidArgument,
    LeaseGone,
    MessageNotFound,
    MessageTooLarge,
    QueueError,
    TransientError,
)
from worker.model import CheckpointFailed, Lease
from worker.observability.metrics import Metrics
from worker.waits import wait_set

log = structlog.get_logger("worker.runtime.lease")

#: Soonest a failed renewal is tried again, in seconds.
MIN_RETRY = 0.25
#: Longest wait between renewals that keep failing for storage after the lease's own end.
MAX_RETRY = 30.0
#: Renewals in flight at once (one task each), so that a burst of due leases does not flood storage.
MAX_CONCURRENT_RENEWALS = 64
#: Heap entries of finished leases tolerated beyond the held ones before the heap is rebuilt.
COMPACT_SLACK = 64


class LeaseScheduler:
    """Renews every held lease at ``fraction`` of its duration (the lease's own, else ``duration``), from one task."""

    def __init__(self, duration: float, fraction: float, metrics: Metrics) -> None:
        self.duration = duration
        self.fraction = fraction
        self.metrics = metrics
        self._heap: list[tuple[float, int, Lease]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._held: set[Lease] = set()
        #: Leases past their renewal time, waiting for a renewer.
        self._due: deque[Lease] = deque()
        self._renewers: set[asyncio.Task[None]] = set()
        #: The loop the leases are held on (known from the first one held): handler threads hand checkpoints to it.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Hears of a renewer that ended with an exception (the host's :meth:`worker.runtime.faults.Faults.watch`).
        self.on_fault: Callable[[asyncio.Task[None]], None] | None = None

    @property
    def held(self) -> frozenset[Lease]:
        return frozenset(self._held)

    def _extend(self, lease: Lease, now: float) -> None:
        """Record a lease just taken or renewed for ``duration`` and schedule its next renewal.

        A backend that keeps visibility times in whole seconds (Azure Storage)
        may give a lease up to its ``limits.visibility_resolution`` shorter than asked,
        so that much is taken off before the renewal point is worked out.
        """
        resolution = lease.backend.limits.visibility_resolution if lease.backend is not None else 0.0
        duration = lease.duration or self.duration
        lasts = max(duration - resolution, duration * self.fraction / 2)
        lease.expires_at = now + lasts
        self._schedule(lease, now + lasts * self.fraction)

    def hold(self, lease: Lease) -> None:
        """Start renewing ``lease``, which was just taken for ``duration`` seconds."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        now = time.monotonic()
        lease.acquired_at = now
        lease.keeper = self
        self._held.add(lease)
        self._extend(lease, now)

    def forget(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (its message is completed or released). Caller holds ``lease.lock``.

        Its heap entry is skipped when due. Entries of finished leases would otherwise pile up for
        half a lease (5 minutes by default: tens of thousands at a few hundred messages a second), so
        once they are most of the heap it is rebuilt without them, which costs O(1) per lease overall.
        """
        lease.finished = True
        lease.on_lost = None
        self._held.discard(lease)
        if len(self._heap) > 2 * len(self._held) + COMPACT_SLACK:
            self._heap = [entry for entry in self._heap if not entry[2].finished and entry[0] == entry[2].due]
            heapq.heapify(self._heap)

    def resume(self, lease: Lease) -> None:
        """Renew ``lease`` again, at once: its completion failed and will be retried. Caller holds ``lease.lock``.

        Unlike :meth:`hold`, the lease keeps the expiry it has: renewals may have failed meanwhile.
        """
        lease.finished = False
        lease.completing = True
        self._held.add(lease)
        self._schedule(lease, time.monotonic())

    def _schedule(self, lease: Lease, due: float) -> None:
        earliest = self._heap[0][0] if self._heap else float("inf")
        lease.due = due
        heapq.heappush(self._heap, (due, next(self._seq), lease))
        if due < earliest:
            self._wake.set()

    async def run(self) -> None:
        """Sleep until the earliest due lease, hand all due ones to the renewers, repeat; until cancelled."""
        try:
            while True:
                self._wake.clear()
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    due, _, lease = heapq.heappop(self._heap)
                    if not lease.finished and due == lease.due:
                        self._due.append(lease)
                while self._due and len(self._renewers) < MAX_CONCURRENT_RENEWALS:
                    task = asyncio.create_task(self._renew_due(), name="lease-renewer")
                    self._renewers.add(task)
                    task.add_done_callback(self._renewers.discard)
                    if self.on_fault is not None:
                        task.add_done_callback(self.on_fault)
                timeout = self._heap[0][0] - now if self._heap else None
                await wait_set(self._wake, timeout)
        finally:
            for task in list(self._renewers):
                task.cancel()

    async def _renew_due(self) -> None:
        """One renewer: renew due leases until none is left, then end (so idle renewers cost nothing)."""
        while self._due:
            await self._renew(self._due.popleft())

    async def _update(self, lease: Lease, content: str | None = None) -> bool:
        """Extend ``lease`` by its duration from now (with new ``content``, if given) and take the receipt the
        update returns; the next renewal is rescheduled from now. Caller holds ``lease.lock``.

        Where the message expires sooner, the lease is extended to its expiry and not renewed again; with
        nothing left to extend by, a renewal sends nothing (an update to 0 would show the message to others) and
        this returns False.
        """
        assert lease.backend is not None and lease.pop_receipt is not None
        duration = lease.duration or self.duration
        visibility = lease.within_expiry(duration)
        if visibility <= 0 and content is None:
            return False
        receipt = await lease.backend.update(lease.queue, lease.message_id, lease.pop_receipt, visibility, content)
        lease.pop_receipt = receipt.pop_receipt
        lease.failed_renewals = 0
        now = time.monotonic()
        if visibility < duration:
            lease.expires_at = now + max(0.0, visibility - lease.backend.limits.visibility_resolution)
            log.info(
                "lease held to the message's expiry; no further renewal",
                **lease.log_fields(),
                seconds_left=round(visibility, 3),
            )
            return True
        self._extend(lease, now)
        return True

    async def checkpoint(self, lease: Lease, content: str) -> None:
        """Replace the message's content (wire text) while ``lease`` holds it, extending the lease as a renewal does.

        Refused (:class:`CheckpointFailed`, nothing written) once the lease is
        no longer the handler's: lost, or its completion begun (a handler the
        host gave up on may still be running in its thread). A message found
        taken or gone is lost here just as a renewal would find it, and the
        invocation is told. Storage trouble left after the backend's retries
        is :class:`CheckpointFailed` too; the lease is kept and renewed as
        before. Content the backend refuses as such (too large, or a service
        that cannot change content) is raised as the backend raised it.
        """
        async with lease.lock:
            if lease.finished or lease.completing or lease.is_lost:
                why = "was lost to another receiver" if lease.is_lost else "is over: its completion has begun"
                raise CheckpointFailed(f"message {lease.message_id} was not checkpointed: its lease {why}")
            if lease.within_expiry(lease.duration or self.duration) <= 0:
                raise CheckpointFailed(f"message {lease.message_id} was not checkpointed: it expires now")
            try:
                await self._update(lease, content)
            except LeaseGone as exc:
                self._lose(lease, exc)
                raise CheckpointFailed(
                    f"message {lease.message_id} was not checkpointed: its lease was lost ({type(exc).__name__})"
                ) from exc
            except (InvalidArgument, MessageTooLarge):
                raise
            except QueueError as exc:
                self.metrics.inc("storage_errors", lease.function)
                raise CheckpointFailed(
                    f"message {lease.message_id}: storage failed during the checkpoint, which "
                    f"may or may not have been stored; the lease is kept ({exc})"
                ) from exc
            lease.content = content
        self.metrics.inc("checkpoints", lease.function)

    async def _renew(self, lease: Lease) -> None:
        async with lease.lock:
            if lease.finished:
                return
            try:
                if not await self._update(lease):
                    return
            except LeaseGone as exc:
                if lease.completing and isinstance(exc, MessageNotFound) and lease.holds():
                    # The retried completion's earlier attempt deleted it (see CompletionProcessor._delete): stop
                    # renewing and let the completion find it gone.
                    self.forget(lease)
                    return
                self._lose(lease, exc)
                return
            except Exception as exc:  # storage trouble: keep the lease, try again sooner
                if isinstance(exc, QueueError) and not isinstance(exc, TransientError) and not lease.holds():
                    # An answer that is not an outage (a refusal the backend cannot read as a lost lease) and the
                    # lease's own time is up: the message may be another receiver's now, and asking again would not
                    # change that answer.
                    self._lose(lease, exc)
                    return
                self.metrics.inc("storage_errors", lease.function)
                lease.failed_renewals += 1
                # Until the lease's end, halving the time left; after it, doubling from MIN_RETRY up to MAX_RETRY.
                left = lease.seconds_left()
                retry_in = max(MIN_RETRY, left / 2) if left > 0 else min(MAX_RETRY, MIN_RETRY * 2**lease.failed_renewals)
                (log.warning if lease.failed_renewals == 1 else log.debug)(
                    "lease renewal failed; retrying",
                    **lease.log_fields(),
                    error=f"{type(exc).__name__}: {exc}",
                    retry_in=round(retry_in, 3),
                    failed_in_a_row=lease.failed_renewals,
                )
                self._schedule(lease, time.monotonic() + retry_in)
                return
            lease.renewals += 1
            self.metrics.inc("lease_renewals", lease.function)

    def _lose(self, lease: Lease, exc: Exception) -> None:
        """Someone else owns the message now: tell the invocation, skip its completion."""
        lease.finished = True
        self._held.discard(lease)
        lease.lost.set()
        lease.cancelled.set()
        self.metrics.inc("leases_lost", lease.function)
        log.warning(
            "lease lost; the message now belongs to another receiver",
            **lease.log_fields(),
            reason=type(exc).__name__,
        )
        on_lost, lease.on_lost = lease.on_lost, None  # called once; it refers back to the invocation
        if on_lost is not None:
            on_lost()

"""The lease scheduler's bookkeeping: what it keeps of leases it no longer renews."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

from tests.support import apoll
from worker.backends.embedded.queues import SqliteBackend
from worker.model import Lease
from worker.observability.metrics import Metrics
from worker.runtime.lease import COMPACT_SLACK, LeaseScheduler


async def test_completed_leases_are_let_go_long_before_their_renewal_would_be_due() -> None:
    """With a 10-minute lease the next renewal is 5 minutes off; a busy host completes many messages meanwhile."""
    scheduler = LeaseScheduler(600, 0.5, Metrics())
    refs = []
    for i in range(2000):
        lease = Lease.detached(f"m{i}", "receipt")
        scheduler.hold(lease)
        scheduler.forget(lease)
        refs.append(weakref.ref(lease))
    del lease
    gc.collect()

    alive = sum(1 for ref in refs if ref() is not None)
    assert alive <= COMPACT_SLACK + 1, f"{alive} of 2000 finished leases are still kept"
    assert scheduler.held == frozenset()


async def test_leases_still_held_are_renewed_after_finished_ones_are_let_go(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "q.db")
    await backend.create_queue("work")
    for i in range(10):
        await backend.put("work", f"m{i}")
    scheduler = LeaseScheduler(1, 0.5, Metrics())
    kept = [Lease(backend, "work", raw.id, raw.pop_receipt) for raw in await backend.receive("work", 10, 1)]
    for lease in kept:
        scheduler.hold(lease)
    for i in range(500):  # enough finished leases to have the heap rebuilt several times
        done = Lease.detached(f"done{i}", "receipt")
        scheduler.hold(done)
        scheduler.forget(done)
    running = asyncio.create_task(scheduler.run())
    try:
        await apoll(lambda: _renewed_twice(kept), 10, what="every held lease to be renewed twice")
        assert await backend.receive("work", 32, 1) == [], "a held lease lapsed"
    finally:
        running.cancel()
        await backend.close()
    assert scheduler.held == frozenset(kept)


async def _renewed_twice(leases: list[Lease]) -> bool:
    return all(lease.renewals >= 2 for lease in leases)

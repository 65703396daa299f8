"""A receive of the embedded queue cancelled while its take is under way (the host stopping with a batch receive in
flight) hides none of the messages it takes: they come back at once, dequeue counts as before.

The take is held where a real one waits: another connection holds the file's write lock, as another worker process
committing would, so the take can only run after its caller has gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

from worker.backends.embedded.queues import SqliteBackend

QUEUE = "orders"
BATCH = 16
#: The lease the cancelled receive asks for: far past the test, so a message seen again was released.
LEASE = 600


async def test_a_batch_receive_cancelled_while_its_take_waits_gives_every_message_back(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    sender = SqliteBackend(path)
    receiver = SqliteBackend(path)
    try:
        await sender.create_queue(QUEUE)
        sent = {(await sender.put(QUEUE, f"m{i}")).id for i in range(BATCH)}
        await receiver.approximate_count(QUEUE)  # its connection is open before the lock is taken
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another process's write under way: the take waits for it
            receive = asyncio.ensure_future(receiver.receive(QUEUE, BATCH, LEASE))
            await asyncio.sleep(0.1)  # a stimulus, not a wait for a condition: the take is queued or waiting by now
            receive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(receive, 5)
            assert receive.cancelled(), "the caller leaves at once; the take runs on"
        finally:
            other.execute("ROLLBACK")
            other.close()
        await asyncio.wait_for(receiver.close(), 15)  # waits until what the take took is given back
        again = await sender.receive(QUEUE, 32, 30)
        assert {m.id for m in again} == sent
        assert {m.dequeue_count for m in again} == {1}, "the cancelled take counted no delivery"
    finally:
        await sender.close()

"""Three worker processes on one queue, handlers that outlive several leases: never two at once on one message.

The handler (tests/apps/exclusive.py) takes a row in a lock table whose primary key is the
message id and holds it for more than two lease lengths; a second handler of the same message
while the first still runs fails to insert and records an overlap. Renewal must keep every
lease for the whole run, on the embedded queue (three processes sharing one SQLite file) and on
Azurite (where visibility has whole-second resolution).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import uuid
from pathlib import Path

import pytest

from tests.host.processes import WorkerProcess, write_host_yaml
from tests.support import apoll, poll
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

MESSAGES = 18
WORKERS = 3
THREADS = 3
LEASE = "4s"
HOLD_SECONDS = 9


@pytest.mark.subprocess
async def test_no_message_is_ever_handled_by_two_workers_at_once(tmp_path: Path, connection: str | None) -> None:
    queue = f"compete-{uuid.uuid4().hex[:8]}"
    record_db = tmp_path / "locks.sqlite3"
    sender = open_backend(connection, tmp_path)
    await sender.create_queue(queue)
    await asyncio.gather(*(sender.put(queue, encode(f"m{i}", "base64")) for i in range(MESSAGES)))
    config = write_host_yaml(
        tmp_path,
        queues={"batchSize": THREADS, "newBatchThreshold": 0},
        worker={"leaseDuration": LEASE, "handlerThreads": THREADS, "maxInFlight": THREADS},
    )
    env = {"RECORD_DB": str(record_db), "TRIGGER_QUEUE": queue, "HOLD_SECONDS": str(HOLD_SECONDS)}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    workers = [WorkerProcess(config, env, name=f"worker{i}", app="tests.apps.exclusive:app").start() for i in range(WORKERS)]
    try:
        for worker in workers:
            worker.wait_for_log("host started")
        poll(
            lambda: len(rows(record_db, "SELECT DISTINCT message_id FROM finished")) >= MESSAGES,
            120,
            what="every message to be handled",
        )

        async def emptied() -> bool:
            return await sender.approximate_count(queue) == 0

        await apoll(emptied, 30, what="every message to be deleted")
        for worker in workers:
            assert worker.stop(signal.SIGTERM) == 0
        totals = [worker.totals() for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
        await sender.delete_queue(queue)
        await sender.close()

    overlaps = rows(record_db, "SELECT * FROM overlaps")
    finished = rows(record_db, "SELECT message_id, pid, event FROM finished")
    by_worker = sorted(sum(1 for r in finished if r[1] == w.host_pid) for w in workers)
    renewals = sum(t.get("lease_renewals", 0) for t in totals)
    print(
        f"\ncompeting workers: sent {MESSAGES}, handled {len(finished)} (per worker {by_worker}), "
        f"overlaps {len(overlaps)}, leases lost {sum(t.get('leases_lost', 0) for t in totals)}, "
        f"renewals {renewals}, lost {MESSAGES - len({r[0] for r in finished})}"
    )
    assert overlaps == [], f"handled by two workers at once: {overlaps}"
    assert sorted(r[2] for r in finished) == ["done"] * MESSAGES, "a handler was cancelled or a message ran twice"
    assert sum(t["succeeded"] for t in totals) == MESSAGES
    assert all(t.get("leases_lost", 0) == 0 for t in totals)
    assert renewals >= 2 * MESSAGES, "handlers did not outlive their leases"
    assert by_worker[0] > 0, "one worker took no part, so nothing competed"


def rows(db_path: Path, query: str) -> list[tuple]:
    if not db_path.exists():
        return []
    with sqlite3.connect(db_path, timeout=30) as db:
        try:
            return db.execute(query).fetchall()
        except sqlite3.OperationalError:  # tables not made yet
            return []

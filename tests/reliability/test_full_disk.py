"""A full disk under the embedded queue: the worker holds back receives until it can settle what it finished.

The fault is real: the queue file lives on a small tmpfs, and the test fills the rest of it with a file of
its own, so SQLite's writes (deletes, releases, lease renewals, sends) fail with "database or disk is full"
exactly as on a full volume; removing the file ends it. Handlers finish during it and their deletions fail;
the disk stays full past their leases. Once it has room again, a worker that went on receiving would take
those finished messages back (their leases have ended) before its completions, retried every 2 s, delete
them: they would run twice. Held back, it settles them first.

Mounting a tmpfs needs root (or CAP_SYS_ADMIN); elsewhere the test is skipped, saying so.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import free_port, get, poll
from worker.backends.queues import TransientError
from worker.backends.registry import SQLITE_PREFIX, open_backend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

QUEUE = "disk"
MESSAGES = 16
#: Room for the queue file and its write-ahead log until the filler takes the rest.
DISK_SIZE = "8m"
HOLDING = "completions are failing on storage; holding back receives until they succeed"
RESUMING = "completions succeed again; receiving resumes"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_SIZE mounted for this test, unmounted after it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(disk)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last page with one file; removing the file frees it."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as file:
        for chunk in (1 << 20, 1 << 16, 1 << 12):
            try:
                while True:
                    file.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == 28, exc  # ENOSPC: full, at this chunk size
    return filler


def in_queue(queue_file: Path, visible_by: float | None = None) -> set[str]:
    """The messages in the queue file (visible by ``visible_by``, when given); read-only: reads work on a full disk."""
    with closing(sqlite3.connect(f"file:{queue_file}?mode=ro", uri=True, timeout=30)) as db:
        rows = db.execute("SELECT id FROM messages WHERE visible <= ?", (visible_by or float("inf"),)).fetchall()
    return {row[0] for row in rows}


def lapsed(queue_file: Path, finished: set[str]) -> int:
    """How many of ``finished`` are still in the queue with their leases ended."""
    return len(in_queue(queue_file, time.time()) & finished)


def storage_errors(port: int) -> float:
    """The worker's count of failed storage calls, from /metrics."""
    text = get(port, "/metrics")[1]
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("worker_storage_errors_total{"))


def done(record_db: Path) -> set[str]:
    return {row["message_id"] for row in attempts(record_db) if row["event"] == "done"}


async def test_a_full_disk_holds_receives_back_until_finished_messages_are_settled(tmp_path: Path, small_disk: Path) -> None:
    queue_file = small_disk / "queues.sqlite3"
    connection = f"{SQLITE_PREFIX}{queue_file}"
    record_db = tmp_path / "attempts.sqlite3"
    sender = open_backend(connection, tmp_path)
    await sender.create_queue(QUEUE)
    sent = {(await sender.put(QUEUE, encode(f"m{i}", "base64"))).id for i in range(MESSAGES)}
    port = free_port()
    # Leases of 2 s, so that they end while the disk is full; handlers of 1 s, so that some finish meanwhile. With
    # half the messages in flight the listener has room, and long-polls the emptied queue: only the hold-back
    # keeps it from taking the finished messages whose leases end.
    config = write_host_yaml(
        tmp_path,
        {"batchSize": 8, "newBatchThreshold": 16},
        {"httpPort": port, "handlerThreads": 8, "leaseDuration": "2s", "drainTimeout": "5s"},
    )
    env = {
        "RECORD_DB": str(record_db),
        "HANDLER_MODE": "hold",
        "HOLD_SECONDS": "1",
        "TRIGGER_QUEUE": QUEUE,
        "AzureWebJobsStorage": connection,
    }
    worker = WorkerProcess(config, env).start()
    try:
        worker.wait_for_log("host started")
        poll(lambda: len(done(record_db)) >= 8, 30, what="8 messages handled before the disk fills")

        filler = fill(small_disk)
        with pytest.raises(TransientError, match="full"):  # a send is refused, so nothing is lost
            await sender.put(QUEUE, encode("refused", "base64"))
        status, body = poll(lambda: (r := get(port, "/readyz"))[0] == 503 and r, 30, what="/readyz to hold back")
        assert any(p.startswith("receives held back:") and "disk is full" in p for p in json.loads(body)["problems"])
        # Past the leases of messages that finished and could not be deleted: now they are visible to a receive.
        poll(
            lambda: 0 < len(unsettled := done(record_db) & in_queue(queue_file)) == lapsed(queue_file, unsettled),
            30,
            interval=0.2,
            what="the leases of the finished messages to end",
        )
        # And then the disk stays full for 40 more failed storage calls (renewals every 0.25 s, completions every 2 s).
        failures = storage_errors(port)
        poll(lambda: storage_errors(port) >= failures + 40, 30, interval=0.2, what="40 more failed storage calls")

        filler.unlink()
        poll(lambda: len(done(record_db)) == MESSAGES, 60, interval=0.2, what="every message handled")
        poll(lambda: get(port, "/readyz")[0] == 200, 30, what="/readyz ready again")
        assert worker.stop(signal.SIGTERM) == 0
    finally:
        worker.kill()
        await sender.close()

    events = Counter(line.get("event") for line in worker.lines())
    assert (events[HOLDING], events[RESUMING]) == (1, 1), worker.log_path.read_text()[-4000:]
    # No receive while held back, but the long poll already waiting when the trouble began (it wakes when the first
    # lease ends, and its take fails on the full disk).
    after_hold = [line.get("event") for line in worker.lines()]
    after_hold = after_hold[after_hold.index(HOLDING) : after_hold.index(RESUMING)]
    assert after_hold.count("receive failed; backing off") <= 1, after_hold
    # Every message handled once, and settled: handled = deleted + still leased + released, the last two none.
    starts = Counter(row["message_id"] for row in attempts(record_db) if row["event"] == "start")
    assert set(starts) == done(record_db) == sent
    assert [message for message, count in starts.items() if count > 1] == []
    with closing(sqlite3.connect(queue_file)) as db:
        left = db.execute("SELECT visible > ? FROM messages", (time.time(),)).fetchall()
    leased, released = sum(row[0] for row in left), sum(not row[0] for row in left)
    deleted = len(sent) - len(left)
    assert (len(done(record_db)), deleted, leased, released) == (MESSAGES, MESSAGES, 0, 0)

"""An app for the fault tests: its handler records each success in SQLite, so that a duplicate is visible.

Table ``handled`` has UNIQUE (message_id, outcome): the first success of a message goes there;
any later success of the same message is refused by the constraint and goes to ``duplicates``
instead, rather than failing the handler (a failing handler would be retried and muddle the
count). Each row keeps the delivery's dequeue count, which is also on every log line the worker
writes about that delivery, so the test can match a duplicate to the lease the worker lost.

Some messages are slow, so that their leases are renewed while the handler works and a fault can
cost the worker a lease it still holds: with ``SLOW_EVERY=n`` (0: none), every message whose body
ends in a number divisible by n works ``SLOW_SECONDS`` before recording. The work deliberately
does not watch ``msg.cancelled``: a handler that finishes its work after losing the lease is
exactly what makes a duplicate success, which is what the fault tests count.

Environment: ``RECORD_DB`` (the file; the tables are made at import, when ``worker run``
loads the app), ``TRIGGER_QUEUE`` (default ``work``), ``SLOW_EVERY``, ``SLOW_SECONDS``.
"""

from __future__ import annotations

import os
import sqlite3
import time

from worker import QueueMessage, WorkerApp

app = WorkerApp()

SCHEMA = """
CREATE TABLE IF NOT EXISTS handled (
    message_id TEXT NOT NULL, outcome TEXT NOT NULL, dequeue_count INTEGER, lease_lost INTEGER, pid INTEGER, at REAL,
    UNIQUE (message_id, outcome)
);
CREATE TABLE IF NOT EXISTS duplicates (
    message_id TEXT NOT NULL, outcome TEXT NOT NULL, dequeue_count INTEGER, lease_lost INTEGER, pid INTEGER, at REAL
);
"""


def connect(path: str) -> sqlite3.Connection:
    """WAL with synchronous=NORMAL: 16 handler threads commit small rows without an fsync each, still durable enough
    for a test (the rows survive the worker process; only an OS crash could lose the last ones)."""
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def _create() -> None:
    path = os.environ.get("RECORD_DB")
    if path:
        with connect(path) as db:
            db.executescript(SCHEMA)


_create()


@app.function_name("unique")
@app.queue_trigger(arg_name="msg", queue_name=os.environ.get("TRIGGER_QUEUE", "work"))
def unique(msg: QueueMessage) -> None:
    slow_every = int(os.environ.get("SLOW_EVERY", "0"))
    number = msg.get_body().decode().rpartition("-")[2]
    if slow_every and number.isdigit() and int(number) % slow_every == 0:
        time.sleep(float(os.environ.get("SLOW_SECONDS", "1")))  # the handler's work, blind to msg.cancelled on purpose
    # lease_lost: whether the worker had already told the handler that the message was no longer its own.
    row = (msg.id, "success", msg.dequeue_count, int(msg.lease_lost.is_set()), os.getpid(), time.time())
    db = connect(os.environ["RECORD_DB"])
    try:
        with db:
            try:
                db.execute("INSERT INTO handled VALUES (?, ?, ?, ?, ?, ?)", row)
            except sqlite3.IntegrityError:  # this message has succeeded before: a duplicate, kept for the test to judge
                db.execute("INSERT INTO duplicates VALUES (?, ?, ?, ?, ?, ?)", row)
    finally:
        db.close()

"""An app for the competing-workers test: a lock table that fails on overlap, and handlers that outlive leases.

On start the handler inserts its message id into ``holding`` (PRIMARY KEY): if another worker
is handling the same message at that moment, the insert fails and an ``overlaps`` row records
both process ids. The handler then works for ``HOLD_SECONDS`` (several lease lengths, so the
lease must be renewed), removes its row and records the message as done. A handler told that
its lease was lost (``msg.cancelled``) stops early and records that instead.

Environment: ``RECORD_DB`` (the file), ``TRIGGER_QUEUE`` (default ``work``), ``HOLD_SECONDS``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing

from worker import QueueMessage, WorkerApp

app = WorkerApp()

SCHEMA = """
CREATE TABLE IF NOT EXISTS holding (message_id TEXT PRIMARY KEY, pid INTEGER, since REAL);
CREATE TABLE IF NOT EXISTS overlaps (message_id TEXT, pid INTEGER, holder_pid INTEGER, at REAL);
CREATE TABLE IF NOT EXISTS finished (message_id TEXT, body TEXT, pid INTEGER, event TEXT, started REAL, ended REAL);
"""


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ["RECORD_DB"], timeout=30, isolation_level=None)
    db.executescript(SCHEMA)
    return db


@app.function_name("exclusive")
@app.queue_trigger(arg_name="msg", queue_name=os.environ.get("TRIGGER_QUEUE", "work"))
def exclusive(msg: QueueMessage) -> None:
    started = time.time()
    with closing(_db()) as db:
        try:
            db.execute("INSERT INTO holding VALUES (?, ?, ?)", (msg.id, os.getpid(), started))
        except sqlite3.IntegrityError:
            holder = db.execute("SELECT pid FROM holding WHERE message_id = ?", (msg.id,)).fetchone()
            db.execute("INSERT INTO overlaps VALUES (?, ?, ?, ?)", (msg.id, os.getpid(), holder and holder[0], started))
            return
    cancelled = msg.cancelled.wait(float(os.environ.get("HOLD_SECONDS", "5")))
    with closing(_db()) as db:
        db.execute("DELETE FROM holding WHERE message_id = ? AND pid = ?", (msg.id, os.getpid()))
        db.execute(
            "INSERT INTO finished VALUES (?, ?, ?, ?, ?, ?)",
            (msg.id, msg.get_body().decode(), os.getpid(), "cancelled" if cancelled else "done", started, time.time()),
        )

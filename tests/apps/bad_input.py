"""An app for the bad-input reliability tests: one sync handler that reads every message as JSON.

It does what a typical handler does first, ``msg.get_json()``, so that bodies
which are not UTF-8 or not JSON fail where real handlers fail. A job
``{"kind": "block", "seconds": S}`` blocks its thread for S seconds without
looking at ``msg.cancelled``, as a handler stuck in a blocking call that the
host cannot interrupt: it must run past ``functionTimeout`` and keep its thread.

Every call is recorded in a SQLite table (``RECORD_DB``) with the thread it ran
on, so that the test can tell which messages reached the handler, how often,
and which threads were blocked when a message completed. ``TRIGGER_QUEUE``
names the queue (default ``intake``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from worker import QueueMessage, WorkerApp

app = WorkerApp()

QUEUE = os.environ.get("TRIGGER_QUEUE", "intake")


def record(message: QueueMessage, event: str) -> None:
    """One row per step, written at once so that a step of a thread still blocked is visible to the test."""
    with sqlite3.connect(os.environ["RECORD_DB"], timeout=30) as db:
        # WAL: the test reads this file while handlers write it; readers then never hold a writer back past the
        # short functionTimeout these tests use. synchronous=NORMAL: a commit waits on no fsync (WAL syncs at its
        # checkpoints), which on a disk busy with the suite's image builds can take past that 1 s before the handler's
        # first row was written; a row committed survives the process being killed either way.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS calls (message_id TEXT, dequeue_count INTEGER, event TEXT, at REAL, "
            "thread TEXT, body BLOB)"
        )
        db.execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?)",
            (
                message.id,
                message.dequeue_count,
                event,
                time.time(),
                f"{os.getpid()}/{threading.current_thread().name}",
                message.get_body(),
            ),
        )


@app.function_name("intake")
@app.queue_trigger(arg_name="msg", queue_name=QUEUE)
def intake(msg: QueueMessage) -> None:
    record(msg, "start")
    job = msg.get_json()  # ValueError for a body that is not UTF-8 or not JSON (an empty one included)
    if job.get("kind") == "block":
        record(msg, "block-start")
        time.sleep(float(job["seconds"]))  # deliberately deaf to msg.cancelled: the host cannot stop this thread
        record(msg, "block-end")
        return
    record(msg, "done")

"""An app for the process tests: its handler records each attempt in a SQLite table the test reads.

Set by environment variables, so that one module serves every test:
``RECORD_DB`` (the table's file), ``TRIGGER_QUEUE`` (default ``work``),
``HANDLER_MODE``: ``ok``; ``fail`` (always raise); ``hold`` (run for
``HOLD_SECONDS``, returning early if the host cancels); ``hold-first`` (hold on
the first delivery, succeed on later ones); ``gate`` (run until the file
``GATE_FILE`` exists, or at most ``HOLD_SECONDS``: the test decides when the
handler ends). Whatever the mode, a message whose body starts with
``FAIL_PREFIX`` (when set) always raises, and one whose body is ``EXIT <code>``
ends the process with ``os._exit(code)`` (once ``GATE_FILE`` exists, when set).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from worker import QueueMessage, WorkerApp

app = WorkerApp()


def record(message: QueueMessage, event: str) -> None:
    with sqlite3.connect(os.environ["RECORD_DB"], timeout=30) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS attempts (pid INTEGER, message_id TEXT, dequeue_count INTEGER, "
            "event TEXT, at REAL, body TEXT)"
        )
        db.execute(
            "INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?)",
            (os.getpid(), message.id, message.dequeue_count, event, time.time(), message.get_body().decode()),
        )


@app.function_name("recorder")
@app.queue_trigger(arg_name="msg", queue_name=os.environ.get("TRIGGER_QUEUE", "work"))
def recorder(msg: QueueMessage) -> None:
    record(msg, "start")
    mode = os.environ.get("HANDLER_MODE", "ok")
    word, _, code = msg.get_body().decode().partition(" ")
    if word == "EXIT":
        if "GATE_FILE" in os.environ and not gate_opened(msg):
            return
        os._exit(int(code))
    prefix = os.environ.get("FAIL_PREFIX")
    if mode == "fail" or (prefix and msg.get_body().decode().startswith(prefix)):
        raise RuntimeError("this handler always fails")
    if mode == "hold" or (mode == "hold-first" and msg.dequeue_count == 1):
        if msg.cancelled.wait(float(os.environ.get("HOLD_SECONDS", "60"))):
            record(msg, "cancelled")
            return
    if mode == "gate" and not gate_opened(msg):
        return
    record(msg, "done")


def gate_opened(msg: QueueMessage) -> bool:
    """Wait until the file ``GATE_FILE`` exists (at most ``HOLD_SECONDS``); False if the host cancelled first."""
    gate, deadline = Path(os.environ["GATE_FILE"]), time.monotonic() + float(os.environ.get("HOLD_SECONDS", "60"))
    while not gate.exists() and time.monotonic() < deadline:
        if msg.cancelled.wait(0.02):
            record(msg, "cancelled")
            return False
    return True

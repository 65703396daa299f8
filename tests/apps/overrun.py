"""An app for the recycling tests: a sync handler that runs past functionTimeout and then writes a file.

``RECORD_DB`` is the attempts table (as tests/apps/recording.py writes it) and
``OVERRUN_DIR`` the folder of the files the test and the handlers signal with:

- ``slow`` (queue ``slow``): on its first delivery, waits until the test writes
  ``go`` (long past functionTimeout: it ignores ``msg.cancelled``, as a handler
  stuck in a blocking call would) and then writes ``late-<message id>``, the
  side effect that must never land; later deliveries just succeed.
- ``other`` (queue ``other``): waits until the test writes ``release-other``,
  so that it is in flight when ``slow`` times out, and then succeeds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.apps.recording import record
from worker import QueueMessage, WorkerApp

app = WorkerApp()


def _wait_for(name: str) -> None:
    """Block this thread until the test writes ``name`` (a plain loop, not an event the host could set)."""
    while not (Path(os.environ["OVERRUN_DIR"]) / name).exists():
        time.sleep(0.05)


@app.queue_trigger(arg_name="msg", queue_name="slow")
def slow(msg: QueueMessage) -> None:
    record(msg, "start")
    if msg.dequeue_count == 1:
        _wait_for("go")
        (Path(os.environ["OVERRUN_DIR"]) / f"late-{msg.id}").write_text(str(time.time()), encoding="utf-8")
        record(msg, "late")
        return
    record(msg, "done")


@app.queue_trigger(arg_name="msg", queue_name="other")
def other(msg: QueueMessage) -> None:
    record(msg, "start")
    _wait_for("release-other")
    record(msg, "done")

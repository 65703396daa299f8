"""An app whose process, once its host has stopped, holds its exit until a file appears: the moment in which a
late copy of a stop signal can still arrive, held open for as long as a test needs.

``HELD_FILE`` is made when the hold begins (at the interpreter's exit, after ``worker run`` has returned);
``GATE_FILE`` ends it (after 60 s at most). Its one function is never given a message: the tests stop an idle host,
whose drain takes milliseconds, which is when a late copy comes after the host has stopped listening.
"""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path

from worker import QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="held-exit")
def idle(msg: QueueMessage) -> None:
    """Never called."""


def _hold() -> None:
    Path(os.environ["HELD_FILE"]).touch()
    gate = Path(os.environ["GATE_FILE"])
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


atexit.register(_hold)

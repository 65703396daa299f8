"""An app whose handler does what the host must outlive: close its stderr, or leave a process behind.

Each attempt is recorded as in ``tests/apps/recording.py`` (``RECORD_DB``). A message's body says what its handler
does besides:

- ``close-stderr``: closes descriptor 2, as daemonising code and some libraries do;
- ``reuse-stderr``: closes descriptor 2 and opens ``REUSED_FILE``, which the system gives the lowest free
  descriptor, 2, and keeps it open; writes the descriptor it got to ``FD_FILE``, and a line to ``sys.stderr``.
  (Closed once, 2 does not stay free for long: SQLite, say, opens /dev/null there rather than put a database on it.)
- ``fork``: forks a child that ignores SIGTERM, holds the embedded queue file (``QUEUE_FILE``) open and sleeps,
  and writes its pid to ``PID_FILE``; the handler itself returns at once;
- anything else: nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import IO

from tests.apps.recording import record
from worker import QueueMessage, WorkerApp

app = WorkerApp()

#: The file opened as descriptor 2, kept open for the process's life.
_kept: list[IO[str]] = []


@app.function_name("unruly")
@app.queue_trigger(arg_name="msg", queue_name="work")
def unruly(msg: QueueMessage) -> None:
    record(msg, "start")
    body = msg.get_body().decode()
    if body == "close-stderr":
        os.close(2)
    elif body == "reuse-stderr":
        os.close(2)
        _kept.append(open(os.environ["REUSED_FILE"], "w", encoding="utf-8"))  # noqa: SIM115 -- kept open
        Path(os.environ["FD_FILE"]).write_text(str(_kept[-1].fileno()), encoding="utf-8")
        print("a handler's line on sys.stderr after descriptor 2 was closed", file=sys.stderr, flush=True)
    elif body == "fork":
        pid = os.fork()
        if pid == 0:
            _leftover()
        Path(os.environ["PID_FILE"]).write_text(str(pid), encoding="utf-8")
    record(msg, "done")


def _leftover() -> None:
    """The forked child: ignore SIGTERM, hold the queue file, sleep; never return into the host's code."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(os.environ["QUEUE_FILE"], "rb"):
            time.sleep(600)
    finally:
        os._exit(0)

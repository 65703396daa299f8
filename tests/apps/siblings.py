"""An app that loads only when its supervisor's other processes started before process 0 loaded it.

Process 0's import waits (up to ``SIBLINGS_WAIT`` seconds) until its
supervisor has ``SIBLINGS_EXPECTED`` children, and raises otherwise, which
refuses the app. A supervisor that starts the others only once the app is
loaded never gets there. Every import appends its process id to the file
``SIBLINGS_IMPORTS`` names, so that a test sees who imported the app.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from worker import QueueMessage, WorkerApp


def children(parent: int) -> int:
    """How many processes have ``parent`` as their parent, from /proc (Linux)."""
    count = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The command name (2nd field) may hold spaces: the parent pid is the 2nd field after its ")".
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended
            continue
        count += int(fields[1]) == parent
    return count


with open(os.environ["SIBLINGS_IMPORTS"], "a", encoding="utf-8") as imports:
    imports.write(f"{os.getpid()}\n")

if os.environ.get("WORKER_PROCESS_INDEX") == "0":
    supervisor, expected = int(os.environ["WORKER_SUPERVISOR_PID"]), int(os.environ["SIBLINGS_EXPECTED"])
    deadline = time.monotonic() + float(os.environ.get("SIBLINGS_WAIT", "20"))
    while (running := children(supervisor)) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"process 0 loaded the app with {running} of {expected} processes started")
        time.sleep(0.05)

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="siblings")
def noop(msg: QueueMessage) -> None:
    """Nothing: the test sends no message."""

"""An app for the process tests: each message's body written to a blob of its own, ``copies/<body>.txt``.

A blob output opens a file of the embedded blob store for every message: the function that failed with "Too many
open files" when idle connections to the endpoints had taken the process's file descriptors.
"""

from __future__ import annotations

import os

from worker import Out, WorkerApp

app = WorkerApp()


@app.function_name("copy")
@app.queue_trigger(arg_name="msg", queue_name=os.environ.get("TRIGGER_QUEUE", "work"))
@app.blob_output(arg_name="out", path="copies/{queueTrigger}.txt")
def copy(msg: str, out: Out[str]) -> None:
    out.set(msg)

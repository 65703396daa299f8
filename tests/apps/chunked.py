"""An app for the resume test: a sync handler that works through a job in chunks and checkpoints after each one.

The message is JSON ``{"chunks": N, "next": k}``: chunks ``k`` to ``N - 1`` are left to do. Each attempt records
its start (with the body it read), each chunk it did, and each checkpoint once stored, in the table of
tests/apps/recording.py (``RECORD_DB``). With ``HANG_AT_CHUNK`` set, the handler stops before that chunk and waits
there, as work that takes long would, so that the test can kill the process mid-way at a known point.
"""

from __future__ import annotations

import os

from tests.apps.recording import record
from worker import QueueMessage, WorkerApp

app = WorkerApp()


@app.function_name("chunked")
@app.queue_trigger(arg_name="msg", queue_name=os.environ.get("TRIGGER_QUEUE", "work"), checkpoints=True)
def chunked(msg: QueueMessage) -> None:
    record(msg, "start")
    job = msg.get_json()
    hang_at = int(os.environ.get("HANG_AT_CHUNK", "-1"))
    for chunk in range(job["next"], job["chunks"]):
        if chunk == hang_at and msg.cancelled.wait(120):
            return
        record(msg, f"chunk {chunk}")
        msg.checkpoint({**job, "next": chunk + 1})
        record(msg, f"checkpointed {chunk}")

"""An app for the context and log tests: handlers log through logging and structlog and record their Context.

Each handler writes one JSON line per call to ``RECORD_FILE``: the context's
fields as the handler saw them, so that the test can match them to the
worker's own log lines.
"""

from __future__ import annotations

import json
import logging
import os
import threading

import structlog

from worker import Context, QueueMessage, WorkerApp

app = WorkerApp()
_lock = threading.Lock()


def record(context: Context, body: str) -> None:
    row = {
        "body": body,
        "invocation_id": context.invocation_id,
        "function_name": context.function_name,
        "function_directory": context.function_directory,
        "trace_parent": context.trace_context.trace_parent,
        "retry_count": context.retry_context.retry_count,
        "max_retry_count": context.retry_context.max_retry_count,
        "thread_invocation_id": context.thread_local_storage.invocation_id,
    }
    with _lock, open(os.environ["RECORD_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


@app.function_name("sync_logger")
@app.queue_trigger(arg_name="msg", queue_name="sync-logs")
def sync_logger(msg: str, context: Context) -> None:
    record(context, msg)
    logging.getLogger(__name__).info("sync handler says %s", msg)
    logging.info("root logger says %s", msg)
    if msg.startswith("fail"):
        raise RuntimeError("asked to fail")


@app.function_name("async_logger")
@app.queue_trigger(arg_name="msg", queue_name="async-logs")
async def async_logger(msg: QueueMessage, context: Context) -> None:
    body = msg.get_body().decode()
    record(context, body)
    structlog.get_logger("handler").info("async handler says", body=body)
    logging.getLogger("handler.stdlib").warning("async stdlib says %s", body)

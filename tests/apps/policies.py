"""An app for the per-function policy tests: each function records its attempts (tests/apps/recording.py's table).

``capped`` runs one second per message (its host.yaml gives it maxConcurrency);
``flaky`` and ``steady`` always fail (one with a retry policy and its own
maxDequeueCount, one on the global settings); ``doomed`` raises Poison;
``sorter`` (cardinality many) poisons the messages whose body starts with
``bad`` and keeps the rest.
"""

from __future__ import annotations

import time

from tests.apps.recording import record
from worker import Poison, QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="capped")
def capped(msg: QueueMessage) -> None:
    record(msg, "start")
    time.sleep(1)
    record(msg, "end")


@app.queue_trigger(arg_name="msg", queue_name="flaky")
def flaky(msg: QueueMessage) -> None:
    record(msg, "flaky")
    raise RuntimeError("flaky fails every time")


@app.queue_trigger(arg_name="msg", queue_name="steady")
def steady(msg: QueueMessage) -> None:
    record(msg, "steady")
    raise RuntimeError("steady fails every time")


@app.queue_trigger(arg_name="msg", queue_name="doomed")
def doomed(msg: QueueMessage) -> None:
    record(msg, "doomed")
    raise Poison(f"order {msg.get_body().decode()} refers to a customer that does not exist")


@app.queue_trigger(arg_name="msgs", queue_name="sorter", cardinality="many")
def sorter(msgs: list[QueueMessage]) -> None:
    for msg in msgs:
        record(msg, "sorter")
        if msg.get_body().startswith(b"bad"):
            msg.fail("malformed record", poison=True)

"""An app for the Spark readiness test: a Spark function (``spark=True``) and one without Spark, each noting in
``RESULT_FILE`` when it ran (the Spark one with its job's result), so that the test sees which ran first."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from worker import QueueMessage, WorkerApp, spark

app = WorkerApp()


def _note(**record: object) -> None:
    with Path(os.environ["RESULT_FILE"]).open("a", encoding="utf-8") as out:
        out.write(json.dumps({"at": time.time(), **record}) + "\n")


@app.queue_trigger(arg_name="msg", queue_name="spark-ready", spark=True)
def total(msg: QueueMessage) -> None:
    began = time.time()
    result = spark.session().range(0, 100, numPartitions=2).selectExpr("sum(id)").collect()[0][0]
    _note(function="total", began=began, sum=result, dequeue_count=msg.dequeue_count)


@app.queue_trigger(arg_name="msg", queue_name="plain-ready")
def plain(msg: QueueMessage) -> None:
    _note(function="plain", dequeue_count=msg.dequeue_count)

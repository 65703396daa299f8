"""Apps for bench/spark_start.py: one Spark function, declared with ``spark=True`` (``started``) or without it
(``at_first_message``), that notes how long its first job took from the handler's start."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from worker import QueueMessage, WorkerApp, spark


def _first_job(msg: QueueMessage) -> None:
    began = time.time()
    spark.session().range(0, 1000, numPartitions=2).selectExpr("sum(id)").collect()
    ended = time.time()
    with Path(os.environ["RESULT_FILE"]).open("a", encoding="utf-8") as out:
        out.write(json.dumps({"began": began, "first_job": ended - began, "ended": ended}) + "\n")


started = WorkerApp()
started.queue_trigger(arg_name="msg", queue_name="spark-first", spark=True)(_first_job)

at_first_message = WorkerApp()
at_first_message.queue_trigger(arg_name="msg", queue_name="spark-first")(_first_job)

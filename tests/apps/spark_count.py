"""An app for the Spark process test: count a small range with the worker's SparkSession."""

from __future__ import annotations

import os
from pathlib import Path

from worker import QueueMessage, WorkerApp, spark

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="spark-count")
def count(msg: QueueMessage) -> None:
    n = int(msg.get_body())
    Path(os.environ["RESULT_FILE"]).write_text(str(spark.session().range(n).count()))

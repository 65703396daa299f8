"""An app for the Spark interpreter test: a job that runs a Python function of this module on Spark's Python workers.

``square`` is pickled by reference, so each Python worker must import this
module, and with it ``worker``: it works only when Spark starts its Python
workers with an interpreter that has the app's packages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from worker import WorkerApp, spark

app = WorkerApp()


def square(x: int) -> int:
    return x * x


@app.queue_trigger(arg_name="msg", queue_name="spark-udf")
def squares(msg: str) -> None:
    from pyspark.sql import functions as F

    n = int(msg)
    session = spark.session()
    result = {"udf": session.range(n).select(F.udf(square, "long")("id").alias("sq")).agg(F.sum("sq")).first()[0]}
    if not spark.is_remote():  # Spark Connect has no RDDs
        result["rdd"] = session.sparkContext.parallelize(range(n), 2).map(square).sum()
    Path(os.environ["RESULT_FILE"]).write_text(json.dumps(result))

"""The sample app: a data pipeline whose steps are queue-triggered Spark jobs.

    ingest     a landed file per message: validate, quarantine, de-duplicate, store as Parquet
      -> aggregate   the days a batch touched: daily sales per SKU and country
        -> report    JSON and text summary of everything aggregated

Each step is a batch trigger (``cardinality="many"``): one Spark job handles
every message the listener received at once. A message whose file cannot be
read at all fails alone and, after maxDequeueCount attempts, ends in
``ingest-poison`` with its reason in the log; the rest of the batch goes on.
Each step says ``spark=True``: the worker starts Spark as it starts, so the
first landed file does not wait for the JVM and a cold session.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from functions import pipeline
from worker import Out, QueueMessage, WorkerApp, spark

app = WorkerApp()
log = structlog.get_logger("functions")


def warehouse() -> Path:
    """Where the pipeline's tables live (``PIPELINE_WAREHOUSE``, default .worker/pipeline/warehouse)."""
    return Path(os.environ.get("PIPELINE_WAREHOUSE", ".worker/pipeline/warehouse")).resolve()


@app.function_name("ingest")
@app.queue_output(arg_name="next_step", queue_name="aggregate")
@app.queue_trigger(arg_name="msgs", queue_name="ingest", cardinality="many", spark=True)
def ingest(msgs: list[QueueMessage], next_step: Out[dict]) -> None:
    paths = []
    for msg in msgs:
        try:
            path = str(msg.get_json()["path"])
        except (ValueError, KeyError, TypeError) as exc:
            msg.fail(f"not an ingest message ({{'path': ...}} expected): {exc}")
            continue
        if reason := pipeline.unreadable(path):
            msg.fail(reason)
        else:
            paths.append(path)
    if not paths:
        return
    stats = pipeline.ingest(spark.session(), warehouse(), paths)
    days = sorted({day for s in stats for day in s.days})
    log.info("ingested", files=len(paths), rows_in=sum(s.rows_in for s in stats),
             rows_out=sum(s.rows_out for s in stats), days=days)
    next_step.set({"days": days})


@app.function_name("aggregate")
@app.queue_output(arg_name="next_step", queue_name="report")
@app.queue_trigger(arg_name="msgs", queue_name="aggregate", cardinality="many", spark=True)
def aggregate(msgs: list[QueueMessage], next_step: Out[dict]) -> None:
    days = sorted({day for msg in msgs for day in msg.get_json()["days"]})
    rows = pipeline.aggregate(spark.session(), warehouse(), days)
    log.info("aggregated", days=days, rows=rows)
    next_step.set({"days": days})


@app.function_name("report")
@app.queue_trigger(arg_name="msgs", queue_name="report", cardinality="many", spark=True)
def report(msgs: list[QueueMessage]) -> None:
    summary = pipeline.report(spark.session(), warehouse())
    log.info("report written", rows_out=summary["rows_out"], path=str(warehouse() / "reports"))

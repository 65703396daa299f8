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

A step publishes its tables only while its invocation holds its messages
(:class:`functions.fencing.HeldMessages`). A step whose input table has
nothing to read yet succeeds with nothing to do and says so in the log: the
step that writes that table sends this step a message of its own once it has
published, so retrying this one would only wait for work that is already on
its way, and then poison a message that was never wrong.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import structlog

from functions import pipeline, tables
from functions.fencing import HeldMessages
from worker import Out, QueueMessage, WorkerApp, spark
from worker.settings.config import parse_duration

app = WorkerApp()
log = structlog.get_logger("functions")


def warehouse() -> Path:
    """Where the pipeline's tables live (``PIPELINE_WAREHOUSE``, default .worker/pipeline/warehouse)."""
    return Path(os.environ.get("PIPELINE_WAREHOUSE", ".worker/pipeline/warehouse")).resolve()


def writer(msgs: Sequence[QueueMessage]) -> tables.Writer:
    """How a step's invocation publishes: fenced by its messages, with the grace and lock wait of the environment
    (``PIPELINE_RETIRED_GRACE``, ``PIPELINE_LOCK_WAIT``: ``1h``, ``90s``, ``00:02:00``; defaults in tables)."""
    return tables.Writer(
        HeldMessages(msgs),
        _duration("PIPELINE_RETIRED_GRACE", tables.RETIRED_GRACE),
        _duration("PIPELINE_LOCK_WAIT", tables.LOCK_WAIT),
    )


def _duration(name: str, default: timedelta) -> timedelta:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return timedelta(seconds=parse_duration(value))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


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
    stats = pipeline.ingest(spark.session(), warehouse(), paths, writer(msgs))
    days = sorted({day for s in stats for day in s.days})
    log.info(
        "ingested",
        files=len(paths),
        rows_in=sum(s.rows_in for s in stats),
        rows_out=sum(s.rows_out for s in stats),
        days=days,
    )
    next_step.set({"days": days})


@app.function_name("aggregate")
@app.queue_output(arg_name="next_step", queue_name="report")
@app.queue_trigger(arg_name="msgs", queue_name="aggregate", cardinality="many", spark=True)
def aggregate(msgs: list[QueueMessage], next_step: Out[dict]) -> None:
    days = sorted({day for msg in msgs for day in msg.get_json()["days"]})
    try:
        rows = pipeline.aggregate(spark.session(), warehouse(), days, writer(msgs))
    except tables.NoVersion as missing:
        log.warning(
            "nothing to aggregate: no events yet; the ingest that writes them sends its own aggregate",
            days=days,
            reason=str(missing),
        )
        return
    log.info("aggregated", days=days, rows=rows)
    next_step.set({"days": days})


@app.function_name("report")
@app.queue_trigger(arg_name="msgs", queue_name="report", cardinality="many", spark=True)
def report(msgs: list[QueueMessage]) -> None:
    try:
        summary = pipeline.report(spark.session(), warehouse())
    except tables.NoVersion as missing:
        log.warning(
            "nothing to report: no daily sales yet; the aggregate that writes them sends its own report", reason=str(missing)
        )
        return
    log.info("report written", rows_out=summary["rows_out"], path=str(warehouse() / "reports"))

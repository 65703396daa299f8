"""The Spark job tags of an invocation on its span: what ties the trace to the jobs in Spark's UI and logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.sessions import SparkSessions, master_and_conf
from tests.support import apoll, running
from tests.tracing.receiver import Received, Receiver
from worker import QueueMessage, WorkerApp, spark
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.settings.config import HostConfig

QUEUE = "spark-traced"


async def test_an_invocations_span_names_the_spark_job_tags_its_handler_ran_under(
    tmp_path: Path,
    otlp_receiver: Receiver,
    spark_sessions: SparkSessions,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    master, conf = master_and_conf("local", request)
    app = WorkerApp()
    counted: list[int] = []
    tags: list[set[str]] = []

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    def count(msg: QueueMessage) -> None:
        session = spark.session()
        counted.append(session.range(10).count())
        tags.append(set(session.sparkContext.getJobTags()))  # what this thread's jobs ran under

    @app.queue_trigger(arg_name="msg", queue_name="no-spark")
    def plain(msg: QueueMessage) -> None:
        """Runs no Spark job: its span has no tags."""

    app.add_middleware(spark_sessions.middleware(master, conf))
    backend = open_backend(None, tmp_path)
    for queue in (QUEUE, "no-spark"):
        await backend.create_queue(queue)
        await backend.put(queue, encode(b"go", "base64"))
    await backend.close()
    async with running(app, HostConfig(base_dir=tmp_path, max_polling_interval=0.2)):

        async def both_spans() -> list[Received] | None:  # polled on the loop the host runs on
            got = otlp_receiver.received()
            return got if {"process spark-traced", "process no-spark"} <= {s.name for s in got} else None

        spans = await apoll(both_spans, 90, what="both invocations' spans")

    [traced] = [s for s in spans if s.name == "process spark-traced"]
    [untraced] = [s for s in spans if s.name == "process no-spark"]
    assert counted == [10]
    assert tags == [set(traced.attributes["worker.spark.job_tags"])]
    assert traced.attributes["faas.invocation_id"] in traced.attributes["worker.spark.job_tags"][0]
    assert "worker.spark.job_tags" not in untraced.attributes

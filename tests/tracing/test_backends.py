"""Each backend's spans: its ``messaging.system``, and whether a producer's context reaches the consumer, which only a
backend with message properties can carry (the embedded queue, and Amazon SQS in message attributes; Azure Storage
queue messages have no metadata, and OCI Queue's needs a channel beside it)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.host.conftest import DELIVERY_LIMIT
from tests.support import apoll, running
from tests.tracing.receiver import Received, Receiver
from worker import QueueMessage, WorkerApp
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.observability import tracing
from worker.settings.config import HostConfig


@pytest.mark.parametrize("backend_kind", ["sqlite", "azurite", "oci", "sqs"])
async def test_the_consumer_continues_the_producers_trace_where_the_message_can_carry_it(
    tmp_path: Path,
    connection: str | None,
    queue_name: str,
    otlp_receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    backend = open_backend(connection, tmp_path)
    await backend.create_queue(queue_name)
    if backend.service_dead_letters:  # an OCI queue made by an operator has its delivery limit set
        request.getfixturevalue("oci_server").set_delivery_limit(queue_name, DELIVERY_LIMIT)
    producer = tracing.start(os.environ, "producer")
    assert producer is not None
    try:
        sent = await producer.traced(backend).put(queue_name, encode(b"hello", "base64"))
    finally:
        producer.shutdown()
        await backend.close()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def handle(msg: QueueMessage) -> None:
        """Nothing to do: the spans are what the test looks at."""

    async def processed() -> list[Received] | None:
        got = otlp_receiver.received()
        return got if any(s.name == f"process {queue_name}" for s in got) else None

    config = HostConfig(
        base_dir=tmp_path, max_polling_interval=0.2, connections={"AzureWebJobsStorage": connection} if connection else {}
    )
    # A host built in code does not check batchSize against the backend as worker run does (SQS takes 10).
    config = replace(config, batch_size=min(config.batch_size, backend.limits.max_batch))
    async with running(app, config):
        spans = await apoll(processed, 30, what="the message's span")

    [send] = [s for s in spans if s.name == f"send {queue_name}"]
    [process] = [s for s in spans if s.name == f"process {queue_name}"]
    assert send.attributes["messaging.system"] == process.attributes["messaging.system"] == backend.messaging_system
    assert process.attributes["messaging.message.id"] == send.attributes["messaging.message.id"] == sent.id
    if backend.capabilities.message_properties:
        assert (process.trace_id, process.parent_id) == (send.trace_id, send.span_id)
    else:
        assert process.parent_id == "" and process.trace_id != send.trace_id
    assert process.resource["service.name"] == "queueworker" and send.resource["service.name"] == "producer"

"""A message settled before its handler could run still has its span: the reason it never ran is the trace's end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import apoll, running
from tests.tracing.receiver import Received, Receiver
from worker import QueueMessage, WorkerApp
from worker.backends.registry import open_backend
from worker.settings.config import HostConfig


async def test_an_undecodable_message_is_a_failed_span_with_its_poisoning(
    tmp_path: Path, otlp_receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    app = WorkerApp()
    ran: list[str] = []

    @app.queue_trigger(arg_name="msg", queue_name="garbled")
    def handle(msg: QueueMessage) -> None:
        ran.append(msg.id)

    backend = open_backend(None, tmp_path)
    await backend.create_queue("garbled")
    put = await backend.put("garbled", "not base64!")  # stored as is: the host decodes base64 (the default)
    await backend.close()

    async def its_span() -> list[Received] | None:
        got = otlp_receiver.received()
        return got if any(s.name == "process garbled" for s in got) else None

    async with running(app, HostConfig(base_dir=tmp_path, max_polling_interval=0.2)):
        spans = await apoll(its_span, 30, what="the message's span")

    [span] = [s for s in spans if s.name == "process garbled"]
    assert ran == []
    assert (span.kind, span.parent_id) == ("CONSUMER", "")
    assert span.status[0] == "ERROR" and "not valid base64" in span.status[1]
    assert {
        key: span.attributes[key]
        for key in ("messaging.message.id", "worker.outcome", "worker.completion", "messaging.operation.type")
    } == {
        "messaging.message.id": put.id,
        "worker.outcome": "poison",
        "worker.completion": "poisoned",
        "messaging.operation.type": "process",
    }

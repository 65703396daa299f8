"""Burst mode's end names the queues where messages wait that no function of the app reads (a misspelt send), on
the embedded queue and Azurite; a poison queue and the app's own output queue hold messages by design and are not
named, and a service whose queues are not listed cheaply (SQS) is not looked through."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support import captured_logs
from worker import Out, QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode
from worker.runtime import host as host_module
from worker.runtime.host import Host
from worker.settings.config import HostConfig

QUEUE = "greetings"


@pytest.mark.parametrize("backend_kind", ["sqlite", "azurite", "sqs"], indirect=True)
async def test_burst_names_the_queues_with_messages_no_function_reads(
    queue: QueueBackend,
    connection: str | None,
    backend_kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    @app.queue_output(arg_name="out", queue_name="answers")
    def greet(msg: QueueMessage, out: Out[str]) -> None:
        out.set("hi")

    for name, body in (("greetngs", "typo"), (QUEUE, "hello"), (f"{QUEUE}-poison", "old")):
        await queue.create_queue(name)
        await queue.put(name, encode(body, "base64"))
    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": connection} if connection else {},
    )

    with captured_logs(monkeypatch, host_module) as logs:
        await asyncio.wait_for(Host(app, config, burst=True).run(), 60)

    warned = [line for line in logs if line["event"].startswith("messages wait on queues no function")]
    if backend_kind == "sqs":  # its queues are not looked through
        assert warned == []
        return
    [line] = warned
    assert line["queues"] == {"greetngs": 1} and line["functions_read"] == [QUEUE]
    assert await queue.approximate_count("answers") == 1  # the output queue holds a message, and is not named

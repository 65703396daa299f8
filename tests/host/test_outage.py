"""A storage outage: the host stays up while Azurite is down and resumes by itself when it is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.azurite import Azurite
from tests.support import apoll
from worker import QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.runtime.host import Host
from worker.settings.config import HostConfig

QUEUE = "outage"


@pytest.mark.azurite  # its own Azurite, on disk, stopped and started again on the same port
async def test_host_rides_out_a_storage_outage_and_resumes(tmp_path: Path) -> None:
    emulator = Azurite(location=tmp_path / "azurite").start()  # on disk, so messages survive the restart
    revived: Azurite | None = None
    handled: list[bytes] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def record(msg: QueueMessage) -> None:
        handled.append(msg.get_body())

    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": emulator.connection_string},
    )
    host = Host(app, config)
    sender = open_backend(emulator.connection_string, tmp_path)
    task = asyncio.create_task(host.run())
    try:
        await apoll(lambda: _exists(sender), 20, what="the host to create its queue")
        await sender.put(QUEUE, encode("before", "base64"))
        await apoll(lambda: _true(handled == [b"before"]), 20, what="the first message")
        # Its deletion comes after the handler; an outage before it would leave the message to its lease.
        await apoll(lambda: _true(host.metrics.get("succeeded") == 1), 20, what="the first message's deletion")

        emulator.stop()
        await apoll(lambda: _true(host.metrics.get("storage_retries") > 0), 30, what="the host to notice the outage")
        await apoll(lambda: _true(host.metrics.get("storage_errors") > 0), 60, what="a receive to give up")
        assert not task.done(), "the host stopped during the outage"

        revived = Azurite(location=tmp_path / "azurite", port=emulator.port).start()
        await sender.put(QUEUE, encode("after", "base64"))
        await apoll(lambda: _true(handled == [b"before", b"after"]), 60, what="the host to resume")
        await apoll(lambda: _true(host.metrics.get("succeeded") == 2), 20, what="the second message's deletion")
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 60)
        await sender.close()
        emulator.stop()
        if revived is not None:
            revived.stop()


async def _exists(backend: QueueBackend) -> bool:
    return QUEUE in await backend.list_queues()


async def _true(value: bool) -> bool:
    return value

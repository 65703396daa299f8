"""OCI Queue channels: one queue, a function per channel, and an output binding that writes to a channel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import apoll, running
from worker import Out, QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode
from worker.settings.config import HostConfig

QUEUE = "channels"


@pytest.mark.parametrize("backend_kind", ["oci"])
async def test_each_function_takes_its_own_channel_and_an_output_writes_to_one(
    tmp_path: Path, connection: str | None, queue: QueueBackend
) -> None:
    seen: dict[str, list[str]] = {"eu": [], "us": []}
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name=QUEUE, channel="us")
    @app.queue_trigger(arg_name="msg", queue_name=QUEUE, channel="eu")
    async def europe(msg: QueueMessage, out: Out[str]) -> None:
        body = msg.get_body().decode()
        seen["eu"].append(body)
        out.set(f"{body} forwarded")

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE, channel="us")
    async def america(msg: QueueMessage) -> None:
        seen["us"].append(msg.get_body().decode())

    for body in ("eu-1", "eu-2"):
        await queue.put(QUEUE, encode(body, "base64"), channel="eu")
    config = HostConfig(base_dir=tmp_path, drain_timeout=1, connections={"AzureWebJobsStorage": connection or ""})
    async with running(app, config):
        await apoll(lambda: _true(len(seen["us"]) == 2), 30, what="both forwarded messages on the us channel")
    assert sorted(seen["eu"]) == ["eu-1", "eu-2"]
    assert sorted(seen["us"]) == ["eu-1 forwarded", "eu-2 forwarded"]


@pytest.mark.parametrize("backend_kind", ["oci"])
async def test_one_function_takes_every_channel_one_channel_a_receive(
    tmp_path: Path, connection: str | None, queue: QueueBackend
) -> None:
    """Without ``channel=``, a receive is an unfiltered GetMessages: one channel's messages each time, never a mix."""
    batches: list[list[str]] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msgs", queue_name=QUEUE, cardinality="many")
    async def everything(msgs: list[QueueMessage]) -> None:
        batches.append([msg.get_body().decode() for msg in msgs])

    for channel in ("eu", "us", "ap"):
        for n in range(3):
            await queue.put(QUEUE, encode(f"{channel}-{n}", "base64"), channel=channel)
    config = HostConfig(
        base_dir=tmp_path, drain_timeout=1, batch_size=16, connections={"AzureWebJobsStorage": connection or ""}
    )
    async with running(app, config):
        await apoll(lambda: _true(sum(map(len, batches)) == 9), 30, what="all nine messages handled")
    assert sorted(body for batch in batches for body in batch) == sorted(
        f"{channel}-{n}" for channel in ("eu", "us", "ap") for n in range(3)
    )
    for batch in batches:
        assert len({body.split("-")[0] for body in batch}) == 1, f"a receive mixed channels: {batch}"


async def _true(value: bool) -> bool:
    return value

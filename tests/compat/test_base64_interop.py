"""Messages cross between the Azure SDK for Python and the worker unchanged, on the real Azurite.

messageEncoding base64 is what Azure Functions and the SDKs' base64 policies
write: bytes put through ``BinaryBase64EncodePolicy`` (even bytes that are not
UTF-8) and text put through ``TextBase64EncodePolicy`` must reach a handler as
the same bytes, and what the worker sends (an output binding, ``worker send``)
must read back through ``BinaryBase64DecodePolicy``. messageEncoding none takes
the SDK's plain text as its UTF-8 bytes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy, TextBase64EncodePolicy
from azure.storage.queue.aio import QueueClient

from tests.azurite import Azurite
from tests.support import apoll, running
from worker import Out, QueueMessage, WorkerApp
from worker.settings.config import HostConfig

REPO = Path(__file__).resolve().parents[2]

#: Every byte value, so that no encoding step may treat the body as text.
ALL_BYTES = bytes(range(256))
NOT_UTF8 = b"\xff\xfe\x00\x80 invalid \xc3\x28 utf-8 \xed\xa0\x80"
TEXT = "snow \u2603, caf\u00e9, \U0001f600, <xml & 'quotes'>, line\nbreak"


@pytest.fixture(autouse=True)
def _no_machine_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """An AzureWebJobsStorage of the machine running the tests would win over the config's connections."""
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)


def sdk_client(azurite: Azurite, queue: str, **policies: Any) -> QueueClient:
    return QueueClient.from_connection_string(azurite.connection_string, queue, **policies)


def on_azurite(app: WorkerApp, azurite: Azurite, tmp_path: Path, encoding: str = "base64") -> Any:
    """A host on this loop, reading Azurite, until the block ends."""
    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        drain_timeout=1,
        message_encoding=encoding,
        connections={"AzureWebJobsStorage": azurite.connection_string},
    )
    return running(app, config)


def recording_app(queue: str, received: list[bytes]) -> WorkerApp:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue)
    async def record(msg: QueueMessage) -> None:
        received.append(msg.get_body())

    return app


async def until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    async def ready() -> bool:
        return check()

    await apoll(ready, timeout, what=what)


async def sdk_put(azurite: Azurite, queue: str, content: bytes | str, **policies: Any) -> None:
    async with sdk_client(azurite, queue, **policies) as client:
        try:
            await client.create_queue()
        except ResourceExistsError:
            pass
        await client.send_message(content)


async def sdk_receive_all(azurite: Azurite, queue: str, count: int, timeout: float = 30) -> list[bytes]:
    """``count`` messages read (and deleted) through BinaryBase64DecodePolicy, waiting for them to arrive."""
    found: list[bytes] = []
    async with sdk_client(azurite, queue, message_decode_policy=BinaryBase64DecodePolicy()) as client:

        async def take() -> bool:
            try:
                async for message in client.receive_messages(max_messages=32, visibility_timeout=30):
                    found.append(message.content)
                    await client.delete_message(message)
            except ResourceNotFoundError:  # the queue is created on first send: until then there is nothing
                pass
            return len(found) >= count

        await apoll(take, timeout, interval=0.1, what=f"{count} messages on {queue!r}")
    return found


# -- SDK -> worker -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [ALL_BYTES, NOT_UTF8, b"", b"plain ascii"], ids=["all-bytes", "not-utf8", "empty", "ascii"])
async def test_bytes_put_by_binary_base64_policy_reach_the_handler_intact(
    azurite: Azurite, tmp_path: Path, queue_name: str, body: bytes
) -> None:
    received: list[bytes] = []
    await sdk_put(azurite, queue_name, body, message_encode_policy=BinaryBase64EncodePolicy())
    async with on_azurite(recording_app(queue_name, received), azurite, tmp_path) as host:
        await until(lambda: bool(received), "the handler to get the message")
        await until(lambda: host.metrics.get("succeeded") == 1, "the message to complete")
    assert received == [body]
    assert host.metrics.get("poisoned") == 0


async def test_text_put_by_text_base64_policy_reaches_the_handler_as_utf8(
    azurite: Azurite, tmp_path: Path, queue_name: str
) -> None:
    received: list[bytes] = []
    await sdk_put(azurite, queue_name, TEXT, message_encode_policy=TextBase64EncodePolicy())
    async with on_azurite(recording_app(queue_name, received), azurite, tmp_path) as host:
        await until(lambda: bool(received), "the handler to get the message")
        await until(lambda: host.metrics.get("succeeded") == 1, "the message to complete")
    assert received == [TEXT.encode("utf-8")]


async def test_plain_text_put_without_a_policy_arrives_as_utf8_under_encoding_none(
    azurite: Azurite, tmp_path: Path, queue_name: str
) -> None:
    received: list[bytes] = []
    await sdk_put(azurite, queue_name, TEXT)
    async with on_azurite(recording_app(queue_name, received), azurite, tmp_path, encoding="none") as host:
        await until(lambda: bool(received), "the handler to get the message")
        await until(lambda: host.metrics.get("succeeded") == 1, "the message to complete")
    assert received == [TEXT.encode("utf-8")]


# -- worker -> SDK -------------------------------------------------------------------------------------------------


async def test_output_binding_bytes_and_text_read_back_by_binary_base64_policy(
    azurite: Azurite, tmp_path: Path, queue_name: str
) -> None:
    """The trigger message carries nothing; the handler sends fixed bodies, which the SDK must read back exactly."""
    out_queue = f"{queue_name}-out"
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name=out_queue)
    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def forward(msg: QueueMessage, out: Out[list[bytes | str]]) -> None:
        out.set([ALL_BYTES, NOT_UTF8, TEXT])

    await sdk_put(azurite, queue_name, b"go", message_encode_policy=BinaryBase64EncodePolicy())
    async with on_azurite(app, azurite, tmp_path) as host:
        await until(lambda: host.metrics.get("succeeded") == 1, "the handler to succeed")
    read = await sdk_receive_all(azurite, out_queue, 3)
    assert sorted(read) == sorted([ALL_BYTES, NOT_UTF8, TEXT.encode("utf-8")])


async def test_bytes_round_trip_sdk_to_handler_to_output_to_sdk(azurite: Azurite, tmp_path: Path, queue_name: str) -> None:
    out_queue = f"{queue_name}-out"
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name=out_queue)
    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    def echo(msg: QueueMessage, out: Out[bytes]) -> None:  # a sync handler, on a handler thread
        out.set(msg.get_body()[::-1])

    await sdk_put(azurite, queue_name, NOT_UTF8, message_encode_policy=BinaryBase64EncodePolicy())
    async with on_azurite(app, azurite, tmp_path) as host:
        await until(lambda: host.metrics.get("succeeded") == 1, "the handler to succeed")
    assert await sdk_receive_all(azurite, out_queue, 1) == [NOT_UTF8[::-1]]


def worker_cli(cwd: Path, connection: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER__") and k != "AzureWebJobsStorage"}
    env.update(PYTHONPATH=str(REPO), PYTHONUTF8="1", AzureWebJobsStorage=connection)
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )


async def test_worker_send_is_read_back_by_binary_base64_policy(azurite: Azurite, tmp_path: Path, queue_name: str) -> None:
    bodies = [TEXT, "plain", '{"json": [1, 2]}']
    result = await asyncio.to_thread(worker_cli, tmp_path, azurite.connection_string, "send", queue_name, *bodies)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 3, result.stdout
    read = await sdk_receive_all(azurite, queue_name, 3)
    assert sorted(read) == sorted(b.encode("utf-8") for b in bodies)


async def test_worker_send_under_encoding_none_is_read_back_as_plain_text(
    azurite: Azurite, tmp_path: Path, queue_name: str
) -> None:
    (tmp_path / "host.yaml").write_text("extensions:\n  queues:\n    messageEncoding: none\n", encoding="utf-8")
    result = await asyncio.to_thread(worker_cli, tmp_path, azurite.connection_string, "send", queue_name, TEXT)
    assert result.returncode == 0, result.stderr
    async with sdk_client(azurite, queue_name) as client:  # no decode policy: the text as stored
        messages = [m.content for m in await client.peek_messages(max_messages=32)]
    assert messages == [TEXT]

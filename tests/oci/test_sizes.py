"""How large a message a put may carry on OCI Queue: 256 KiB unless the connection's ``maxMessageBytes=`` says more.

No primary source states the service's figure, and a queue made with the LARGE_MESSAGES capability takes larger
messages (the test server's: 512 KiB), so the limit the backend checks before sending is a setting. What the queue
itself refuses past its own limit is answered 400 InvalidParameter without a word about size (the test server's
wording, the harder one to read): the backend reads such a refusal of a message past 256 KiB as too large.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.cli import Ran, run_cli
from tests.conftest import oci_connection, oci_queue
from tests.oci.fixture import OciTestServer
from worker.backends.queues import MessageTooLarge, QueueBackend
from worker.backends.registry import open_backend

#: More than 256 KiB, less than the 512 KiB of a queue with LARGE_MESSAGES.
LARGE = "x" * (300 * 1024)
#: ``maxMessageBytes=`` for a queue with LARGE_MESSAGES.
LARGE_LIMIT = 512 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    with OciTestServer(tmp_path_factory.mktemp("oci-sizes")) as running:
        yield running


@pytest.fixture
async def queue(server: OciTestServer, tmp_path: Path, queue_name: str) -> AsyncIterator[QueueBackend]:
    """The test's queue, made with the default connection (256 KiB)."""
    async with oci_queue(server, tmp_path, queue_name) as backend:
        yield backend


@pytest.fixture
async def large(server: OciTestServer, tmp_path: Path) -> AsyncIterator[QueueBackend]:
    """A backend whose connection allows messages up to 512 KiB."""
    backend = open_backend(f"{oci_connection(server)}&maxMessageBytes={LARGE_LIMIT}", tmp_path)
    yield backend
    await backend.close()


async def test_a_message_past_256_kib_is_refused_before_sending_unless_max_message_bytes_allows_it(
    server: OciTestServer, queue: QueueBackend, large: QueueBackend, queue_name: str
) -> None:
    with pytest.raises(MessageTooLarge, match="the limit is 262144 bytes"):
        await queue.put(queue_name, LARGE)
    server.allow_large_messages(queue_name)
    await large.put(queue_name, LARGE)
    [message] = await large.receive(queue_name, 1, 30)
    assert message.content == LARGE


async def test_a_message_the_queue_refuses_as_too_large_is_message_too_large_naming_the_setting(
    queue: QueueBackend, large: QueueBackend, queue_name: str
) -> None:
    """maxMessageBytes= says 512 KiB, the queue has no LARGE_MESSAGES: the service's refusal is read as too large."""
    with pytest.raises(MessageTooLarge, match=f"maxMessageBytes is {LARGE_LIMIT}"):
        await large.put(queue_name, LARGE)
    assert await queue.approximate_count(queue_name) == 0


async def test_worker_send_checks_the_size_the_connection_allows(
    server: OciTestServer, queue: QueueBackend, queue_name: str, tmp_path: Path
) -> None:
    """The command refuses a body past the connection's limit before sending anything, and sends one within it."""
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    server.allow_large_messages(queue_name)
    body = "y" * (220 * 1024)  # stored as base64: about 293 KiB

    def send(connection: str) -> Ran:
        return run_cli(
            tmp_path,
            "send",
            queue_name,
            body,
            "--config",
            str(tmp_path / "host.yaml"),
            env={"AzureWebJobsStorage": connection},
        )

    refused = await asyncio.to_thread(send, oci_connection(server))
    assert refused.returncode != 0 and "the limit is 262144 bytes" in refused.stderr, refused
    assert await queue.approximate_count(queue_name) == 0
    sent = await asyncio.to_thread(send, f"{oci_connection(server)}&maxMessageBytes={LARGE_LIMIT}")
    assert sent.returncode == 0, sent
    assert await queue.approximate_count(queue_name) == 1

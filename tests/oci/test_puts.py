"""A put is never sent twice by the OCI backend's own retries.

PutMessages takes no retry token, and the SDK does not retry it by default for that reason; the backend sends
it again only after a failure that sent nothing of it. The test server's ``--put-answer close`` and ``reset``
modes store the message and then hang up instead of answering, as when the answer is lost on its way back: the
caller must hear that the put may have been stored, and the queue must hold it once. Where nothing could be
sent (the connection refused), every attempt is made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.conftest import oci_connection
from tests.oci.fixture import OciTestServer
from tests.oci.server import Modes
from worker.backends.queues import OutcomeUnknown, QueueBackend, TransientError
from worker.backends.registry import open_backend
from worker.backends.retrying import RETRY_ATTEMPTS


@pytest.fixture(scope="module", params=["close", "reset"])
def hanging_up(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    """A test server that stores every put and then closes or resets the connection instead of answering."""
    with OciTestServer(tmp_path_factory.mktemp(f"oci-put-{request.param}"), Modes(put_answer=request.param)) as server:
        yield server


@pytest.fixture
def stopping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    """A server of the test's own, which it stops."""
    with OciTestServer(tmp_path_factory.mktemp("oci-stopping")) as server:
        yield server


@pytest.fixture
async def queue(hanging_up: OciTestServer, tmp_path: Path, queue_name: str) -> AsyncIterator[QueueBackend]:
    backend = open_backend(oci_connection(hanging_up), tmp_path)
    await backend.create_queue(queue_name)
    yield backend
    await backend.close()


async def test_a_put_whose_answer_is_lost_is_stored_once_and_the_caller_is_told(
    hanging_up: OciTestServer, tmp_path: Path, queue: QueueBackend, queue_name: str
) -> None:
    retries: list[str] = []
    backend = open_backend(oci_connection(hanging_up), tmp_path, on_retry=retries.append)
    try:
        with pytest.raises(OutcomeUnknown, match="may have been stored .*, so this call does not repeat it"):
            await backend.put(queue_name, "once")
    finally:
        await backend.close()
    assert retries == [], "the put was sent again"
    assert await queue.approximate_count(queue_name) == 1


async def test_a_put_that_could_not_connect_is_tried_again(stopping: OciTestServer, tmp_path: Path,
                                                           queue_name: str) -> None:
    """Refused: nothing was sent, so every attempt is made; what is left is "unreachable", not "may be stored"."""
    retries: list[str] = []
    backend = open_backend(oci_connection(stopping), tmp_path, on_retry=retries.append)
    try:
        await backend.create_queue(queue_name)
        await backend.put(queue_name, "sent")  # the queue and its messages endpoint are looked up and kept
        stopping.stop()  # its ports are closed: connections to them are refused
        with pytest.raises(TransientError, match="connection refused") as caught:
            await backend.put(queue_name, "never sent")
    finally:
        await backend.close()
    assert not isinstance(caught.value, OutcomeUnknown)
    assert len(retries) == RETRY_ATTEMPTS, f"every attempt is made and reported: {retries}"

"""A put is never sent twice by the OCI backend's own retries, and what may send it again says so.

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

from tests.conftest import oci_connection, oci_queue
from tests.oci.fixture import OciTestServer
from tests.oci.server import Modes
from tests.support import apoll, captured_logs, running
from worker import Out, QueueMessage, WorkerApp
from worker.backends.queues import OutcomeUnknown, QueueBackend, TransientError
from worker.backends.registry import open_backend
from worker.backends.retrying import RETRY_ATTEMPTS
from worker.bindings.encoding import encode
from worker.middleware import bindings
from worker.settings.config import HostConfig


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
    async with oci_queue(hanging_up, tmp_path, queue_name) as backend:
        yield backend


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


async def test_a_put_that_could_not_connect_is_tried_again(stopping: OciTestServer, tmp_path: Path, queue_name: str) -> None:
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


async def test_a_queue_output_whose_put_may_have_been_stored_is_logged_as_sent_again_by_the_retry(
    hanging_up: OciTestServer, tmp_path: Path, queue: QueueBackend, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outputs are at-least-once: the output was stored, its answer lost; the attempt fails and its retry sends the
    output again, which is what the log must say (not "not sent again")."""
    outputs = f"{queue_name}-out"
    await queue.create_queue(outputs)
    hanging_up.set_delivery_limit(queue_name, 5)  # poison=service: the trigger queue has its dead-letter count
    with pytest.raises(OutcomeUnknown):  # this server stores every put and hangs up: the trigger is there
        await queue.put(queue_name, encode("order-1", "base64"))
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name=outputs)
    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def forward(msg: QueueMessage, out: Out[str]) -> None:
        out.set("forwarded")

    config = HostConfig(base_dir=tmp_path, drain_timeout=1, connections={"AzureWebJobsStorage": oci_connection(hanging_up)})
    with captured_logs(monkeypatch, bindings) as logs:
        async with running(app, config):
            await apoll(lambda: _at_least(queue, outputs, 2), 15, what="the output sent again by the retry")
    failed = [line for line in logs if line["event"].startswith("output binding failed")]
    assert failed and all("sends its outputs again" in line["event"] for line in failed), failed
    assert all("not sent again" not in f"{line['event']} {line.get('error')}" for line in failed), failed


async def _at_least(backend: QueueBackend, queue: str, count: int) -> bool:
    return await backend.approximate_count(queue) >= count

"""The host on an OCI Queue that answers as a busy service may: what completion, renewals and poison=service make
of it, on the test server's scripted faults (``OciTestServer.fault``) in its default modes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.oci.fixture import OciTestServer
from tests.support import apoll, captured_logs, running
from worker import Out, QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode
from worker.runtime import dispatcher
from worker.settings.config import HostConfig

QUEUE = "busy"


@pytest.fixture
def faults(oci_server: OciTestServer) -> Iterator[OciTestServer]:
    """The shared test server, its scripted faults dropped after the test."""
    yield oci_server
    oci_server.clear_faults()


@pytest.mark.parametrize("backend_kind", ["oci"])
async def test_a_delete_retried_after_another_consumer_took_the_message_is_a_lost_lease_not_a_success(
    tmp_path: Path, connection: str, queue: QueueBackend, faults: OciTestServer
) -> None:
    """Renewals fail (503) until the lease's own end, another consumer takes the message, and the handler's delete
    meets a 503 and then the stale receipt's refusal: completion reads its lease's clock and counts a lost lease."""
    proceed = asyncio.Event()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def slow(msg: QueueMessage) -> None:
        await proceed.wait()

    await queue.put(QUEUE, encode("taken twice", "base64"))
    # Asked to wait past a call's budget, each renewal gives up at its first answer, and holds the lease's lock briefly.
    faults.fault("update_message", 503, "ServiceUnavailable", times=1000, retry_after=600)
    # One message in flight at most: the host does not take the message again itself once its lease has lapsed.
    config = HostConfig(
        base_dir=tmp_path,
        drain_timeout=1,
        lease_duration=1,
        max_in_flight=1,
        connections={"AzureWebJobsStorage": connection},
    )
    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("received") == 1), 10, what="the host to take the message")
        [theirs] = await apoll(lambda: queue.receive(QUEUE, 1, 30, wait=2), 10, what="the message to come back")
        faults.fault("delete_message", 503, "ServiceUnavailable")
        proceed.set()
        await apoll(lambda: _true(host.metrics.get("leases_lost") == 1), 10, what="the completion to find it lost")
        assert host.metrics.get("succeeded") == 0
    assert theirs.pop_receipt is not None
    await queue.delete(QUEUE, theirs.id, theirs.pop_receipt)  # still the other consumer's


@pytest.mark.parametrize("backend_kind", ["oci"])
async def test_a_renewal_refused_in_a_way_the_backend_cannot_read_loses_the_lease_at_its_end(
    tmp_path: Path, connection: str, queue: QueueBackend, faults: OciTestServer
) -> None:
    """409 Conflict on every UpdateMessage (not a stale receipt's 404 or 400 InvalidParameter): renewals stop when the
    lease's own time is up, instead of every 0.25 s until the handler ends."""
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def waits(msg: QueueMessage) -> None:
        await asyncio.sleep(30)  # cancelled when its lease is lost

    await queue.put(QUEUE, encode("renewals refused", "base64"))
    faults.fault("update_message", 409, "Conflict", times=1000)
    config = HostConfig(
        base_dir=tmp_path, drain_timeout=1, lease_duration=1, connections={"AzureWebJobsStorage": connection}
    )
    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("leases_lost") == 1), 5, what="the lease to be given up")


@pytest.mark.parametrize("backend_kind", ["oci"])
async def test_poison_service_holds_a_delivery_past_max_dequeue_count_back_before_releasing_it(
    tmp_path: Path, connection: str, queue: QueueBackend, oci_server: OciTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """maxDequeueCount 1, the queue's delivery limit 2: the failed delivery is released at once, the next one (the
    host gives up on it) is hidden a second before the service's dead-letter queue takes it."""
    oci_server.set_delivery_limit(QUEUE, 2)
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def fails(msg: QueueMessage) -> None:
        raise RuntimeError("always fails")

    await queue.put(QUEUE, encode("poison", "base64"))
    config = HostConfig(
        base_dir=tmp_path, drain_timeout=1, max_dequeue_count=1, connections={"AzureWebJobsStorage": connection}
    )
    with captured_logs(monkeypatch, dispatcher) as logs:
        async with running(app, config):
            await apoll(lambda: queue.dead_letter_count(QUEUE), 10, what="the message in the dead-letter queue")  # type: ignore[attr-defined]
    released = [line for line in logs if line["event"] == "message released for the queue's dead-letter queue"]
    assert [line["visible_in"] for line in released] == [0.0, 1.0]
    [warning] = [line for line in logs if "dead-letter delivery limit is above maxDequeueCount" in line["event"]]
    assert warning["extra_deliveries"] == 1


@pytest.mark.parametrize("backend_kind", ["oci"])
async def test_a_queue_output_throttled_once_is_sent_again_and_its_trigger_succeeds_at_its_first_delivery(
    tmp_path: Path, connection: str, queue: QueueBackend, faults: OciTestServer
) -> None:
    """OCI throttles per queue: a 429 on the output's PutMessages stored nothing, so the backend sends it again
    (after its retry-after) instead of failing the attempt, which would count a delivery toward poison although the
    handler never failed."""
    outputs = f"{QUEUE}-out"
    await queue.create_queue(outputs)
    deliveries: list[int] = []
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name=outputs)
    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def forward(msg: QueueMessage, out: Out[str]) -> None:
        deliveries.append(msg.dequeue_count)
        out.set("forwarded")

    await queue.put(QUEUE, encode("order-1", "base64"))
    faults.fault("put_messages", 429, "TooManyRequests", retry_after=1)
    config = HostConfig(base_dir=tmp_path, drain_timeout=1, connections={"AzureWebJobsStorage": connection})
    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("succeeded") == 1), 15, what="the trigger to succeed")
    assert deliveries == [1]
    [sent] = await queue.receive(outputs, 20, 30)
    assert sent.dequeue_count == 1  # stored once
    assert await queue.approximate_count(QUEUE) == 0


async def _true(value: bool) -> bool:
    return value

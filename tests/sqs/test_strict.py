"""Receipt handles and the visibility maximum as SQS documents them, where moto is kinder: moto's server behind the
strict test server mode (:mod:`tests.sqs.rules`), through the real botocore.

Once another consumer has received a message, a renewal with the handle this worker holds is refused (in one of the
three ways the API Reference allows), and a delete with it is answered as done without deleting. Both must read as
a lost lease, single and in batches, and no such delete may count as a success. The 12-hour maximum is counted from
the current receive, so a message first received long ago is renewed like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.moto import REGION, Moto
from tests.sqs.rules import STALE_ANSWERS, SqsRules
from tests.support import apoll, captured_logs, running
from worker import QueueMessage, WorkerApp
from worker.backends.queues import LeaseGone, MessageNotFound, PopReceiptMismatch
from worker.backends.registry import open_backend
from worker.backends.sqs.queues import SqsBackend
from worker.runtime.host import Host
from worker.settings.config import HostConfig


@pytest.fixture
def strict(moto_server: Moto, request: pytest.FixtureRequest) -> Iterator[SqsRules]:
    """The strict proxy; ``request.param`` (indirect parametrization) names its options."""
    proxy = SqsRules(moto_server.endpoint, strict=True, **getattr(request, "param", {})).start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def sqs(strict: SqsRules, tmp_path: Path) -> AsyncIterator[SqsBackend]:
    backend = open_backend(strict.connection(REGION), tmp_path)
    assert isinstance(backend, SqsBackend)
    yield backend
    await backend.close()


def _steal(sqs: SqsBackend, strict: SqsRules, queue: str, message_ids: list[str]) -> None:
    """Another consumer receives the messages: each made visible with its latest handle, then received again (in a
    thread: a blocking botocore client of its own, through the proxy)."""
    import botocore.session

    client: Any = botocore.session.get_session().create_client("sqs", region_name=REGION, endpoint_url=strict.endpoint)
    url = client.get_queue_url(QueueName=queue)["QueueUrl"]
    for message_id in message_ids:
        client.change_message_visibility(QueueUrl=url, ReceiptHandle=strict.latest(message_id), VisibilityTimeout=0)
    taken: set[str] = set()
    while not taken >= set(message_ids):
        answer = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600, WaitTimeSeconds=1)
        taken |= {m["MessageId"] for m in answer.get("Messages", [])}
    client.close()


@pytest.mark.parametrize("strict", [{"stale_code": code} for code in STALE_ANSWERS], indirect=True, ids=list(STALE_ANSWERS))
@pytest.mark.parametrize("together", [1, 3], ids=["single", "batch"])
async def test_a_renewal_after_another_receive_is_a_lost_lease_and_no_later_delete_succeeds(
    strict: SqsRules, sqs: SqsBackend, queue_name: str, together: int
) -> None:
    await sqs.create_queue(queue_name)
    for n in range(together):
        await sqs.put(queue_name, f"m{n}")
    held = []
    while len(held) < together:
        held += await sqs.receive(queue_name, together - len(held), 30)
    await asyncio.to_thread(_steal, sqs, strict, queue_name, [m.id for m in held])
    strict.requests.clear()

    renewed = await asyncio.gather(
        *(sqs.update(queue_name, m.id, m.pop_receipt or "", 30) for m in held), return_exceptions=True
    )
    assert all(isinstance(r, MessageNotFound) for r in renewed), renewed
    sent = "ChangeMessageVisibility" if together == 1 else "ChangeMessageVisibilityBatch"
    assert strict.requests == [sent], strict.requests
    assert [what for _, _, what in strict.answered] == ["superseded"] * together

    deleted = await asyncio.gather(
        *(sqs.delete(queue_name, m.id, m.pop_receipt or "") for m in held), return_exceptions=True
    )
    assert all(isinstance(r, PopReceiptMismatch) for r in deleted), deleted
    assert strict.requests == [sent], "a delete with a lost handle was sent, which SQS would answer as done"
    assert await sqs.approximate_count(queue_name) == together  # the other consumer's still


async def test_the_strict_server_answers_a_superseded_delete_as_done_without_deleting(
    strict: SqsRules, sqs: SqsBackend, queue_name: str
) -> None:
    """The worse reading of DeleteMessage's "the request succeeds, but the message might not be deleted", which is
    what makes the backend refuse such a delete itself."""
    await sqs.create_queue(queue_name)
    await sqs.put(queue_name, "m")
    [held] = await sqs.receive(queue_name, 1, 30)
    await asyncio.to_thread(_steal, sqs, strict, queue_name, [held.id])
    client = sqs.client()
    url = client.get_queue_url(QueueName=queue_name)["QueueUrl"]
    answer = await asyncio.to_thread(client.delete_message, QueueUrl=url, ReceiptHandle=held.pop_receipt)
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert await sqs.approximate_count(queue_name) == 1


async def test_a_host_whose_message_another_consumer_received_loses_the_lease_and_never_deletes(
    strict: SqsRules, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """The renewal is refused (InvalidParameterValue naming the receipt handle): the lease is lost, the invocation
    told, its completion skipped; no storage error is counted and no delete is sent."""
    await sqs.create_queue(queue_name)
    message_id = (await sqs.put(queue_name, "long job")).id
    started, lost = asyncio.Event(), asyncio.Event()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def handler(msg: QueueMessage) -> None:
        started.set()
        await asyncio.wait_for(lost.wait(), 20)

    # One message in flight at most: while the handler holds it, the host receives nothing, so the other consumer,
    # not this host, is the one that receives the message again.
    config = HostConfig(
        base_dir=tmp_path,
        lease_duration=2,
        drain_timeout=1,
        message_encoding="none",
        max_in_flight=1,
        connections={"AzureWebJobsStorage": strict.connection(REGION, long_poll=1)},
    )
    async with running(app, config) as host:
        assert isinstance(host, Host)
        await asyncio.wait_for(started.wait(), 20)
        await asyncio.to_thread(_steal, sqs, strict, queue_name, [message_id])
        await apoll(lambda: _metric(host, "leases_lost"), 10, interval=0.1, what="the lease to be lost")
        lost.set()
        await apoll(
            lambda: _metric(host, "completions_skipped", "succeeded", "failed", "leases_lost"),
            10,
            interval=0.1,
            what="the invocation to end",
        )
        assert host.metrics.get("storage_errors") == 0
        assert host.metrics.get("succeeded") == 0
    assert not {"DeleteMessage", "DeleteMessageBatch"} & set(strict.requests), strict.requests
    assert ("ChangeMessageVisibility", message_id, "superseded") in strict.answered or (
        "ChangeMessageVisibilityBatch",
        message_id,
        "superseded",
    ) in strict.answered


async def _metric(host: Host, *names: str) -> bool:
    return any(host.metrics.get(name) for name in names)


@pytest.mark.parametrize("strict", [{"first_received_ago": 13 * 3600}], indirect=True)
async def test_a_message_first_received_over_twelve_hours_ago_is_renewed_from_its_current_receive(
    strict: SqsRules, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """Its ApproximateFirstReceiveTimestamp is 13 hours old: a handler three leases long still holds it, and it is
    deleted once."""
    await sqs.create_queue(queue_name)
    await sqs.put(queue_name, "received long ago")
    runs = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def handler(msg: QueueMessage) -> None:
        runs.append(msg.dequeue_count)
        await asyncio.sleep(3)  # the work: three leases long

    config = HostConfig(
        base_dir=tmp_path,
        lease_duration=1,
        drain_timeout=1,
        message_encoding="none",
        connections={"AzureWebJobsStorage": strict.connection(REGION, long_poll=1)},
    )
    async with running(app, config) as host:
        await apoll(lambda: _metric(host, "succeeded"), 20, interval=0.1, what="the message handled")
        assert (host.metrics.get("leases_lost"), host.metrics.get("storage_errors")) == (0, 0)
    assert runs == [1]
    assert await sqs.approximate_count(queue_name) == 0


@pytest.mark.parametrize("strict", [{"cap": 3}], indirect=True)
async def test_a_renewal_refused_at_the_maximum_loses_the_lease_without_a_storage_error(
    strict: SqsRules, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """A service whose maximum comes before the backend's own (here 3 s from the receive) refuses the renewal
    (InvalidParameterValue naming the visibility timeout): a lost lease, not storage trouble."""
    await sqs.create_queue(queue_name)
    await sqs.put(queue_name, "m")
    [held] = await sqs.receive(queue_name, 1, 2)
    assert held.pop_receipt is not None
    await apoll(
        lambda: _refused(sqs, queue_name, held.id, held.pop_receipt or ""),
        10,
        interval=0.5,
        what="the renewal to be refused at the maximum",
    )
    assert [what for _, _, what in strict.answered] == ["past the maximum"]
    with pytest.raises(LeaseGone):
        await sqs.delete(queue_name, held.id, held.pop_receipt)
    assert "DeleteMessage" not in strict.requests


async def _refused(sqs: SqsBackend, queue: str, message_id: str, handle: str) -> bool:
    try:
        await sqs.update(queue, message_id, handle, 2)
    except MessageNotFound as exc:
        assert "12-hour visibility maximum" in str(exc), exc
        return True
    return False


@pytest.mark.parametrize("strict", [{"over_limit": 2}], indirect=True)
async def test_a_receive_held_back_by_over_limit_is_a_warning_and_the_worker_recovers(
    strict: SqsRules, sqs: SqsBackend, tmp_path: Path, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS's OverLimit (too many messages in flight) passes as held messages complete: the listener backs off with a
    warning, counts no storage error, and then handles the message."""
    from worker.runtime import listener as listener_module

    await sqs.create_queue(queue_name)
    await sqs.put(queue_name, "m")
    handled = asyncio.Event()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def handler(msg: QueueMessage) -> None:
        handled.set()

    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        drain_timeout=1,
        message_encoding="none",
        connections={"AzureWebJobsStorage": strict.connection(REGION, long_poll=1)},
    )
    with captured_logs(monkeypatch, listener_module) as logs:
        async with running(app, config) as host:
            await asyncio.wait_for(handled.wait(), 30)
            assert host.metrics.get("storage_errors") == 0
    held_back = [line for line in logs if "held back" in line["event"]]
    assert held_back and all(line["log_level"] == "warning" for line in held_back), logs
    assert "120,000 messages" in held_back[0]["error"]
    assert not [line for line in logs if line["log_level"] == "error"], logs

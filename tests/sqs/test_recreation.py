"""SQS refuses a deleted queue's name for 60 seconds, which moto does not: these tests run on moto behind the
proxy of :mod:`tests.sqs.rules`, which answers CreateQueue as SQS documents it inside that time.

The backend reads the refusal as "try later" (TransientError), sent once, not retried within the call; a host
started inside the 60 s starts, and its listener creates the trigger queue when SQS frees the name; a poison copy
bound for a poison queue deleted just before waits, with its message's lease kept, until it can be made.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.moto import REGION, Moto
from tests.sqs.rules import RECREATE_AFTER, SqsRules
from tests.support import apoll, running
from worker import QueueMessage, WorkerApp
from worker.backends.queues import QueueNotFound, TransientError
from worker.backends.registry import open_backend
from worker.backends.sqs.queues import SqsBackend
from worker.settings.config import HostConfig

#: A shorter window than SQS's, for the test that waits for its end.
SHORT_WINDOW = 3.0


@pytest.fixture
def rules(moto_server: Moto, request: pytest.FixtureRequest) -> Iterator[SqsRules]:
    """The proxy with SQS's 60 s, or the window a test names with ``@pytest.mark.parametrize("window", ...)``."""
    window = getattr(request, "param", RECREATE_AFTER)
    proxy = SqsRules(moto_server.endpoint, recreate_after=window).start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def sqs(rules: SqsRules, tmp_path: Path) -> AsyncIterator[SqsBackend]:
    backend = open_backend(rules.connection(REGION), tmp_path)
    assert isinstance(backend, SqsBackend)
    yield backend
    await backend.close()


async def test_a_deleted_queues_name_is_refused_as_try_later_once_and_other_names_are_not(
    rules: SqsRules, sqs: SqsBackend, queue_name: str
) -> None:
    await sqs.create_queue(queue_name)
    await sqs.put(queue_name, "goes with the queue")
    await sqs.delete_queue(queue_name)
    rules.requests.clear()

    with pytest.raises(TransientError, match=f"will not create queue '{queue_name}' yet: .* less than 60 s ago"):
        await sqs.create_queue(queue_name)
    # One CreateQueue: a retry within the call's budget could not outlast the 60 s, and would count as an outage.
    assert rules.requests.count("CreateQueue") == 1, rules.requests
    assert queue_name not in await sqs.list_queues()
    await sqs.create_queue(f"{queue_name}-other")
    assert f"{queue_name}-other" in await sqs.list_queues()


@pytest.mark.parametrize("rules", [SHORT_WINDOW], indirect=True)
async def test_a_host_started_inside_the_refusal_starts_and_creates_its_trigger_queue_once_sqs_allows(
    rules: SqsRules, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """A redeploy right after a teardown: the host is not refused at start (the trigger queue cannot be made yet);
    its listener makes it on a later poll, and a message put then is handled. The window is shortened here."""
    await sqs.create_queue(queue_name)
    await sqs.delete_queue(queue_name)
    deleted = time.monotonic()
    rules.requests.clear()
    handled: list[str] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def take(msg: QueueMessage) -> None:
        handled.append(msg.get_body().decode())

    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.5,
        drain_timeout=1,
        message_encoding="none",
        batch_size=10,
        connections={"AzureWebJobsStorage": rules.connection(REGION, long_poll=1)},
    )

    async def put() -> bool:
        try:
            await sqs.put(queue_name, "after the wait")
        except QueueNotFound:
            return False
        return True

    async with running(app, config):
        await apoll(put, SHORT_WINDOW + 15, interval=0.2, what="the listener to create the trigger queue")
        created = time.monotonic()
        await apoll(lambda: _true(bool(handled)), 15, what="the message to be handled")
    assert handled == ["after the wait"]
    assert created - deleted >= SHORT_WINDOW
    assert rules.requests.count("CreateQueue") >= 2, "the first CreateQueue, at start, was not refused"


@pytest.mark.parametrize("rules", [SHORT_WINDOW], indirect=True)
async def test_a_poison_message_bound_for_a_poison_queue_deleted_just_before_lands_there_once_sqs_allows(
    rules: SqsRules, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """``worker poison purge`` on another tool, or a teardown, removed ``<queue>-poison``: the completion that copies
    a poison message there keeps the message's lease and is tried again until SQS frees the name, rather than
    leaving the message to come back after its lease (a minute here)."""
    poison = f"{queue_name}-poison"
    for name in (queue_name, poison):
        await sqs.create_queue(name)
    await sqs.delete_queue(poison)
    await sqs.put(queue_name, "bad")
    runs: list[str] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def fail(msg: QueueMessage) -> None:
        runs.append(msg.get_body().decode())
        raise RuntimeError("always fails")

    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.5,
        drain_timeout=1,
        message_encoding="none",
        batch_size=10,
        max_dequeue_count=1,
        lease_duration=60,
        connections={"AzureWebJobsStorage": rules.connection(REGION, long_poll=1)},
    )

    async def poisoned() -> list[str]:
        try:
            return [m.content for m in await sqs.receive(poison, 10, 30)]
        except QueueNotFound:
            return []

    async with running(app, config):
        assert await apoll(poisoned, SHORT_WINDOW + 15, interval=0.2, what="the poison copy") == ["bad"]
    assert runs == ["bad"]
    assert await sqs.approximate_count(queue_name) == 0


async def _true(value: bool) -> bool:
    return value

"""Amazon SQS as only SQS does it, on moto's server through the real botocore: FIFO groups and deduplication,
redrive policies against the host's poison, and a host handling, holding and poisoning messages.

What moto does not do as SQS does is named where it matters: the 12-hour visibility cap (moto has none) is
held by :func:`worker.backends.sqs.queues.within_cap`, tested on its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.moto import Moto
from tests.support import apoll, captured_logs, running
from worker import Out, QueueMessage, WorkerApp
from worker.backends.queues import MessageNotFound, QueueNotFound, writing_outputs_of
from worker.backends.registry import open_backend
from worker.backends.sqs.queues import SqsBackend, within_cap
from worker.model import StartupRefused
from worker.runtime.host import Host
from worker.runtime.poison import policy_for
from worker.settings.config import HostConfig


@pytest.fixture
async def sqs(moto_server: Moto, tmp_path: Path) -> AsyncIterator[SqsBackend]:
    backend = open_backend(moto_server.connection(), tmp_path)
    assert isinstance(backend, SqsBackend)
    yield backend
    await backend.close()


def test_a_renewal_is_cut_to_twelve_hours_from_the_first_receive_and_none_is_left_at_the_cap() -> None:
    first = datetime(2026, 1, 1, tzinfo=UTC)
    assert within_cap(600, first, first + timedelta(hours=1)) == 600
    assert within_cap(600, first, first + timedelta(hours=12, minutes=-5)) == 300
    assert within_cap(600, first, first + timedelta(hours=12)) == 0
    assert within_cap(600, first, first + timedelta(hours=13)) == 0


async def test_an_update_at_the_cap_is_a_lost_lease(sqs: SqsBackend, queue_name: str) -> None:
    """At the cap the message is visible to every consumer whatever is asked: the lease is lost, and said so before
    any request. (moto has no cap, so the first receive is set back twelve hours here.)"""
    await sqs.create_queue(queue_name)
    await sqs.put(queue_name, "long job")
    [got] = await sqs.receive(queue_name, 1, 30)
    assert got.pop_receipt is not None
    sqs._received_at[got.pop_receipt] = datetime.now(UTC) - timedelta(hours=12)
    with pytest.raises(MessageNotFound, match="12-hour visibility cap"):
        await sqs.update(queue_name, got.id, got.pop_receipt, 30)


async def test_a_fifo_group_is_handed_out_one_message_at_a_time_in_order(sqs: SqsBackend, queue_name: str) -> None:
    fifo = f"{queue_name}.fifo"
    await sqs.create_queue(fifo)
    for n in range(3):
        with writing_outputs_of("orders", f"trigger-{n}"):
            await sqs.put(fifo, f"a{n}")
    # Every put here is its own attempt's output, so each is its own group: put three of one group instead.
    with writing_outputs_of("orders", "one-group"):
        for n in range(3):
            await sqs.put(fifo, f"g{n}")
    got = await sqs.receive(fifo, 10, 30)
    groups_seen = [m.content for m in got if m.content.startswith("g")]
    assert groups_seen == ["g0"], f"one receive handed out {groups_seen} of one group"
    seen = []
    while len(seen) < 3:
        [head] = [m for m in got if m.content.startswith("g")]
        seen.append(head.content)
        assert head.pop_receipt is not None
        await sqs.delete(fifo, head.id, head.pop_receipt)
        got = await apoll(lambda: sqs.receive(fifo, 10, 30), 10, what="the group's next message") if len(seen) < 3 else []
    assert seen == ["g0", "g1", "g2"]


async def test_a_retried_attempts_outputs_to_a_fifo_queue_are_stored_once(sqs: SqsBackend, queue_name: str) -> None:
    fifo = f"{queue_name}.fifo"
    await sqs.create_queue(fifo)
    for _attempt in range(2):  # the same trigger message, twice: the second attempt puts what the first did
        with writing_outputs_of("orders", "message-1"):
            await sqs.put(fifo, "first output")
            await sqs.put(fifo, "second output")
    with writing_outputs_of("orders", "message-2"):
        await sqs.put(fifo, "first output")  # another message's output, the same text: a message of its own
    assert await sqs.approximate_count(fifo) == 3


async def _with_redrive(sqs: SqsBackend, queue: str, max_receives: int) -> None:
    await sqs.create_queue(queue)
    await sqs.create_queue(f"{queue}-dlq")
    arn = (await sqs.queue_attributes(f"{queue}-dlq"))["QueueArn"]
    client = sqs.client()
    await asyncio.to_thread(
        client.set_queue_attributes,
        QueueUrl=client.get_queue_url(QueueName=queue)["QueueUrl"],
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": max_receives})},
    )


async def test_poison_and_a_queues_redrive_policy_that_disagree_are_refused_at_start(
    moto_server: Moto, tmp_path: Path, queue_name: str
) -> None:
    host_poison = open_backend(moto_server.connection(poison="host"), tmp_path)
    service_poison = open_backend(moto_server.connection(poison="service"), tmp_path)
    assert isinstance(host_poison, SqsBackend) and isinstance(service_poison, SqsBackend)
    try:
        await _with_redrive(host_poison, queue_name, 3)
        await host_poison.create_queue(f"{queue_name}-plain")

        refused = await host_poison.poison_problem(queue_name, 3)
        assert refused is not None and "has a redrive policy" in refused and "poison=service" in refused
        assert await host_poison.poison_problem(f"{queue_name}-plain", 3) is None
        assert "has no redrive policy" in (await service_poison.poison_problem(f"{queue_name}-plain", 3) or "")
        assert "moves a message after 3 receives, but maxDequeueCount is 5" in (
            await service_poison.poison_problem(queue_name, 5) or ""
        )
        assert await service_poison.poison_problem(queue_name, 3) is None
    finally:
        await host_poison.close()
        await service_poison.close()


async def test_without_poison_in_the_connection_each_queue_says_where_its_poison_goes(
    sqs: SqsBackend, queue_name: str
) -> None:
    """A queue with a redrive policy leaves poison to it, as Lambda does; one without has it copied to
    ``<queue>-poison``; neither is refused, whatever maxDequeueCount is."""
    await _with_redrive(sqs, queue_name, 3)
    await sqs.create_queue(f"{queue_name}-plain")
    for queue, redrive in ((queue_name, True), (f"{queue_name}-plain", False)):
        assert await sqs.poison_problem(queue, 5) is None
        assert sqs.dead_letters_for(queue) is redrive
        assert (
            policy_for(sqs, queue).unreadable(queue) is not None
            if redrive
            else policy_for(sqs, queue).where(queue) == f"{queue_name}-plain-poison"
        )


async def test_a_host_on_a_queue_with_a_redrive_policy_leaves_poison_to_it_by_default(
    moto_server: Moto, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """A SAM sample's queue (a redrive policy) on a connection that says nothing of poison: the failing message ends
    in the dead-letter queue, moved by SQS, and no ``<queue>-poison`` is made."""
    await _with_redrive(sqs, queue_name, 2)
    await sqs.put(queue_name, "bad")
    await sqs.put(queue_name, "ok")
    runs: dict[str, int] = {}
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def handler(msg: QueueMessage) -> None:
        body = msg.get_body().decode()
        runs[body] = runs.get(body, 0) + 1
        if body == "bad":
            raise RuntimeError("always fails")

    config = HostConfig(
        base_dir=tmp_path,
        max_dequeue_count=2,
        drain_timeout=1,
        message_encoding="none",
        connections={"AzureWebJobsStorage": moto_server.connection(long_poll=1)},
    )
    async with running(app, config):
        await apoll(lambda: _count(sqs, f"{queue_name}-dlq"), 30, interval=0.2, what="the dead-letter queue to hold it")
    assert runs == {"ok": 1, "bad": 2}
    [dead] = await sqs.receive(f"{queue_name}-dlq", 10, 30)
    assert dead.content == "bad"
    assert f"{queue_name}-poison" not in await sqs.list_queues()


async def test_a_host_on_sqs_deletes_holds_a_long_handler_and_poisons(
    moto_server: Moto, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """Handled and deleted; a handler three times longer than the lease is not handed out again (the host renews
    it); a message failing every attempt ends on ``<queue>-poison``."""
    await sqs.create_queue(queue_name)
    runs: dict[str, int] = {}

    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def handler(msg: QueueMessage) -> None:
        body = msg.get_body().decode()
        runs[body] = runs.get(body, 0) + 1
        if body == "slow":
            await asyncio.sleep(3.5)  # the work: three and a half leases long
        if body == "bad":
            raise RuntimeError("always fails")

    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        lease_duration=1,
        max_dequeue_count=2,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": moto_server.connection(long_poll=1)},
        message_encoding="none",
        batch_size=10,
    )
    for body in ("ok", "slow", "bad"):
        await sqs.put(queue_name, body)
    async with running(app, config) as host:
        assert isinstance(host, Host)
        poison = f"{queue_name}-poison"

        async def settled() -> bool:
            return (
                runs.get("slow") == 1
                and runs.get("ok") == 1
                and await _count(sqs, poison) == 1
                and await sqs.approximate_count(queue_name) == 0
            )

        await apoll(settled, 20, interval=0.2, what="ok and slow handled, bad poisoned")
    assert runs == {"ok": 1, "slow": 1, "bad": 2}, "the slow message came back while its handler ran"
    [poisoned] = await sqs.receive(poison, 10, 30)
    assert poisoned.content == "bad"


async def _count(sqs: SqsBackend, queue: str) -> int:
    try:
        return await sqs.approximate_count(queue)
    except QueueNotFound:  # the poison queue is made with the first poison message
        return 0


async def test_renewals_and_deletes_made_together_go_in_batches_and_each_reads_its_own_entry(
    sqs: SqsBackend, queue_name: str
) -> None:
    """Twenty renewals, then twenty deletes, at once cost fewer than twenty requests each; one whose receipt SQS
    refuses fails alone."""
    await sqs.create_queue(queue_name)
    for n in range(20):
        await sqs.put(queue_name, f"m{n}")
    taken = [m for _ in range(4) for m in await sqs.receive(queue_name, 10, 30)]
    assert len(taken) == 20
    requests: list[str] = []
    sqs.client().meta.events.register("before-call.sqs.*", lambda model, **_: requests.append(model.name))

    renewed = await asyncio.gather(*(sqs.update(queue_name, m.id, m.pop_receipt or "", 60) for m in taken))
    assert all(r.pop_receipt == m.pop_receipt for r, m in zip(renewed, taken, strict=True))
    assert "ChangeMessageVisibilityBatch" in requests and len(requests) < 20, requests
    requests.clear()
    results = await asyncio.gather(
        *(sqs.delete(queue_name, m.id, m.pop_receipt or "") for m in taken),
        sqs.delete(queue_name, "never-received", "not-a-receipt-handle"),
        return_exceptions=True,
    )
    assert results[:20] == [None] * 20
    assert isinstance(results[20], MessageNotFound), results[20]
    assert "DeleteMessageBatch" in requests and len(requests) < 21, requests
    assert await sqs.approximate_count(queue_name) == 0


async def test_deletes_made_in_one_turn_of_the_loop_go_in_one_request(sqs: SqsBackend, queue_name: str) -> None:
    """A received batch's handlers often finish in the same turn of the event loop: their ten deletes cost one
    DeleteMessageBatch, none of them a DeleteMessage of its own (the first two went alone before)."""
    await sqs.create_queue(queue_name)
    for n in range(10):
        await sqs.put(queue_name, f"m{n}")
    taken = await sqs.receive(queue_name, 10, 30)
    while len(taken) < 10:  # a receive may bring fewer than are visible
        taken += await sqs.receive(queue_name, 10 - len(taken), 30)
    requests: list[str] = []
    sqs.client().meta.events.register("before-call.sqs.*", lambda model, **_: requests.append(model.name))

    await asyncio.gather(*(sqs.delete(queue_name, m.id, m.pop_receipt or "") for m in taken))
    assert requests == ["DeleteMessageBatch"], requests
    assert await sqs.approximate_count(queue_name) == 0


async def test_a_host_built_in_code_refuses_a_batch_larger_than_sqs_returns(moto_server: Moto, tmp_path: Path) -> None:
    """worker run's preflight refuses it by the connection's kind; a host built in code is refused by the backend's
    own limits, with every such option the user gave named, rather than failing each receive."""
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="orders")
    async def handler(msg: QueueMessage) -> None:
        raise AssertionError("never runs")

    config = HostConfig(
        base_dir=tmp_path,
        connections={"AzureWebJobsStorage": moto_server.connection()},
        batch_size=32,
        lease_duration=13 * 3600,
    )
    with pytest.raises(StartupRefused) as refused:
        await asyncio.wait_for(Host(app, config, burst=True).run(), 60)
    assert [line.partition(" is ")[0] for line in refused.value.problems] == [
        "function handler, trigger queueTrigger (msg): extensions.queues.batchSize",
        "function handler, trigger queueTrigger (msg): worker.leaseDuration",
    ], refused.value.problems
    assert "at most 10 messages a receive returns" in refused.value.problems[0]


async def test_a_plain_app_with_default_settings_handles_its_messages_in_batches_of_ten(
    moto_server: Moto, sqs: SqsBackend, tmp_path: Path, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Functions' batch of 16, which the user never gave, becomes SQS's 10 with one line saying so; every message is
    handled and no receive asks for more than SQS returns."""
    from worker.runtime import host as host_module

    await sqs.create_queue(queue_name)
    for n in range(25):
        await sqs.put(queue_name, f"m{n}")
    handled: set[str] = set()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def orders(msg: QueueMessage) -> None:
        handled.add(msg.get_body().decode())

    config = HostConfig(
        base_dir=tmp_path,
        message_encoding="none",
        drain_timeout=1,
        connections={"AzureWebJobsStorage": moto_server.connection(long_poll=1)},
    )
    with captured_logs(monkeypatch, host_module) as logs:
        async with running(app, config):
            await apoll(lambda: _done(handled, 25), 30, interval=0.1, what="every message handled")
    assert handled == {f"m{n}" for n in range(25)}
    [line] = [entry for entry in logs if entry["event"] == "settings not given take the backend's limit"]
    assert line["log_level"] == "info" and line["function"] == "orders"
    assert line["settings"] == [
        "extensions.queues.batchSize 16 -> 10 (Amazon SQS: at most 10 messages a receive returns)"
    ], line


async def test_an_output_larger_than_sqs_takes_poisons_its_message_at_once_naming_the_limit(
    moto_server: Moto, sqs: SqsBackend, tmp_path: Path, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No attempt could send it, so none is retried: the first attempt's message goes to the poison queue."""
    from worker.middleware import bindings

    await sqs.create_queue(queue_name)
    await sqs.put(queue_name, "make a big one")
    attempts = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    @app.queue_output(arg_name="out", queue_name=f"{queue_name}-out")
    async def handler(msg: QueueMessage, out: Out[str]) -> None:
        attempts.append(msg.dequeue_count)
        out.set("x" * (1024 * 1024 + 1))

    config = HostConfig(
        base_dir=tmp_path,
        drain_timeout=1,
        message_encoding="none",
        connections={"AzureWebJobsStorage": moto_server.connection(long_poll=1)},
    )
    with captured_logs(monkeypatch, bindings) as logs:
        async with running(app, config):
            await apoll(lambda: _count(sqs, f"{queue_name}-poison"), 20, interval=0.1, what="the message poisoned")
    assert attempts == [1]
    [line] = [entry for entry in logs if entry["event"].startswith("output is larger")]
    assert "the limit is 1048576 bytes" in line["error"], line


async def test_a_batching_window_gathers_receives_until_batch_size_or_the_window(
    moto_server: Moto, sqs: SqsBackend, tmp_path: Path, queue_name: str
) -> None:
    """Lambda's MaximumBatchingWindowInSeconds: messages sent a moment apart make one batch; a full batch goes at
    once, without waiting the window out."""
    await sqs.create_queue(queue_name)
    batches: list[tuple[float, list[str]]] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msgs", queue_name=queue_name, cardinality="many", batching_window=3)
    async def handler(msgs: list[QueueMessage]) -> None:
        batches.append((asyncio.get_running_loop().time(), [m.get_body().decode() for m in msgs]))

    config = HostConfig(
        base_dir=tmp_path,
        drain_timeout=1,
        message_encoding="none",
        batch_size=4,
        connections={"AzureWebJobsStorage": moto_server.connection(long_poll=1)},
    )
    async with running(app, config):
        await sqs.put(queue_name, "first")
        await asyncio.sleep(0.5)  # the second comes half a second later: within the window, not within one receive
        await sqs.put(queue_name, "second")
        await apoll(lambda: _done({m for _, b in batches for m in b}, 2), 10, interval=0.05, what="both handled")
        assert [sorted(b) for _, b in batches] == [["first", "second"]]
        batches.clear()
        for n in range(4):
            await sqs.put(queue_name, f"full-{n}")
        sent = asyncio.get_running_loop().time()
        await apoll(lambda: _done({m for _, b in batches for m in b}, 4), 10, interval=0.05, what="four handled")
        assert len(batches) == 1 and batches[0][0] - sent < 2.5, batches


async def _done(handled: set[str], n: int) -> bool:
    return len(handled) == n

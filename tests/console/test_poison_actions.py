"""The console's poison view and actions on real storage (the embedded queue, Azurite): one message requeued by id
among others, which stay in the poison queue and visible; a message not there; purge; a missing poison queue; and
OCI Queue's own dead-letter queue (its test server), which is counted and purged but cannot be read or requeued."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support import apoll
from tests.tracing.receiver import Receiver
from worker.backends.embedded.queues import SqliteBackend
from worker.backends.queues import QueueBackend, RawMessage
from worker.bindings.encoding import encode
from worker.observability import tracing
from worker.runtime.console.actions import BulkActions
from worker.runtime.console.poison import ActionRefused, PoisonOf
from worker.runtime.poison import ATTEMPTS_PROPERTY, REASON_PROPERTY

if TYPE_CHECKING:
    from tests.oci.fixture import OciTestServer


def ignore(done: int, most: int) -> None:
    """Progress nobody watches."""


async def poisoned(backend: QueueBackend, queue: str, bodies: list[str]) -> list[str]:
    await backend.create_queue(f"{queue}-poison")
    return [(await backend.put(f"{queue}-poison", encode(body, "base64"), time_to_live=-1)).id for body in bodies]


async def test_one_message_is_requeued_by_id_and_the_others_stay_visible(backend: QueueBackend, queue_name: str) -> None:
    ids = await poisoned(backend, queue_name, ["a", "b", "<b>c</b>"])
    poison = PoisonOf("f", queue_name, backend, "base64")
    look = await poison.look()
    assert (look["count"], look["where"]) == (3, f"{queue_name}-poison")
    if backend.capabilities.peek:
        assert sorted(m["body"] for m in look["messages"]) == ["<b>c</b>", "a", "b"]

    assert await poison.requeue(ids[2]) == 1
    [back] = await backend.receive(queue_name, 32, 30)
    assert back.content == encode("<b>c</b>", "base64")
    # The others were looked at on the way and are visible again at once, not hidden for the hold.
    left = await backend.receive(f"{queue_name}-poison", 32, 30)
    assert sorted(m.id for m in left) == sorted(ids[:2])

    with pytest.raises(ActionRefused) as refused:
        await poison.requeue("no-such-message")
    assert refused.value.status == 404


async def test_requeue_all_and_purge_count_what_they_moved(backend: QueueBackend, queue_name: str) -> None:
    poison = PoisonOf("f", queue_name, backend, "base64")
    assert await poison.purge(ignore) == 0  # no poison queue yet: nothing to do
    await poisoned(backend, queue_name, ["1", "2", "3"])
    assert await poison.requeue_all(ignore) == 3
    assert await backend.approximate_count(queue_name) == 3
    await poisoned(backend, queue_name, ["4", "5"])
    assert await poison.purge(ignore) == 2
    assert (await poison.look())["count"] == 0
    assert await backend.approximate_count(queue_name) == 3


@pytest.mark.parametrize("backend_kind", ["sqlite"], indirect=True)  # Azure Storage's messages have no properties
async def test_a_message_requeued_by_id_keeps_its_properties(backend: QueueBackend, queue_name: str) -> None:
    assert backend.capabilities.message_properties
    carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    await backend.create_queue(f"{queue_name}-poison")
    message = await backend.put(f"{queue_name}-poison", encode("traced", "base64"), properties=carried)
    assert await PoisonOf("f", queue_name, backend, "base64").requeue(message.id) == 1
    [back] = await backend.receive(queue_name, 32, 30)
    assert dict(back.properties) == carried


@pytest.mark.parametrize("backend_kind", ["sqlite"], indirect=True)  # Azure Storage's messages have no properties
async def test_the_poison_table_shows_the_last_failure_and_attempts_and_a_requeue_leaves_them(
    backend: QueueBackend,
    queue_name: str,
) -> None:
    carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    failure = {REASON_PROPERTY: "ValueError: no such order", ATTEMPTS_PROPERTY: "5"}
    await backend.create_queue(f"{queue_name}-poison")
    message = await backend.put(f"{queue_name}-poison", encode("order", "base64"), properties=carried | failure)
    poison = PoisonOf("f", queue_name, backend, "base64")

    [row] = (await poison.look())["messages"]
    assert (row["lastFailure"], row["attempts"]) == ("ValueError: no such order", 5)
    assert await poison.requeue(message.id) == 1
    [back] = await backend.receive(queue_name, 32, 30)
    assert dict(back.properties) == carried


@pytest.mark.parametrize("backend_kind", ["sqlite"], indirect=True)
async def test_a_message_requeued_from_a_traced_host_keeps_its_trace_context(
    backend: QueueBackend,
    queue_name: str,
    otlp_receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With traces on, the host's console acts through the host's own backend, whose puts write a trace context: the
    # requeued message must keep its producer's, not start a trace of the console's.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    telemetry = tracing.start(os.environ, "queueworker")
    assert telemetry is not None
    try:
        traced = telemetry.traced(backend)
        carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}
        await backend.create_queue(f"{queue_name}-poison")
        first = await backend.put(f"{queue_name}-poison", encode("one", "base64"), properties=carried)
        second = await backend.put(f"{queue_name}-poison", encode("two", "base64"), properties=carried)
        poison = PoisonOf("f", queue_name, traced, "base64")
        assert await poison.requeue(first.id) == 1  # the page's single requeue
        [back] = await backend.receive(queue_name, 32, 30)
        assert dict(back.properties) == carried
        await backend.delete(queue_name, back.id, back.pop_receipt or "")
        assert await poison.requeue_all(ignore) == 1  # and requeue all alike
        [back] = await backend.receive(queue_name, 32, 30)
        assert (back.content, dict(back.properties)) == (second.content, carried)
    finally:
        telemetry.shutdown()


class PoisonsAtOnce(SqliteBackend):
    """The embedded queue as a running host meets a message that fails every attempt: whatever is put on the trigger
    queue lands straight back in its poison queue (what the host's completion does once the attempts are spent)."""

    def __init__(self, path: Path, queue: str) -> None:
        super().__init__(path)
        self.queue = queue

    async def put(self, queue: str, content: str, **options: Any) -> RawMessage:
        return await super().put(f"{queue}-poison" if queue == self.queue else queue, content, **options)


async def test_requeue_all_ends_while_each_requeued_message_comes_straight_back(tmp_path: Path, queue_name: str) -> None:
    backend = PoisonsAtOnce(tmp_path / "queues.sqlite3", queue_name)
    try:
        await poisoned(backend, queue_name, [str(n) for n in range(40)])  # more than one receive's worth
        seen: list[tuple[int, int]] = []
        async with asyncio.timeout(20):  # before a requeue all was bounded, it never ended here
            moved = await PoisonOf("f", queue_name, backend, "base64").requeue_all(lambda *p: seen.append(p))
        assert moved == 40
        assert seen[0] == (0, 40) and seen[-1] == (40, 40)
        assert await backend.approximate_count(f"{queue_name}-poison") == 40
    finally:
        await backend.close()


async def test_a_bulk_action_runs_beside_its_request_one_at_a_time(tmp_path: Path, queue_name: str) -> None:
    backend = SqliteBackend(tmp_path / "queues.sqlite3")
    looks: list[int] = []

    async def looked() -> None:
        looks.append(1)

    try:
        await poisoned(backend, queue_name, ["1", "2", "3"])
        poison = PoisonOf("f", queue_name, backend, "base64")
        bulk = BulkActions(looked)
        started = bulk.start(poison, "requeue-all", {"peer": "127.0.0.1"})
        assert started.view()["running"] is True
        for second in (lambda: bulk.start(poison, "purge", {}), lambda: bulk.check_idle("f")):
            with pytest.raises(ActionRefused) as refused:
                second()
            assert refused.value.status == 409 and "requeue-all of f is still running" in str(refused.value)

        async def ended() -> dict[str, Any] | None:
            [view] = bulk.views()
            return None if view["running"] or not looks else view  # ended, and the view after it was asked for

        view = await apoll(ended, 10, what="the requeue all to end")
        assert (view["messages"], view["most"], view["error"], looks) == (3, 3, None, [1])
        assert await backend.approximate_count(queue_name) == 3
        bulk.check_idle("f")  # ended: the next may start
    finally:
        await backend.close()


@pytest.mark.parametrize("backend_kind", ["oci"], indirect=True)
async def test_the_services_dead_letter_queue_is_counted_and_purged_never_requeued(
    backend: QueueBackend, queue_name: str, oci_server: OciTestServer
) -> None:
    await backend.create_queue(queue_name)
    oci_server.set_delivery_limit(queue_name, 1)
    await backend.put(queue_name, "spent")
    [message] = await backend.receive(queue_name, 1, 30)
    assert message.pop_receipt is not None
    await backend.update(queue_name, message.id, message.pop_receipt, 0)  # its one delivery spent: dead-lettered
    poison = PoisonOf("f", queue_name, backend, "base64")

    async def dead_lettered() -> dict[str, Any] | None:
        look = await poison.look()
        return look if look["count"] == 1 else None

    look = await apoll(dead_lettered, 10, what="the message in the dead-letter queue")
    assert (look["deadLetter"], look["messages"], look["canRequeue"]) == (True, None, False)
    with pytest.raises(ActionRefused) as refused:
        await poison.requeue_all(ignore)
    assert refused.value.status == 409 and "cannot be requeued" in str(refused.value)
    assert await poison.purge(ignore) == 1
    assert (await poison.look())["count"] == 0

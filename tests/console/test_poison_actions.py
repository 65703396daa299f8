"""The console's poison view and actions on real storage (the embedded queue, Azurite): one message requeued by id
among others, which stay in the poison queue and visible; a message not there; purge; a missing poison queue; and
OCI Queue's own dead-letter queue (its test server), which is counted and purged but cannot be read or requeued."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.support import apoll
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode
from worker.runtime.console.poison import ActionRefused, PoisonOf

if TYPE_CHECKING:
    from tests.oci.fixture import OciTestServer


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
    assert await poison.purge() == 0  # no poison queue yet: nothing to do
    await poisoned(backend, queue_name, ["1", "2", "3"])
    assert await poison.requeue(None) == 3
    assert await backend.approximate_count(queue_name) == 3
    await poisoned(backend, queue_name, ["4", "5"])
    assert await poison.purge() == 2
    assert (await poison.look())["count"] == 0
    assert await backend.approximate_count(queue_name) == 3


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
        await poison.requeue(None)
    assert refused.value.status == 409 and "cannot be requeued" in str(refused.value)
    assert await poison.purge() == 1
    assert (await poison.look())["count"] == 0

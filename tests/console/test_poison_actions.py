"""The console's poison view and actions on real storage (the embedded queue, Azurite): one message requeued by id
among others, which stay in the poison queue and visible; a message not there; purge; a missing poison queue."""

from __future__ import annotations

import pytest

from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode
from worker.runtime.console.poison import ActionRefused, PoisonOf


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

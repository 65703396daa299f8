"""``worker poison`` and ``worker stats`` as commands (in-process, tests/cli.py), on the embedded queue and on Azurite."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.cli import Ran, run_cli
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode

QUEUE = "orders"


async def worker(tmp_path: Path, connection: str | None, *args: str) -> Ran:
    """``worker ARGS`` in-process (tests/cli.py), off the test's event loop: the CLI runs a loop of its own."""
    env = {} if connection is None else {"AzureWebJobsStorage": connection}
    return await asyncio.to_thread(run_cli, tmp_path, *args, env=env)


def as_json(result: Ran) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def test_poison_requeue_round_trip(tmp_path: Path, connection: str | None, queue: QueueBackend) -> None:
    bodies = ["first", "second", '{"third": 3}']
    # Where messages carry properties, a requeued one keeps them (the trace context of the send that poisoned it).
    carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    properties = carried if queue.capabilities.message_properties else None
    await queue.create_queue(f"{QUEUE}-poison")
    for body in bodies:
        await queue.put(
            f"{QUEUE}-poison", encode(body, "base64"), time_to_live=-1, properties=properties if body == "first" else None
        )

    listed = as_json(await worker(tmp_path, connection, "poison", "list", QUEUE, "--json"))
    assert sorted(m["body"] for m in listed) == sorted(bodies)
    assert as_json(await worker(tmp_path, connection, "stats", "--json")) == [{"queue": QUEUE, "messages": 0, "poison": 3}]

    moved = as_json(await worker(tmp_path, connection, "poison", "requeue", QUEUE, "--max", "2", "--json"))
    assert (moved["messages"], moved["before"]) == (2, 3)
    rest = as_json(await worker(tmp_path, connection, "poison", "requeue", QUEUE, "--json"))
    assert rest["messages"] == 1

    back = await queue.peek(QUEUE, 32)
    assert sorted(m.content for m in back) == sorted(encode(b, "base64") for b in bodies)
    assert all(m.dequeue_count == 0 for m in back), "requeued messages start over"
    assert {m.content: dict(m.properties) for m in back} == {
        encode(b, "base64"): (properties or {}) if b == "first" else {} for b in bodies
    }
    assert as_json(await worker(tmp_path, connection, "stats", "--json")) == [{"queue": QUEUE, "messages": 3, "poison": 0}]


async def test_poison_purge_and_an_empty_poison_queue(tmp_path: Path, connection: str | None, queue: QueueBackend) -> None:
    assert as_json(await worker(tmp_path, connection, "poison", "list", QUEUE, "--json")) == []
    await queue.create_queue(f"{QUEUE}-poison")
    await queue.put(f"{QUEUE}-poison", encode("doomed", "base64"))
    purged = as_json(await worker(tmp_path, connection, "poison", "purge", QUEUE, "--json"))
    assert purged["messages"] == 1
    assert await queue.approximate_count(f"{QUEUE}-poison") == 0
    assert await queue.approximate_count(QUEUE) == 0
    bad = await worker(tmp_path, connection, "poison", "requeue", QUEUE, "--max", "0")
    assert bad.returncode == 2 and "at least 1" in bad.stderr

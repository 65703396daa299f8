"""``worker poison`` and ``worker stats`` as real commands, on the embedded queue and on Azurite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.host.processes import REPO
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode

QUEUE = "orders"


def worker(tmp_path: Path, connection: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AzureWebJobsStorage" and not k.startswith("WORKER__")}
    env["PYTHONPATH"] = str(REPO)
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    return subprocess.run([sys.executable, "-m", "worker", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def test_poison_requeue_round_trip(tmp_path: Path, connection: str | None, queue: QueueBackend) -> None:
    bodies = ["first", "second", '{"third": 3}']
    await queue.create_queue(f"{QUEUE}-poison")
    for body in bodies:
        await queue.put(f"{QUEUE}-poison", encode(body, "base64"), time_to_live=-1)

    listed = as_json(worker(tmp_path, connection, "poison", "list", QUEUE, "--json"))
    assert sorted(m["body"] for m in listed) == sorted(bodies)
    assert as_json(worker(tmp_path, connection, "stats", "--json")) == [
        {"queue": QUEUE, "messages": 0, "poison": 3}
    ]

    moved = as_json(worker(tmp_path, connection, "poison", "requeue", QUEUE, "--max", "2", "--json"))
    assert (moved["messages"], moved["before"]) == (2, 3)
    rest = as_json(worker(tmp_path, connection, "poison", "requeue", QUEUE, "--json"))
    assert rest["messages"] == 1

    back = await queue.peek(QUEUE, 32)
    assert sorted(m.content for m in back) == sorted(encode(b, "base64") for b in bodies)
    assert all(m.dequeue_count == 0 for m in back), "requeued messages start over"
    assert as_json(worker(tmp_path, connection, "stats", "--json")) == [
        {"queue": QUEUE, "messages": 3, "poison": 0}
    ]


async def test_poison_purge_and_an_empty_poison_queue(tmp_path: Path, connection: str | None,
                                                      queue: QueueBackend) -> None:
    assert as_json(worker(tmp_path, connection, "poison", "list", QUEUE, "--json")) == []
    await queue.create_queue(f"{QUEUE}-poison")
    await queue.put(f"{QUEUE}-poison", encode("doomed", "base64"))
    purged = as_json(worker(tmp_path, connection, "poison", "purge", QUEUE, "--json"))
    assert purged["messages"] == 1
    assert await queue.approximate_count(f"{QUEUE}-poison") == 0
    assert await queue.approximate_count(QUEUE) == 0
    bad = worker(tmp_path, connection, "poison", "requeue", QUEUE, "--max", "0")
    assert bad.returncode == 2 and "at least 1" in bad.stderr

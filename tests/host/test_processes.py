"""The lease lifecycle across real worker processes and real signals, on the embedded queue.

Each test starts ``worker run`` subprocesses on one queue file and reads what
the handler recorded (tests/apps/recording.py) and what the host logged.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import apoll, poll
from worker.encoding import encode
from worker.queues.base import QueueBackend, QueueNotFound, RawMessage

pytestmark = pytest.mark.subprocess

QUEUE = "work"

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def start_worker(tmp_path: Path, record_db: Path, connection: str | None) -> Iterator[StartWorker]:
    """Start workers on one host.yaml and the backend under test; every one still running at the end is killed."""
    started: list[WorkerProcess] = []

    def start(name: str = "worker", mode: str = "ok", hold: float = 60, **settings: Any) -> WorkerProcess:
        config = write_host_yaml(tmp_path, settings.get("queues"), settings.get("worker"))
        env = {"RECORD_DB": str(record_db), "HANDLER_MODE": mode, "HOLD_SECONDS": str(hold), "TRIGGER_QUEUE": QUEUE}
        if connection is not None:
            env["AzureWebJobsStorage"] = connection
        process = WorkerProcess(config, env, name=name).start()
        started.append(process)
        process.wait_for_log("host started")
        return process

    yield start
    for process in started:
        process.kill()


async def send(backend: QueueBackend, *bodies: str) -> list[str]:
    return [(await backend.put(QUEUE, encode(body, "base64"))).id for body in bodies]


def events(record_db: Path, event: str) -> list[dict[str, Any]]:
    return [row for row in attempts(record_db) if row["event"] == event]


async def test_handler_outliving_several_leases_is_handled_once_while_another_worker_polls(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path
) -> None:
    """Lease 2 s renewed every second; the handler runs 7 s; the second worker must never get the message."""
    settings = {"worker": {"leaseDuration": "2s"}}
    first = start_worker("first", mode="hold", hold=7, **settings)
    second = start_worker("second", mode="hold", hold=7, **settings)
    [message_id] = await send(queue, "long job")

    done = poll(lambda: events(record_db, "done"), 40, what="the handler to finish")
    assert [row["message_id"] for row in done] == [message_id]
    await apoll(lambda: _empty(queue), 10, what="the message to be deleted")

    assert first.stop() == 0 and second.stop() == 0
    starts = events(record_db, "start")
    assert len(starts) == 1, f"handled more than once: {starts}"
    holder, other = (first, second) if starts[0]["pid"] == first.pid else (second, first)
    assert holder.totals()["lease_renewals"] >= 3
    assert holder.totals()["succeeded"] == 1
    assert other.totals().get("received", 0) == 0
    assert holder.totals().get("leases_lost", 0) == 0


async def _empty(backend: QueueBackend) -> bool:
    return await backend.approximate_count(QUEUE) == 0


async def _peek_if_exists(backend: QueueBackend, queue: str) -> list[RawMessage]:
    """The poison queue is made by the worker on first need; until then there is nothing to see."""
    try:
        return await backend.peek(queue, 32)
    except QueueNotFound:
        return []


async def test_failing_message_reaches_poison_after_exactly_max_dequeue_count(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path
) -> None:
    worker = start_worker(mode="fail", queues={"maxDequeueCount": 3})
    [message_id] = await send(queue, "always fails")

    poisoned = await apoll(lambda: _peek_if_exists(queue, f"{QUEUE}-poison"), 30, what="a poison message")
    assert worker.stop() == 0

    assert [p.content for p in poisoned] == [encode("always fails", "base64")]
    tries = events(record_db, "start")
    assert [(t["message_id"], t["dequeue_count"]) for t in tries] == [(message_id, 1), (message_id, 2), (message_id, 3)]
    assert await queue.approximate_count(QUEUE) == 0
    moved = [line for line in worker.lines() if line.get("event") == "message moved to the poison queue"]
    assert len(moved) == 1 and "this handler always fails" in moved[0]["reason"]
    assert moved[0]["poison_message_id"] == poisoned[0].id


async def test_kill_9_mid_handler_then_redelivery_once_the_lease_ends(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path
) -> None:
    settings = {"worker": {"leaseDuration": "2s"}}
    doomed = start_worker("doomed", mode="hold-first", **settings)
    [message_id] = await send(queue, "survives a crash")
    poll(lambda: events(record_db, "start"), 20, what="the first attempt to start")

    doomed.send_signal(signal.SIGKILL)
    assert doomed.wait() == -signal.SIGKILL
    # Nobody released it: it is invisible until the lease taken by the dead worker runs out.
    assert await queue.peek(QUEUE) == []

    heir = start_worker("heir", mode="hold-first", **settings)
    done = poll(lambda: events(record_db, "done"), 30, what="the redelivered message to be handled")
    assert [(d["message_id"], d["dequeue_count"], d["pid"]) for d in done] == [(message_id, 2, heir.pid)]
    await apoll(lambda: _empty(queue), 10, what="the message to be deleted")
    assert heir.stop() == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_drains_the_running_handler_and_releases_the_prefetched_rest(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path, signum: int
) -> None:
    """One handler thread and a batch of four: one runs, three wait; the signal must not lose or delay them."""
    ids = await send(queue, "a", "b", "c", "d")
    worker = start_worker(mode="hold", hold=2, queues={"batchSize": 4}, worker={"handlerThreads": 1})
    [first] = poll(lambda: events(record_db, "start"), 20, what="the first handler to start")

    assert worker.stop(signum) == 0

    assert [(d["message_id"], d["event"]) for d in events(record_db, "done")] == [(first["message_id"], "done")]
    assert len(events(record_db, "start")) == 1
    visible = await queue.peek(QUEUE, 32)
    assert sorted(m.id for m in visible) == sorted(set(ids) - {first["message_id"]})
    assert all(m.dequeue_count == 1 for m in visible)
    totals = worker.totals()
    assert (totals["succeeded"], totals["released"]) == (1, 3)


async def test_drain_timeout_cancels_and_releases_the_unfinished_handler(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path
) -> None:
    [message_id] = await send(queue, "too slow to drain")
    worker = start_worker(mode="hold", hold=120, worker={"drainTimeout": "1s"})
    poll(lambda: events(record_db, "start"), 20, what="the handler to start")

    assert worker.stop(timeout=30) == 0

    [visible] = await queue.peek(QUEUE, 32)
    assert (visible.id, visible.dequeue_count) == (message_id, 1)
    assert worker.totals()["released"] == 1
    poll(lambda: events(record_db, "cancelled"), 10, what="the handler to see the cancellation")


async def test_second_signal_exits_at_once(start_worker: StartWorker, queue: QueueBackend, record_db: Path) -> None:
    await send(queue, "holds the drain open")
    worker = start_worker(mode="hold", hold=120, worker={"drainTimeout": "60s"})
    poll(lambda: events(record_db, "start"), 20, what="the handler to start")

    worker.send_signal(signal.SIGTERM)
    worker.wait_for_log("draining")
    assert worker.stop(signal.SIGINT, timeout=10) == 128 + signal.SIGINT

"""The lease lifecycle across real worker processes and real signals, on every backend, OCI Queue included.

Each test starts ``worker run`` subprocesses on one queue and reads what the
handler recorded (tests/apps/recording.py) and what the host logged. OCI Queue
runs on its test server, through the official SDK.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import AZURITE_SDK
from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import apoll, poll
from worker.backends.queues import QueueBackend, QueueNotFound, RawMessage
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

QUEUE = "work"
#: Seconds ``docker stop`` (and Compose's ``stop``) leaves between SIGTERM and SIGKILL unless told otherwise.
DOCKER_STOP_GRACE = 10.0

StartWorker = Callable[..., WorkerProcess]


@pytest.fixture(params=["sqlite", "azurite", AZURITE_SDK, "oci"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def start_worker(tmp_path: Path, record_db: Path, connection: str | None) -> Iterator[StartWorker]:
    """Start workers on one host.yaml and the backend under test; every one still running at the end is killed."""
    started: list[WorkerProcess] = []

    def start(
        name: str = "worker", mode: str = "ok", hold: float = 60, more_connection: str = "", **settings: Any
    ) -> WorkerProcess:
        """``more_connection`` is appended to the connection string (``&poison=host`` on OCI)."""
        config = write_host_yaml(tmp_path, settings.get("queues"), settings.get("worker"))
        env = {"RECORD_DB": str(record_db), "HANDLER_MODE": mode, "HOLD_SECONDS": str(hold), "TRIGGER_QUEUE": QUEUE}
        if connection is not None:
            env["AzureWebJobsStorage"] = connection + more_connection
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
    holder, other = (first, second) if starts[0]["pid"] == first.host_pid else (second, first)
    assert holder.totals()["lease_renewals"] >= 3
    assert holder.totals()["succeeded"] == 1
    assert other.totals().get("received", 0) == 0
    assert holder.totals().get("leases_lost", 0) == 0


async def _empty(backend: QueueBackend) -> bool:
    return await backend.approximate_count(QUEUE) == 0


async def visible(backend: QueueBackend) -> list[tuple[str, int]]:
    """(id, deliveries so far) of the visible messages: peeked, or where the service cannot peek, received.

    A receive that finds nothing changes nothing; one that finds messages counts one more delivery, taken off here.
    """
    if backend.capabilities.peek:
        return [(m.id, m.dequeue_count) for m in await backend.peek(QUEUE, backend.limits.max_batch)]
    return [(m.id, m.dequeue_count - 1) for m in await backend.receive(QUEUE, backend.limits.max_batch, 30)]


async def _peek_if_exists(backend: QueueBackend, queue: str) -> list[RawMessage]:
    """The poison queue is made by the worker on first need; until then there is nothing to see."""
    try:
        return await backend.peek(queue, 32)
    except QueueNotFound:
        return []


@pytest.mark.parametrize("backend_kind", ["sqlite", "azurite", AZURITE_SDK], indirect=True)
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


@pytest.mark.parametrize("backend_kind", ["oci"], indirect=True)
async def test_failing_message_reaches_the_services_dead_letter_queue_after_its_delivery_limit(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path, oci_server: Any
) -> None:
    """OCI Queue dead-letters on its own: the host runs the handler maxDequeueCount times, then leaves it to the
    service, which moves the message once the queue's delivery limit is reached."""
    oci_server.set_delivery_limit(QUEUE, 3)
    worker = start_worker(mode="fail", queues={"maxDequeueCount": 3})
    [message_id] = await send(queue, "always fails")

    await apoll(lambda: queue.dead_letter_count(QUEUE), 30, what="the message in the dead-letter queue")
    assert worker.stop() == 0

    tries = events(record_db, "start")
    assert [(t["message_id"], t["dequeue_count"]) for t in tries] == [(message_id, 1), (message_id, 2), (message_id, 3)]
    assert await queue.approximate_count(QUEUE) == 0
    left = [line for line in worker.lines() if line.get("event") == "message released for the queue's dead-letter queue"]
    assert len(left) == 1 and "this handler always fails" in left[0]["reason"]

    # The poison commands work on the dead-letter queue: list counts, requeue is refused (the API cannot read it),
    # purge empties it.
    def poison(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "worker", "poison", *args, QUEUE, "--json"],
            env=worker.merged_env(),
            cwd=worker.config.parent,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    listed = poison("list")
    assert listed.returncode == 0 and json.loads(listed.stdout)["messages"] == 1, listed.stderr
    refused = poison("requeue")
    assert refused.returncode == 2 and "cannot be requeued" in refused.stderr, refused.stderr
    purged = poison("purge")
    assert purged.returncode == 0 and json.loads(purged.stdout)["messages"] == 1, purged.stderr
    assert await queue.dead_letter_count(QUEUE) == 0


@pytest.mark.parametrize("backend_kind", ["oci"], indirect=True)
async def test_with_poison_host_on_oci_a_failing_message_is_copied_to_the_existing_poison_queue(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path
) -> None:
    """poison=host keeps Azure's behaviour on OCI: after maxDequeueCount the text goes to <queue>-poison, which the
    host does not create there (an operator made it), and the original is deleted."""
    await queue.create_queue(f"{QUEUE}-poison")
    worker = start_worker(mode="fail", queues={"maxDequeueCount": 2}, more_connection="&poison=host")
    [message_id] = await send(queue, "always fails")

    poisoned = await apoll(lambda: queue.receive(f"{QUEUE}-poison", 20, 30), 30, what="a poison message")
    assert worker.stop() == 0
    assert [p.content for p in poisoned] == [encode("always fails", "base64")]
    tries = events(record_db, "start")
    assert [(t["message_id"], t["dequeue_count"]) for t in tries] == [(message_id, 1), (message_id, 2)]
    assert await queue.approximate_count(QUEUE) == 0
    assert await queue.dead_letter_count(QUEUE) == 0


async def test_kill_9_mid_handler_then_redelivery_once_the_lease_ends(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path, backend_kind: str
) -> None:
    settings = {"worker": {"leaseDuration": "2s"}}
    doomed = start_worker("doomed", mode="hold-first", **settings)
    [message_id] = await send(queue, "survives a crash")
    poll(lambda: events(record_db, "start"), 20, what="the first attempt to start")

    doomed.send_signal(signal.SIGKILL)
    assert doomed.wait() == -signal.SIGKILL
    # Nobody released it: it is invisible until the lease taken by the dead worker runs out.
    assert await visible(queue) == []

    heir = start_worker("heir", mode="hold-first", **settings)
    done = poll(lambda: events(record_db, "done"), 30, what="the redelivered message to be handled")
    # On OCI Queue the dead worker's long poll may still be open at the service and take the message when the
    # lease ends (the test server's pessimistic --hung-up-poll deliver): one more delivery, hidden for its lease.
    counts = (2, 3) if backend_kind == "oci" else (2,)
    assert [(d["message_id"], d["pid"]) for d in done] == [(message_id, heir.host_pid)]
    assert done[0]["dequeue_count"] in counts, done
    await apoll(lambda: _empty(queue), 10, what="the message to be deleted")
    assert heir.stop() == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_drains_the_running_handler_and_releases_the_prefetched_rest(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path, signum: int, backend_kind: str
) -> None:
    """One handler thread and a batch of four: one runs, three wait; the signal must not lose or delay them."""
    ids = await send(queue, "a", "b", "c", "d")
    worker = start_worker(mode="hold", hold=2, queues={"batchSize": 4}, worker={"handlerThreads": 1})
    [first] = poll(lambda: events(record_db, "start"), 20, what="the first handler to start")

    assert worker.stop(signum, timeout=60) == 0

    assert [(d["message_id"], d["event"]) for d in events(record_db, "done")] == [(first["message_id"], "done")]
    assert len(events(record_db, "start")) == 1
    released = await visible(queue)
    assert sorted(i for i, _ in released) == sorted(set(ids) - {first["message_id"]})
    assert sorted(deliveries for _, deliveries in released) in _released_at_stop(3, backend_kind)
    totals = worker.totals()
    assert (totals["succeeded"], totals["released"]) == (1, 3)


async def test_drain_timeout_cancels_and_releases_the_unfinished_handler(
    start_worker: StartWorker, queue: QueueBackend, record_db: Path, backend_kind: str
) -> None:
    [message_id] = await send(queue, "too slow to drain")
    worker = start_worker(mode="hold", hold=120, worker={"drainTimeout": "1s"})
    poll(lambda: events(record_db, "start"), 20, what="the handler to start")

    assert worker.stop(timeout=60) == 0

    [(visible_id, deliveries)] = await visible(queue)
    assert visible_id == message_id and [deliveries] in _released_at_stop(1, backend_kind)
    assert worker.totals()["released"] == 1
    poll(lambda: events(record_db, "cancelled"), 10, what="the handler to see the cancellation")


async def test_second_signal_exits_at_once(start_worker: StartWorker, queue: QueueBackend, record_db: Path) -> None:
    await send(queue, "holds the drain open")
    worker = start_worker(mode="hold", hold=120, worker={"drainTimeout": "60s"})
    poll(lambda: events(record_db, "start"), 20, what="the handler to start")

    worker.send_signal(signal.SIGTERM)
    worker.wait_for_log("draining")
    assert worker.stop(signal.SIGINT, timeout=10) == 128 + signal.SIGINT


@pytest.mark.parametrize("backend_kind", ["oci"], indirect=True)
async def test_an_idle_oci_worker_with_the_default_long_poll_stops_within_dockers_default_grace(
    tmp_path: Path, record_db: Path, connection: str, queue: QueueBackend
) -> None:
    """A connection without ``longPoll=``: the stopping host waits out the long poll under way (it never walks away
    from one, see docs/backends.md), so the default wait must leave an idle worker time to exit before Docker's
    SIGKILL, which would leave what that poll took hidden for its lease. The signal comes just after a message was
    handled, when the listener's next long poll has just begun with its whole wait ahead."""
    default = re.sub(r"&longPoll=\d+", "", connection)
    config = write_host_yaml(tmp_path)
    worker = WorkerProcess(
        config, {"AzureWebJobsStorage": default, "RECORD_DB": str(record_db), "TRIGGER_QUEUE": QUEUE, "HANDLER_MODE": "ok"}
    ).start()
    try:
        worker.wait_for_log("host started")
        await send(queue, "wakes the poll")
        poll(lambda: events(record_db, "done"), 20, what="the handler to finish")
        await apoll(lambda: _empty(queue), 10, what="the message to be deleted")
        signalled = time.monotonic()
        assert worker.stop(timeout=60) == 0
        took = time.monotonic() - signalled
    finally:
        worker.kill()
    assert took < DOCKER_STOP_GRACE, f"an idle worker took {took:.1f} s to stop: Docker would have killed it"
    assert worker.totals()["succeeded"] == 1


def _released_at_stop(count: int, backend_kind: str) -> list[list[int]]:
    """The delivery counts ``count`` messages released at stop may show, in order. On OCI Queue the stopping host's
    long poll is left to end rather than cancelled (the service may still hand it messages), so it can take one
    message just released, which the backend releases again: one more delivery of at most one message."""
    once = [1] * count
    return [once, [*once[:-1], 2]] if backend_kind == "oci" else [once]

"""Resumable work across a kill -9, with real ``worker run`` processes, on every backend that can update content.

A handler works through a job in chunks and checkpoints after each (tests/apps/chunked.py). The first worker is
killed with SIGKILL while it holds the message, after three checkpoints; the second receives the message once the
lease has run out and goes on from the last checkpoint: no chunk checkpointed before the kill is done again, and the
dequeue count is Azure's, one per receive (2), however many checkpoints there were.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import apoll, poll
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

QUEUE = "work"
CHUNKS = 6
#: The chunk the first worker is killed before: chunks 0-2 are done and checkpointed by then.
KILLED_AT = 3
#: Short, so that the killed worker's message comes back soon (each checkpoint extends the lease this long too).
LEASE = "3s"


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """The workers the test starts; any still running at the end is killed."""
    started: list[WorkerProcess] = []
    yield started
    for process in started:
        process.kill()


def start(
    workers: list[WorkerProcess], tmp_path: Path, record_db: Path, connection: str | None, name: str, **env: str
) -> WorkerProcess:
    config = write_host_yaml(tmp_path, worker={"leaseDuration": LEASE})
    env = {"RECORD_DB": str(record_db), "TRIGGER_QUEUE": QUEUE, **env}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    process = WorkerProcess(config, env, name=name, app="tests.apps.chunked:app").start()
    workers.append(process)
    process.wait_for_log("host started")
    return process


def rows(record_db: Path, prefix: str) -> list[dict[str, Any]]:
    return [row for row in attempts(record_db) if row["event"].startswith(prefix)]


async def test_a_job_killed_mid_way_resumes_from_its_last_checkpoint(
    workers: list[WorkerProcess], tmp_path: Path, record_db: Path, connection: str | None, queue: QueueBackend
) -> None:
    first = start(workers, tmp_path, record_db, connection, "first", HANG_AT_CHUNK=str(KILLED_AT))
    message_id = (await queue.put(QUEUE, encode(json.dumps({"chunks": CHUNKS, "next": 0}), "base64"))).id
    poll(lambda: rows(record_db, f"checkpointed {KILLED_AT - 1}"), 30, what="three chunks to be checkpointed")
    first.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL

    second = start(workers, tmp_path, record_db, connection, "second")
    poll(lambda: rows(record_db, f"checkpointed {CHUNKS - 1}"), 60, what="the second worker to finish the job")

    async def deleted() -> bool:
        return await queue.approximate_count(QUEUE) == 0

    await apoll(deleted, 10, what="the finished message to be deleted")
    assert second.stop() == 0

    starts = [(r["pid"], r["dequeue_count"], json.loads(r["body"])) for r in rows(record_db, "start")]
    assert starts == [
        (first.host_pid, 1, {"chunks": CHUNKS, "next": 0}),
        (second.host_pid, 2, {"chunks": CHUNKS, "next": KILLED_AT}),
    ], "the second attempt did not read the last checkpoint, or the dequeue count counted checkpoints"
    done = [(r["event"], r["pid"]) for r in rows(record_db, "chunk ")]
    assert done == [(f"chunk {n}", first.host_pid if n < KILLED_AT else second.host_pid) for n in range(CHUNKS)], (
        "a chunk was done twice, or not at all"
    )
    assert {r["message_id"] for r in attempts(record_db)} == {message_id}
    totals = second.totals()
    assert (totals["checkpoints"], totals["succeeded"], totals.get("leases_lost", 0)) == (CHUNKS - KILLED_AT, 1, 0)

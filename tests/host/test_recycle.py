"""A sync handler past functionTimeout recycles its process: nothing it does lands after its next attempt began.

``worker run`` (one process, under its supervisor by default) with two sync
functions (tests/apps/overrun.py): ``slow`` blocks its thread long past
functionTimeout and then writes a file; ``other`` is in flight meanwhile. The
host stops receiving, lets ``other`` finish, hands the timed-out message to the
next process and exits; the supervisor starts that process at once, and it
settles the message (retried, or poisoned on its last attempt) before anything
else. The handler's late write is then impossible: its process is gone.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.host.processes import WorkerProcess, attempts
from tests.support import apoll, poll
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

QUEUE = "slow"


@pytest.fixture(params=["sqlite", "azurite"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _start(tmp_path: Path, record_db: Path, connection: str | None, max_dequeue_count: int) -> WorkerProcess:
    config = tmp_path / "host.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": "1.0",
                "functionTimeout": "00:00:02",
                "extensions": {"queues": {"maxPollingInterval": "200ms", "maxDequeueCount": max_dequeue_count}},
                "functions": {"other": {"functionTimeout": "00:01:00"}},
            }
        ),
        encoding="utf-8",
    )
    env = {"RECORD_DB": str(record_db), "OVERRUN_DIR": str(tmp_path)}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    worker = WorkerProcess(config, env, app="tests.apps.overrun:app").start()
    worker.wait_for_events("host started", 1, 30)
    return worker


def _events(record_db: Path, event: str, body: str) -> list[dict[str, Any]]:
    return [row for row in attempts(record_db) if row["event"] == event and row["body"] == body]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _when(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(line["timestamp"]).timestamp()


async def _overrun(tmp_path: Path, record_db: Path, queue: QueueBackend, worker: WorkerProcess) -> tuple[int, float]:
    """Run ``other``, then ``slow`` past its timeout, then let ``other`` finish: the first process's pid, and when
    it exited (by the supervisor's log)."""
    await queue.create_queue("other")
    await queue.put("other", encode("in flight", "base64"))
    [other] = poll(lambda: _events(record_db, "start", "in flight") or None, 30, what="other to start")
    await queue.put(QUEUE, encode("too slow", "base64"))
    poll(lambda: _events(record_db, "start", "too slow") or None, 30, what="slow to start")
    worker.wait_for_log("sync handler ran past functionTimeout; recycling the process")
    (tmp_path / "release-other").touch()
    [exited] = [line for line in worker.wait_for_events("worker process exited", 1, 30)]
    assert exited["exit_code"] == 3
    # The other invocation finished normally, in the first process, before it exited.
    assert [row["pid"] for row in _events(record_db, "done", "in flight")] == [other["pid"]]
    return other["pid"], _when(exited)


async def test_a_retried_message_runs_again_only_after_the_process_that_timed_out_is_gone(
    tmp_path: Path, record_db: Path, connection: str | None, queue: QueueBackend
) -> None:
    worker = _start(tmp_path, record_db, connection, max_dequeue_count=3)
    try:
        first_pid, exited_at = await _overrun(tmp_path, record_db, queue, worker)
        second = poll(lambda: _events(record_db, "done", "too slow") or None, 30, what="the second attempt")
        (tmp_path / "go").touch()  # were the first handler still alive, it would now write its file

        [again] = second
        assert again["dequeue_count"] == 2 and again["pid"] != first_pid
        assert _gone(first_pid)
        assert again["at"] > exited_at
        assert list(tmp_path.glob("late-*")) == []
        assert _events(record_db, "late", "too slow") == []
        await apoll(lambda: _empty(queue), 10, what="both messages to be deleted")

        [recycled] = [line for line in worker.lines() if line["event"] == "process recycled"]
        assert "slow" in recycled["reason"] and "functionTimeout" in recycled["reason"]
        assert any(line["event"] == "settling a message handed over by the recycled process" for line in worker.lines())
        assert worker.stop() == 0
    finally:
        worker.kill()


async def test_a_timed_out_last_attempt_is_poisoned_by_the_next_process(
    tmp_path: Path, record_db: Path, connection: str | None, queue: QueueBackend
) -> None:
    worker = _start(tmp_path, record_db, connection, max_dequeue_count=1)
    try:
        first_pid, _ = await _overrun(tmp_path, record_db, queue, worker)
        poisoned = await apoll(lambda: _peek(queue, "slow-poison"), 30, what="the message in the poison queue")
        (tmp_path / "go").touch()

        assert [body for body in poisoned] == [encode("too slow", "base64")]
        assert _gone(first_pid)
        assert list(tmp_path.glob("late-*")) == []
        assert len(_events(record_db, "start", "too slow")) == 1
        assert worker.stop() == 0
    finally:
        worker.kill()


async def _empty(queue: QueueBackend) -> bool | None:
    counts = [await queue.approximate_count(name) for name in (QUEUE, "other")]
    return True if counts == [0, 0] else None


async def _peek(queue: QueueBackend, name: str) -> list[str] | None:
    try:
        return [raw.content for raw in await queue.peek(name, 32)] or None
    except Exception:  # the poison queue is made on first need
        return None


def test_kill_9_of_worker_run_ends_its_host_process_too(tmp_path: Path, record_db: Path) -> None:
    """The supervisor's child dies with it, so ``kill -9`` of ``worker run`` leaves nothing running."""
    worker = _start(tmp_path, record_db, None, max_dequeue_count=3)
    [started] = worker.wait_for_events("host started", 1, 30)
    child = started["pid"]
    assert child != worker.pid
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    poll(lambda: _gone(child) or None, 10, what="the host process to end with its supervisor")

"""A process a handler leaves behind does not outlive ``worker run`` (issue 49).

The handler forks a child that ignores SIGTERM and holds the embedded queue file, and returns. Before, the child
lived on after ``worker run`` had exited, holding the file, until someone found and killed it. Real processes,
real signals, on the embedded queue.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import poll
from worker.backends.registry import DEFAULT_SQLITE_PATH, open_backend
from worker.bindings.encoding import encode
from worker.ops.supervisor import LEFTOVER_GRACE

pytestmark = pytest.mark.subprocess

QUEUE = "work"
APP = "tests.apps.unruly:app"
#: How long after worker run's exit the child may still be seen: none (the supervisor ends it before it exits), but
#: a process killed elsewhere takes a moment to leave /proc.
GONE_WITHIN = 5


def _put(folder: Path, body: str) -> None:
    async def put() -> None:
        backend = open_backend(None, folder)
        try:
            await backend.create_queue(QUEUE)
            await backend.put(QUEUE, encode(body, "base64"))
        finally:
            await backend.close()

    asyncio.run(put())


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended: no such process, or a zombie waiting for a parent that is not the worker."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] == b"Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("stopped_by", ["burst", "SIGTERM"])
def test_a_forked_child_that_ignores_sigterm_does_not_outlive_worker_run(tmp_path: Path, stopped_by: str) -> None:
    config = write_host_yaml(tmp_path, worker={"drainTimeout": "5s"})
    _put(tmp_path, "fork")
    pid_file = tmp_path / "leftover.pid"
    env = {
        "RECORD_DB": str(tmp_path / "attempts.sqlite3"),
        "PID_FILE": str(pid_file),
        "QUEUE_FILE": str(tmp_path / DEFAULT_SQLITE_PATH),
    }
    worker = WorkerProcess(config, env, app=APP, args=("--burst",) if stopped_by == "burst" else ()).start()
    leftover = None
    try:
        poll(lambda: pid_file.exists() and pid_file.read_text(), 60, what="the handler to fork")
        leftover = int(pid_file.read_text())
        # The child really holds the queue file, and ignores SIGTERM: the supervisor must use SIGKILL.
        poll(
            lambda: any(
                os.readlink(f"/proc/{leftover}/fd/{fd}") == str(tmp_path / DEFAULT_SQLITE_PATH)
                for fd in os.listdir(f"/proc/{leftover}/fd")
            ),
            10,
            what="the child to open the queue file",
        )
        if stopped_by == "SIGTERM":
            poll(
                lambda: [row for row in attempts(tmp_path / "attempts.sqlite3") if row["event"] == "done"],
                30,
                what="the handler to return",
            )
            worker.send_signal(signal.SIGTERM)
        assert worker.wait(30 + LEFTOVER_GRACE) == 0, worker.log_path.read_text()
        poll(lambda: _gone(leftover), GONE_WITHIN, what=f"the forked child {leftover} to be gone")
    finally:
        worker.kill()
        if leftover is not None and not _gone(leftover):
            os.kill(leftover, signal.SIGKILL)
    [ended] = [line for line in worker.lines() if line.get("event", "").startswith("processes a handler started")]
    assert ended["pids"] == [leftover] and ended["level"] == "warning"
    [killed] = [line for line in worker.lines() if line.get("event", "").startswith("left-over processes ignored")]
    assert killed["pids"] == [leftover]

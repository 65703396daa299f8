"""No log write can wedge the worker: a handler closing stderr, or a log stream that refuses lines, leaves
completion, leases and stop signals working (issue 49).

Before: a handler's ``os.close(2)`` made the next log line raise in the host; its message was never deleted, the
other messages' leases were renewed for ever and SIGTERM did nothing. Real ``worker run`` processes on the embedded
queue, real signals.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.host.processes import REPO, WorkerProcess, attempts, write_host_yaml
from tests.support import free_port, get, poll
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

QUEUE = "work"
APP = "tests.apps.unruly:app"
DRAIN = 5
#: How long a stop may take: the drain's timeout and the process's own start and exit.
STOP_WITHIN = DRAIN + 10


def _put(folder: Path, *bodies: str) -> None:
    async def put() -> None:
        backend = open_backend(None, folder)
        try:
            await backend.create_queue(QUEUE)
            for body in bodies:
                await backend.put(QUEUE, encode(body, "base64"))
        finally:
            await backend.close()

    asyncio.run(put())


def _queued(folder: Path) -> int:
    async def count() -> int:
        backend = open_backend(None, folder)
        try:
            return await backend.approximate_count(QUEUE)
        finally:
            await backend.close()

    return asyncio.run(count())


def _handled_once(record_db: Path, count: int) -> dict[str, int] | None:
    """Each message's number of attempts, once ``count`` messages are done (None before)."""
    rows = attempts(record_db)
    done = [row["message_id"] for row in rows if row["event"] == "done"]
    if len(done) < count:
        return None
    starts: dict[str, int] = {}
    for row in rows:
        if row["event"] == "start":
            starts[row["message_id"]] = starts.get(row["message_id"], 0) + 1
    return starts


def _env(folder: Path) -> dict[str, str]:
    return {
        "RECORD_DB": str(folder / "attempts.sqlite3"),
        "REUSED_FILE": str(folder / "reused.txt"),
        "FD_FILE": str(folder / "fd.txt"),
    }


def test_a_handler_closing_stderr_neither_stops_completion_nor_the_stop_signal(tmp_path: Path) -> None:
    # Short leases: a lease renewed for ever would show as renewals going on after the messages were done.
    config = write_host_yaml(tmp_path, worker={"drainTimeout": f"{DRAIN}s", "leaseDuration": "2s"})
    _put(tmp_path, "close-stderr")
    worker = WorkerProcess(config, _env(tmp_path), app=APP).start()
    try:
        poll(lambda: _handled_once(tmp_path / "attempts.sqlite3", 1), 60, what="the handler that closes stderr")
        # Its message is deleted though the host has logged since (before: never, and SIGTERM did nothing).
        poll(lambda: _queued(tmp_path) == 0, 15, what="the message whose handler closed stderr deleted")
        # Alone, so that no other handler's file takes descriptor 2 first.
        _put(tmp_path, "reuse-stderr")
        poll(lambda: _handled_once(tmp_path / "attempts.sqlite3", 2), 30, what="the handler that reuses stderr")
        _put(tmp_path, *[f"after {n}" for n in range(4)])
        handled = poll(lambda: _handled_once(tmp_path / "attempts.sqlite3", 6), 30, what="every message done")
        poll(lambda: _queued(tmp_path) == 0, 15, what="every message deleted")
        assert sorted(handled.values()) == [1] * 6, handled  # each handled once: none ran again
        sent = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(STOP_WITHIN) == 0, worker.log_path.read_text()
        assert time.monotonic() - sent < STOP_WITHIN
    finally:
        worker.kill()
    # The host wrote its log to its own copy of stderr: every line after the close is there, and none went into
    # the file that took descriptor 2.
    assert (tmp_path / "fd.txt").read_text() == "2"
    assert (tmp_path / "reused.txt").read_text() == ""
    log = worker.log_path.read_text()
    assert "a handler's line on sys.stderr after descriptor 2 was closed" in log
    assert (worker.totals()["succeeded"], worker.totals()["released"]) == (6, 0)


@pytest.mark.parametrize("sink", ["a full disk", "a reader gone"])
def test_a_log_stream_that_refuses_lines_drops_and_counts_them_and_the_worker_goes_on(tmp_path: Path, sink: str) -> None:
    """A full disk under stderr (ENOSPC), or the reader of both stderr and stdout gone (EPIPE: a log collector that
    exited); the run's summary, on stdout, says so when stdout still works, and costs nothing when it does not."""
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"drainTimeout": f"{DRAIN}s", "httpPort": port, "httpHost": "127.0.0.1"})
    _put(tmp_path, *[f"message {n}" for n in range(4)])
    env = WorkerProcess(config, _env(tmp_path), app=APP).merged_env()
    summary = tmp_path / "summary.txt"
    with summary.open("wb") as stdout, open("/dev/full", "wb") as full:
        pipe = sink == "a reader gone"
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--app", APP, "--config", str(config)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE if pipe else stdout,
            stderr=subprocess.PIPE if pipe else full,
        )
    for end in (proc.stdout, proc.stderr):  # the reader's ends close before the worker writes its first line
        if end is not None:
            end.close()
    try:
        handled = poll(lambda: _handled_once(tmp_path / "attempts.sqlite3", 4), 60, what="every message done")
        assert sorted(handled.values()) == [1] * 4, handled
        poll(lambda: _queued(tmp_path) == 0, 15, what="every message deleted")
        dropped = poll(lambda: _dropped(port), 15, what="dropped lines counted in /metrics")
        assert dropped >= 4  # at least each message's line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_WITHIN) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if sink == "a full disk":
        assert re.search(r"^log lines dropped: \d+", summary.read_text(), re.MULTILINE), summary.read_text()
        assert re.search(r"^unruly +4 +4", summary.read_text(), re.MULTILINE), summary.read_text()


def _dropped(port: int) -> float:
    try:
        status, body = get(port, "/metrics")
    except OSError:  # not listening yet
        return 0
    found = re.search(r"^worker_log_lines_dropped_total (\S+)$", body, re.MULTILINE)
    return float(found.group(1)) if status == 200 and found else 0

"""Nothing beside the worker wedges it: real ``worker run`` processes under a low limit on open files, flooded with
idle connections to their endpoints, on the embedded queue and blob store.

Once, a few hundred idle connections to the port took every descriptor a process at a soft limit of 256 had: a blob
output failed with "Too many open files", every message of the run went to poison, ``/healthz`` stopped answering
and the accept loop's errors filled the log. Here the worker runs at 256 soft and hard (raising cannot help), three
hundred connections stay open and silent, and every message is still handled; a short token is refused at start,
and a soft limit under a higher hard one is raised.
"""

from __future__ import annotations

import re
import selectors
import signal
import socket
import time
import urllib.error
from http.client import HTTPException
from pathlib import Path

import pytest

from tests.host.processes import WorkerProcess, write_host_yaml
from tests.support import free_port, get, poll
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

QUEUE = "flooded"
APP = "tests.apps.blob_writer:app"
MESSAGES = 200
IDLE_CONNECTIONS = 300

pytestmark = pytest.mark.subprocess


def healthz(port: int) -> int | None:
    """/healthz's status, or None when the connection is closed or refused before an answer."""
    try:
        return get(port, "/healthz", timeout=5)[0]
    except (urllib.error.URLError, HTTPException, ConnectionError, TimeoutError):
        return None


def connected(port: int, count: int, timeout: float) -> list[socket.socket]:
    """``count`` connections to ``port``, each past its handshake (accepted, waiting in the listen queue, or already
    closed by the worker), that send nothing."""
    opened = []
    with selectors.DefaultSelector() as selector:
        for _ in range(count):
            connection = socket.socket()
            connection.setblocking(False)
            connection.connect_ex(("127.0.0.1", port))
            opened.append(connection)
            selector.register(connection, selectors.EVENT_WRITE)
        deadline = time.monotonic() + timeout
        while selector.get_map():
            assert time.monotonic() < deadline, f"{len(selector.get_map())} connections still in their handshake"
            for key, _ in selector.select(timeout=1):
                selector.unregister(key.fileobj)
    return opened


def blobs(folder: Path) -> int:
    copies = folder / ".worker" / "blobs" / "copies"
    return len(list(copies.iterdir())) if copies.exists() else 0


async def test_idle_connections_past_the_fd_limit_leave_messages_and_probes_working(tmp_path: Path) -> None:
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"httpPort": port, "httpHost": "127.0.0.1"})
    queue = open_backend(None, tmp_path)
    await queue.create_queue(QUEUE)
    worker = WorkerProcess(config, {"TRIGGER_QUEUE": QUEUE}, app=APP, wrapper=("prlimit", "--nofile=256:256", "--")).start()
    idle: list[socket.socket] = []
    try:
        worker.wait_for_log("host started")
        idle += connected(port, IDLE_CONNECTIONS, 30)
        for n in range(MESSAGES):
            await queue.put(QUEUE, encode(f"message-{n:03d}", "base64"))
        assert poll(lambda: healthz(port), 20, what="/healthz among the idle connections") == 200
        poll(lambda: blobs(tmp_path) == MESSAGES, 120, what=f"{MESSAGES} blobs written")
        assert poll(lambda: healthz(port), 20, what="/healthz again") == 200
        metrics = poll(lambda: _metrics(port), 20, what="/metrics")
        assert _sample(metrics, 'worker_http_connections_closed_total{reason="limit"}') > 0
    finally:
        for connection in idle:
            connection.close()
    try:
        assert worker.stop(signal.SIGTERM) == 0
        totals = worker.totals()
        assert (totals["succeeded"], totals["poisoned"], totals["failed"]) == (MESSAGES, 0, 0), totals
        log = worker.log_path.read_text(encoding="utf-8", errors="replace")
        assert worker.log_path.stat().st_size < 5 * 2**20
        assert "Too many open files" not in log, log[-4000:]
        assert "limit on open files raised" not in log  # 256 is the hard limit too
    finally:
        worker.kill()
        await queue.close()


def test_a_soft_limit_under_the_hard_one_is_raised_to_it(tmp_path: Path) -> None:
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"httpPort": port, "httpHost": "127.0.0.1"})
    worker = WorkerProcess(config, {"TRIGGER_QUEUE": QUEUE}, app=APP, wrapper=("prlimit", "--nofile=256:4096", "--")).start()
    try:
        started = worker.wait_for_log("host started")
        raised = worker.wait_for_log("limit on open files raised")
        assert (raised["soft"], raised["now"]) == (256, 4096)
        limits = Path(f"/proc/{started['pid']}/limits").read_text()
        assert re.search(r"^Max open files\s+4096\s+4096\s", limits, re.MULTILINE), limits
    finally:
        worker.kill()


def test_a_one_character_token_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    config = write_host_yaml(tmp_path, worker={"httpPort": free_port(), "httpHost": "127.0.0.1"})
    worker = WorkerProcess(config, {"TRIGGER_QUEUE": QUEUE, "WORKER_HTTP_TOKEN": "x"}, app=APP).start()
    try:
        assert worker.wait(60) == 2
    finally:
        worker.kill()
    stderr = worker.log_path.read_text()
    line = (
        "worker run: error: WORKER_HTTP_TOKEN: the token in environment WORKER_HTTP_TOKEN has 1 character, fewer "
        'than 16; make one with python -c "import secrets; print(secrets.token_urlsafe(32))"\n'
    )
    assert stderr.endswith(line), stderr
    assert "Traceback" not in stderr


def _metrics(port: int) -> str | None:
    try:
        status, body = get(port, "/metrics", timeout=5)
    except (urllib.error.URLError, HTTPException, ConnectionError, TimeoutError):
        return None
    return body if status == 200 else None


def _sample(text: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert match, f"no {series} in /metrics"
    return float(match.group(1))

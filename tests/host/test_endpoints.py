"""/healthz, /readyz, /metrics and /leases of a real worker process while a slow handler holds a message."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import apoll, fetch, free_port, get, poll
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode

QUEUE = "slow"

pytestmark = pytest.mark.subprocess


def sample(text: str, name: str, labels: str) -> float | None:
    """The value of one Prometheus sample, e.g. sample(text, "worker_received_total", 'function="recorder"')."""
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


async def test_endpoints_report_what_the_worker_is_doing(
    tmp_path: Path, connection: str | None, queue: QueueBackend
) -> None:
    port = free_port()
    # On loopback: with no token, /leases answers there only.
    config = write_host_yaml(
        tmp_path, worker={"leaseDuration": "3s", "drainTimeout": "3s", "httpPort": port, "httpHost": "127.0.0.1"}
    )
    record_db = tmp_path / "attempts.sqlite3"
    env = {"RECORD_DB": str(record_db), "HANDLER_MODE": "hold", "HOLD_SECONDS": "60", "TRIGGER_QUEUE": QUEUE}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    worker = WorkerProcess(config, env).start()
    try:
        worker.wait_for_log("host started")
        assert get(port, "/healthz")[0] == 200
        status, body = get(port, "/readyz")
        assert (status, json.loads(body)["functions"]) == (200, ["recorder"])

        [message_id] = [(await queue.put(QUEUE, encode("slow one", "base64"))).id]
        poll(lambda: attempts(record_db), 30, what="the handler to start")

        def renewed_twice() -> list[dict[str, Any]] | None:
            held = json.loads(get(port, "/leases")[1])
            return held if held and held[0]["renewals"] >= 2 else None

        [lease] = poll(renewed_twice, 30, what="the lease to be renewed twice")
        assert (lease["messageId"], lease["function"], lease["queue"], lease["dequeueCount"]) == (
            message_id,
            "recorder",
            QUEUE,
            1,
        )
        assert lease["elapsedSeconds"] > 0

        metrics = get(port, "/metrics")[1]
        fn = 'function="recorder"'
        assert sample(metrics, "worker_received_total", fn) == 1
        assert sample(metrics, "worker_messages_in_flight", fn) == 1
        assert sample(metrics, "worker_lease_renewals_total", fn) >= 2
        assert sample(metrics, "worker_succeeded_total", fn) is None  # nothing finished yet
        assert sample(metrics, "worker_receive_duration_seconds_count", fn) >= 1
        assert sample(metrics, "worker_handler_duration_seconds_count", fn) in (None, 0)

        worker.send_signal(signal.SIGTERM)
        status, body = poll(lambda: (r := get(port, "/readyz"))[0] == 503 and r, 10, what="/readyz to say draining")
        assert "draining" in json.loads(body)["problems"]
        assert worker.wait(60) == 0
        assert worker.totals()["released"] == 1
    finally:
        worker.kill()


async def test_healthz_fails_while_every_handler_thread_runs_an_abandoned_handler(
    tmp_path: Path, connection: str | None, queue: QueueBackend
) -> None:
    """A sync handler whose lease was lost is given up on but keeps its thread (Python cannot stop it); with no
    thread left, say so. The lease is lost as on a paused machine: the process is stopped past its lease, another
    receiver takes the message, and the process resumes."""
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"handlerThreads": 1, "httpPort": port, "leaseDuration": "2s"})
    env = {"RECORD_DB": str(tmp_path / "calls.sqlite3"), "TRIGGER_QUEUE": QUEUE}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    worker = WorkerProcess(config, env, app="tests.apps.bad_input:app").start()
    try:
        host = worker.wait_for_log("host started")["pid"]
        assert get(port, "/healthz") == (200, '{"status": "ok"}')
        await queue.put(QUEUE, encode(json.dumps({"kind": "block", "seconds": 12}), "base64"))
        poll(lambda: _started(tmp_path / "calls.sqlite3"), 20, what="the blocking handler to start")

        os.kill(host, signal.SIGSTOP)
        try:
            [taken] = await apoll(lambda: queue.receive(QUEUE, 1, 60), 20, what="the lease to end while stopped")
        finally:
            os.kill(host, signal.SIGCONT)

        status, body = poll(lambda: (r := get(port, "/healthz"))[0] == 503 and r, 20, what="/healthz to fail")
        assert json.loads(body)["status"] == "stuck"
        status, body = get(port, "/readyz")
        assert status == 503 and any("handler thread" in p for p in json.loads(body)["problems"]), body
        metrics = get(port, "/metrics")[1]
        assert sample(metrics, "worker_handler_threads", 'state="abandoned"') == 1
        assert sample(metrics, "worker_leases_lost_total", 'function="intake"') == 1
        assert sample(metrics, "worker_event_loop_tasks", 'loop="host"') >= 1
        assert re.search(r"^process_open_fds \d", metrics, re.MULTILINE), "no process metrics"
        # The blocked handler returns at last: its thread is free again, and so is the host.
        assert poll(lambda: get(port, "/healthz")[0] == 200, 30, what="/healthz to recover")
        assert sample(get(port, "/metrics")[1], "worker_handler_threads", 'state="abandoned"') == 0
        assert taken.pop_receipt is not None
        await queue.delete(QUEUE, taken.id, taken.pop_receipt)
    finally:
        worker.kill()


def _started(record_db: Path) -> bool:
    try:
        with closing(sqlite3.connect(record_db, timeout=30)) as db:
            return bool(db.execute("SELECT 1 FROM calls WHERE event = 'block-start'").fetchall())
    except sqlite3.OperationalError:  # no call yet
        return False


#: A token as an operator would make one (``openssl rand -hex 24``); found nowhere in a log if all is well.
TOKEN = "9f2c4e7a1b3d5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6"


def test_a_token_guards_metrics_and_leases_and_leaves_the_probes_open(tmp_path: Path, record_db: Path) -> None:
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"httpPort": port})
    worker = WorkerProcess(config, {"RECORD_DB": str(record_db), "WORKER_HTTP_TOKEN": TOKEN}).start()
    try:
        worker.wait_for_log("host started")
        for path in ("/healthz", "/readyz"):
            assert fetch(port, path)[0] == 200, path
        for path in ("/metrics", "/leases"):
            status, headers, _ = fetch(port, path)
            assert (status, headers["WWW-Authenticate"].split()[0]) == (401, "Bearer"), path
            assert fetch(port, path, token=TOKEN[:-1] + "0")[0] == 401, path
            assert fetch(port, path, token=TOKEN, scheme="Basic")[0] == 401, path
            assert fetch(port, path, token=TOKEN)[0] == 200, path
        assert worker.stop(signal.SIGTERM) == 0
        log = worker.log_path.read_text()
        assert '"token": true' in log and TOKEN not in log
    finally:
        worker.kill()


def test_without_a_token_every_path_is_open_on_loopback(tmp_path: Path, record_db: Path) -> None:
    """Beyond loopback, /leases then needs a token or worker.httpOpenData (tests/host/test_endpoint_guard.py)."""
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"httpPort": port, "httpHost": "127.0.0.1"})
    worker = WorkerProcess(config, {"RECORD_DB": str(record_db)}).start()
    try:
        worker.wait_for_log("host started")
        assert [fetch(port, path)[0] for path in ("/healthz", "/readyz", "/metrics", "/leases")] == [200] * 4
    finally:
        worker.kill()


def test_the_endpoints_listen_on_http_host_only(tmp_path: Path, record_db: Path) -> None:
    """Linux routes all of 127.0.0.0/8 to loopback, so 127.0.0.2 is a second local address on any machine."""
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"httpPort": port})
    worker = WorkerProcess(config, {"RECORD_DB": str(record_db)}, args=("--http-host", "127.0.0.2")).start()
    try:
        listening = worker.wait_for_log("endpoints listening")
        assert (listening["host"], listening["port"]) == ("127.0.0.2", port)
        worker.wait_for_log("host started")
        assert fetch(port, "/healthz", host="127.0.0.2")[0] == 200
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        worker.kill()


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path, record_db: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_host_yaml(tmp_path, worker={"httpPort": port, "httpHost": "127.0.0.1"})
        worker = WorkerProcess(config, {"RECORD_DB": str(record_db)}).start()
        try:
            assert worker.wait(60) == 2
        finally:
            worker.kill()
    stderr = worker.log_path.read_text()
    assert f"worker run: error: cannot listen on 127.0.0.1:{port}: address already in use\n" in stderr, stderr
    assert "Traceback" not in stderr, stderr

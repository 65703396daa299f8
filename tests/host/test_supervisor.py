"""``worker run --processes N``: real supervisor and worker processes, real signals.

On the embedded queue only: the supervisor does not touch storage, and the processes it runs are the hosts the
rest of the suite runs on both backends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import apoll, fetch, free_port, poll
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode
from worker.runtime.inflight import INFLIGHT_ENV

pytestmark = [pytest.mark.subprocess, pytest.mark.parametrize("backend_kind", ["sqlite"])]

QUEUE = "work"


@pytest.fixture
def supervised(tmp_path: Path, record_db: Path, connection: str | None) -> Iterator[Any]:
    """Start ``worker run --processes 2`` with the recording app; killed (with its children) at the end."""
    started: list[WorkerProcess] = []

    def start(mode: str = "ok", hold: float = 60, **worker: Any) -> WorkerProcess:
        # One message at a time per process, so that both processes get some.
        queues = {"maxPollingInterval": "200ms", "batchSize": 1}
        config = write_host_yaml(tmp_path, queues, {"drainTimeout": "30s", **worker})
        env = {"RECORD_DB": str(record_db), "HANDLER_MODE": mode, "HOLD_SECONDS": str(hold), "TRIGGER_QUEUE": QUEUE}
        if connection is not None:
            env["AzureWebJobsStorage"] = connection
        process = WorkerProcess(config, env, name="supervisor", args=("--processes", "2")).start()
        started.append(process)
        process.wait_for_events("host started", 2, 60)
        return process

    yield start
    for process in started:
        for line in _events(process, "worker process started"):
            _kill(line["pid"])
        process.kill()


def _events(process: WorkerProcess, event: str) -> list[dict[str, Any]]:
    return [line for line in process.lines() if line.get("event") == event]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _send(queue: QueueBackend, *bodies: str) -> None:
    for body in bodies:
        await queue.put(QUEUE, encode(body, "base64"))


async def test_sigterm_to_the_supervisor_drains_every_process_and_exits_0(
    supervised: Any, queue: QueueBackend, record_db: Path
) -> None:
    process = supervised(mode="hold", hold=3)
    await _send(queue, *[f"m{i}" for i in range(6)])
    # Both processes hold messages (each handler runs 3 s) before the signal comes.
    await apoll(lambda: _true(len({row["pid"] for row in attempts(record_db)}) == 2), 30, what="both processes busy")
    assert process.stop(signal.SIGTERM, timeout=90) == 0

    stopped = _events(process, "host stopped")
    assert len(stopped) == 2 and all(line.get("released", 0) + line.get("succeeded", 0) >= 1 for line in stopped)
    started = {row["message_id"] for row in attempts(record_db) if row["event"] == "start"}
    done = {row["message_id"] for row in attempts(record_db) if row["event"] == "done"}
    assert started == done  # every handler that started was let finish (drain), none cut off
    assert _events(process, "supervisor stopped")[0]["exits"] == [0, 0]
    assert await queue.approximate_count(QUEUE) == 6 - len(done)  # the rest were released, not lost


async def test_a_killed_process_is_started_again_and_its_message_is_not_lost(
    supervised: Any, queue: QueueBackend, record_db: Path
) -> None:
    process = supervised(mode="hold-first", hold=60, leaseDuration="3s")
    await _send(queue, "victim")
    [first] = await apoll(lambda: _arows(record_db, "start"), 30, what="the handler to start")
    os.kill(first["pid"], signal.SIGKILL)

    restarted = process.wait_for_events("worker process died; restarting it", 1, 30)
    assert (restarted[0]["exit_code"], restarted[0]["cause"]) == (-signal.SIGKILL, "killed by SIGKILL")
    process.wait_for_events("host started", 3, 60)
    # The lease ends 3 s after the kill; whichever process receives it then runs it to the end.
    done = await apoll(lambda: _arows(record_db, "done"), 60, what="the message done after redelivery")
    assert done[0]["message_id"] == first["message_id"] and done[0]["dequeue_count"] == 2
    assert process.stop(signal.SIGTERM, timeout=90) == 0
    assert await queue.approximate_count(QUEUE) == 0


async def test_the_supervisor_serves_one_set_of_endpoints_for_all_processes(
    supervised: Any, queue: QueueBackend, record_db: Path
) -> None:
    port = free_port()
    process = supervised(mode="hold", hold=60, httpPort=port, httpHost="127.0.0.1", drainTimeout="1s")
    await _send(queue, *[f"m{i}" for i in range(4)])
    await apoll(lambda: _true(len({row["pid"] for row in attempts(record_db)}) == 2), 30, what="both processes busy")
    held = len(_rows(record_db, "start"))

    leases = json.loads(_get(port, "/leases"))
    assert len(leases) == held and {lease["process"] for lease in leases} == {0, 1}
    metrics = _get(port, "/metrics")
    received = [line for line in metrics.splitlines() if line.startswith('worker_received_total{function="recorder"}')]
    assert received == [f'worker_received_total{{function="recorder"}} {float(held)!r}'], received
    assert json.loads(_get(port, "/healthz"))["ok"] is True
    assert process.stop(signal.SIGTERM, timeout=90) == 0


async def test_a_process_ended_by_its_handler_is_an_error_naming_its_code_and_what_it_held(
    tmp_path: Path, queue: QueueBackend, record_db: Path
) -> None:
    """``os._exit(3)`` in a handler is no recycle, though 3 is the recycle's exit code: the supervisor says the
    process died, with its code and the messages it held, and worker run (one process) exits with that code."""
    config = write_host_yaml(tmp_path, worker={"drainTimeout": "5s"})
    env = {
        "RECORD_DB": str(record_db),
        "HANDLER_MODE": "hold",
        "HOLD_SECONDS": "60",
        "TRIGGER_QUEUE": QUEUE,
        "GATE_FILE": str(tmp_path / "gate"),
    }
    process = WorkerProcess(config, env).start()
    try:
        [started] = process.wait_for_events("worker process started", 1, 60)
        await _send(queue, "held", "EXIT 3")
        await apoll(lambda: _true(len(_rows(record_db, "start")) == 2), 30, what="both handlers to start")
        # The process says what it holds in the file its supervisor named; once that lists both, the handler exits.
        environ = Path(f"/proc/{started['pid']}/environ").read_bytes().split(b"\0")
        in_flight = Path(next(v for k, _, v in (e.decode().partition("=") for e in environ) if k == INFLIGHT_ENV))
        await apoll(
            lambda: _true(in_flight.exists() and len(json.loads(in_flight.read_text())) == 2),
            10,
            what="the process to say it holds both messages",
        )
        (tmp_path / "gate").touch()
        assert process.wait(30) == 3
    finally:
        process.kill()
    [died] = _events(process, "worker process died; worker run exits with its code")
    ids = sorted(row["message_id"] for row in _rows(record_db, "start"))
    assert (died["level"], died["exit_code"], died["cause"]) == ("error", 3, "exited with code 3")
    assert (died["held_invocations"], sorted(died["message_ids"])) == ({"recorder": 2}, ids)
    assert not _events(process, "worker process recycled; starting a fresh one")


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.read().decode()


def _rows(record_db: Path, event: str) -> list[dict[str, Any]]:
    return [row for row in attempts(record_db) if row["event"] == event]


async def _arows(record_db: Path, event: str) -> list[dict[str, Any]]:
    return _rows(record_db, event)


async def _true(value: bool) -> bool:
    return value


#: A token as an operator would make one; found nowhere in a log if all is well.
TOKEN = "Zm9yIHRoZSBzdXBlcnZpc29yJ3MgZW5kcG9pbnRz"


async def test_the_aggregate_listens_on_http_host_asks_for_the_token_and_hands_it_to_the_processes(
    supervised: Any, queue: QueueBackend, record_db: Path, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n", encoding="utf-8")  # as a mounted Secret ends
    port = free_port()
    process = supervised(mode="hold", hold=60, httpPort=port, httpHost="127.0.0.2", httpTokenFile="token", drainTimeout="1s")
    await _send(queue, *[f"m{i}" for i in range(4)])
    await apoll(lambda: _true(len({row["pid"] for row in attempts(record_db)}) == 2), 30, what="both processes busy")
    held = len(_rows(record_db, "start"))

    assert [fetch(port, path, host="127.0.0.2")[0] for path in ("/healthz", "/readyz", "/leases", "/metrics")] == [
        200,
        200,
        401,
        401,
    ]
    status, _, body = fetch(port, "/leases", host="127.0.0.2", token=TOKEN)
    # Every process's leases: the supervisor asked each process with the token.
    assert status == 200 and {lease["process"] for lease in json.loads(body)} == {0, 1}, body
    assert len(json.loads(body)) == held
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    children = [line for line in _events(process, "endpoints listening") if line.get("processes") is None]
    assert len(children) == 2 and {line["host"] for line in children} == {"127.0.0.1"}
    assert [fetch(line["port"], "/leases")[0] for line in children] == [401, 401]
    assert process.stop(signal.SIGTERM, timeout=90) == 0
    assert TOKEN not in process.log_path.read_text()


def test_a_port_in_use_stops_the_supervisor_with_one_line_and_exit_2(
    tmp_path: Path, record_db: Path, connection: str | None
) -> None:
    env = {"RECORD_DB": str(record_db)} | ({"AzureWebJobsStorage": connection} if connection else {})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_host_yaml(tmp_path, worker={"httpPort": port, "httpHost": "127.0.0.1"})
        process = WorkerProcess(config, env, name="supervisor", args=("--processes", "2"))
        try:
            assert process.start().wait(60) == 2
        finally:
            process.kill()
    stderr = process.log_path.read_text()
    assert f"worker run: error: cannot listen on 127.0.0.1:{port}: address already in use\n" in stderr, stderr
    assert "Traceback" not in stderr and not _events(process, "worker process started"), stderr


def test_every_process_starts_at_once_and_each_imports_the_app_once(tmp_path: Path, connection: str | None) -> None:
    # The app's import in process 0 waits until all three processes run (tests/apps/siblings.py): it loads only
    # because the others start before process 0 has loaded the app, rather than one start-up after it.
    imports = tmp_path / "imports"
    env = {"SIBLINGS_IMPORTS": str(imports), "SIBLINGS_EXPECTED": "3"}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    process = WorkerProcess(
        write_host_yaml(tmp_path),
        env,
        name="supervisor",
        app="tests.apps.siblings:app",
        args=("--processes", "3", "--burst"),
    )
    try:
        assert process.start().wait(90) == 0, process.log_path.read_text()
    finally:
        process.kill()
    started = {line["pid"] for line in _events(process, "worker process started")}
    assert len(started) == 3
    assert sorted(map(int, imports.read_text().split())) == sorted(started)  # once in each, never in the supervisor


def test_a_stop_before_process_0_loaded_the_app_ends_the_others_without_loading_it(
    tmp_path: Path, connection: str | None
) -> None:
    # Process 0's import waits for a fourth process that never comes; the other two wait for process 0.
    imports = tmp_path / "imports"
    env = {"SIBLINGS_IMPORTS": str(imports), "SIBLINGS_EXPECTED": "4", "SIBLINGS_WAIT": "120"}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    process = WorkerProcess(
        write_host_yaml(tmp_path), env, name="supervisor", app="tests.apps.siblings:app", args=("--processes", "3")
    )
    try:
        process.start().wait_for_events("worker process started", 3, 60)
        poll(lambda: imports.exists() and imports.read_text(), 60, what="process 0 importing the app")
        process.stop(signal.SIGTERM, timeout=60)  # process 0 ends as a process still importing does: by the signal
    finally:
        process.kill()
    exited = {line["process"]: line["exit_code"] for line in _events(process, "worker process exited")}
    assert exited == {0: -signal.SIGTERM, 1: 0, 2: 0}, exited  # 1 and 2 read the gate's end and left
    assert len(imports.read_text().split()) == 1  # process 0's import alone: the others never loaded the app


def test_an_app_its_process_refuses_ends_the_supervisor_with_exit_2_and_no_signal_said_received(
    tmp_path: Path, record_db: Path, connection: str | None
) -> None:
    """Before: a refused start ended with "signal received; passing it to the worker processes", though nobody sent
    one: the supervisor stopped the other processes through its own signal handler."""
    env = {"RECORD_DB": str(record_db), "FUNCTIONS_WORKER_RUNTIME": "node"}
    env |= {"AzureWebJobsStorage": connection} if connection else {}
    process = WorkerProcess(write_host_yaml(tmp_path), env, name="supervisor", args=("--processes", "2"))
    try:
        assert process.start().wait(60) == 2
    finally:
        process.kill()
    stderr = process.log_path.read_text()
    assert "worker run: error: " in stderr and "FUNCTIONS_WORKER_RUNTIME" in stderr, stderr
    exited = {line["process"]: line["exit_code"] for line in _events(process, "worker process exited")}
    assert exited == {0: 2, 1: 0}, exited  # the second waited for the first to load the app, and left without it
    assert _events(process, "worker process refused its app or settings; not restarting")
    assert not [line for line in process.lines() if str(line.get("event")).startswith("signal received")], stderr

"""The account key never reaches a worker's log: real ``worker run`` processes on Azurite, working and failing.

Each test reads the whole stderr of the worker (its JSON log lines and
anything else it printed) and looks for the emulator's key in the forms a leak
could take: as it is, URL-encoded, or cut short.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.azurite import ACCOUNT, KEY, Azurite
from tests.host.processes import APP, REPO, WorkerProcess, attempts, write_host_yaml
from tests.support import apoll, poll
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

QUEUE = "work"
#: How the key could show up in a log: whole, URL-encoded (in a request URL), or cut short.
KEY_FORMS = (KEY, quote(KEY, safe=""), KEY[:16], KEY[-24:-2])
STORAGE_RETRYING = "storage call failed; retrying with back-off"
RECEIVE_FAILED = "receive failed; backing off"
RECEIVE_FAILED_AGAIN = "receive failed again; backing off"


@dataclass
class LoggedWorker(WorkerProcess):
    """A ``worker run`` with extra command-line arguments (``--log-level DEBUG``)."""

    args: tuple[str, ...] = ()

    def start(self) -> LoggedWorker:
        inherited = {k: v for k, v in os.environ.items() if k != "AzureWebJobsStorage" and not k.startswith("WORKER__")}
        env = {**inherited, "PYTHONPATH": str(REPO), **self.env}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "worker", "run", "--app", APP, "--config", str(self.config), *self.args],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        return self

    def text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def events(self, event: str) -> list[dict[str, object]]:
        return [line for line in self.lines() if line.get("event") == event]


def assert_no_key(text: str) -> None:
    for form in KEY_FORMS:
        assert form not in text, f"the account key ({form[:6]}...) is in the worker's log:\n{text}"


def connection_string(port: int) -> str:
    """Azurite's connection string, with its key, for a queue endpoint on ``port``."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"QueueEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def workers() -> Iterator[list[LoggedWorker]]:
    """Workers a test starts; any still running at the end is killed."""
    started: list[LoggedWorker] = []
    yield started
    for process in started:
        process.kill()


def start(workers: list[LoggedWorker], tmp_path: Path, connection: str, *args: str) -> LoggedWorker:
    config = write_host_yaml(tmp_path)
    env = {
        "RECORD_DB": str(tmp_path / "attempts.sqlite3"),
        "HANDLER_MODE": "ok",
        "TRIGGER_QUEUE": QUEUE,
        "AzureWebJobsStorage": connection,
    }
    process = LoggedWorker(config, env, args=args).start()
    workers.append(process)
    return process


async def test_key_stays_out_of_the_log_while_processing_and_through_a_storage_outage(
    tmp_path: Path, workers: list[LoggedWorker]
) -> None:
    """At DEBUG: start, handle a message, lose storage (retries and a failed receive are logged), SIGTERM."""
    emulator = Azurite().start()  # its own, so that it can be taken away from this worker only
    try:
        worker = start(workers, tmp_path, emulator.connection_string, "--log-level", "DEBUG")
        worker.wait_for_log("host started")
        opened = worker.events("queue storage opened")
        assert opened and f"127.0.0.1:{emulator.port}" in str(opened[0]["storage"])

        sender = open_backend(emulator.connection_string, tmp_path)
        try:
            sent = await sender.put(QUEUE, encode("needs the key to be read", "base64"))
            done = poll(
                lambda: [r for r in attempts(tmp_path / "attempts.sqlite3") if r["event"] == "done"],
                30,
                what="the handler to finish",
            )
            assert [(r["message_id"], r["body"]) for r in done] == [(sent.id, "needs the key to be read")]
            await apoll(lambda: _empty(sender), 30, what="the message to be deleted")  # completion, after the handler
        finally:
            await sender.close()

        # Storage goes away under the running worker: each call retries, then the receive gives up and says so.
        assert emulator.proc is not None
        emulator.proc.kill()
        emulator.proc.wait(30)
        worker.wait_for_log(STORAGE_RETRYING, 60)
        worker.wait_for_log(RECEIVE_FAILED, 60)

        assert worker.stop(signal.SIGTERM) == 0
    finally:
        emulator.stop()

    totals = worker.totals()
    assert totals["succeeded"] == 1
    assert totals["storage_errors"] >= 1 and totals["storage_retries"] >= 1
    assert_no_key(worker.text())


async def _empty(backend: QueueBackend) -> bool:
    return await backend.approximate_count(QUEUE) == 0


def test_storage_failure_at_startup_is_logged_without_the_key(tmp_path: Path, workers: list[LoggedWorker]) -> None:
    """Nothing listens on the endpoint: whatever the worker makes of that, its log says so and holds no key."""
    worker = start(workers, tmp_path, connection_string(closed_port()))
    assert worker.proc is not None

    def failure_surfaced() -> bool:
        return worker.proc is not None and (worker.proc.poll() is not None or bool(worker.events(RECEIVE_FAILED)))

    poll(failure_surfaced, 60, what="a storage call to give up")
    worker.kill()
    text = worker.text()
    assert worker.events(STORAGE_RETRYING), f"the failed call was not logged:\n{text}"
    assert "ServiceRequestError" in text, text
    assert_no_key(text)


async def test_worker_keeps_running_while_storage_is_unreachable_at_startup(
    tmp_path: Path, workers: list[LoggedWorker]
) -> None:
    worker = start(workers, tmp_path, connection_string(closed_port()), "--log-level", "DEBUG")
    worker.wait_for_log(STORAGE_RETRYING, 30)
    # A receive giving up (after the whole retry budget) and the next one failing again: the host carried on. The
    # outage's first failure is an error; the later ones are DEBUG lines.
    poll(
        lambda: bool(worker.events(RECEIVE_FAILED_AGAIN)) or worker.proc is None or worker.proc.poll() is not None,
        90,
        what="two receives to give up",
    )
    assert len(worker.events(RECEIVE_FAILED)) == 1
    assert worker.proc is not None and worker.proc.poll() is None, f"the worker exited:\n{worker.text()}"

    assert worker.stop(signal.SIGTERM) == 0
    assert worker.totals()["storage_errors"] >= 2
    assert_no_key(worker.text())

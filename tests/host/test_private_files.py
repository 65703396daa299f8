"""The embedded queue and blob store keep messages and blobs from other users, whatever the umask.

Every test that creates files runs under umask 0, where nothing but the mode
the code asks for stands between a new file and the world: SQLite's own 0644
and ``mkdir``'s 0777 would show as such. Files that exist already with a
looser mode are reported at start, with the command that closes them, and
still run.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.host.processes import WorkerProcess, attempts, worker_environment, write_host_yaml
from tests.support import apoll, poll, running
from worker import Out, WorkerApp
from worker.backends.embedded.files import queue_files
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.settings.config import HostConfig


@pytest.fixture
def no_umask() -> Iterator[None]:
    """umask 0 for the test (and the processes it starts), the process's own umask back after it."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def modes(base: Path, *paths: Path) -> dict[str, str]:
    """Each path's permission bits in octal, by its path relative to ``base``."""
    return {path.relative_to(base).as_posix(): f"{stat.S_IMODE(path.stat().st_mode):o}" for path in paths}


async def _now(value: bool) -> bool:
    return value


@pytest.mark.usefixtures("no_umask")
async def test_the_queue_file_its_wal_and_shm_and_the_blob_folders_are_owner_only(tmp_path: Path) -> None:
    app = WorkerApp()

    @app.function_name("report")
    @app.queue_trigger(arg_name="msg", queue_name="orders")
    @app.blob_output(arg_name="out", path="reports/daily/{queueTrigger}.txt")
    def report(msg: str, out: Out[str]) -> None:
        out.set(msg.upper())

    queues = open_backend(None, tmp_path)
    try:
        await queues.create_queue("orders")
        await queues.put("orders", encode(b"order-1", "base64"))
        async with running(app, HostConfig(base_dir=tmp_path, max_polling_interval=0.2)) as host:
            await apoll(lambda: _now(host.metrics.get("succeeded", "report") == 1), 20, what="the message handled")
            worker = tmp_path / ".worker"
            blobs = worker / "blobs"
            # While the host and this backend hold the file open, SQLite keeps its -wal and -shm beside it.
            found = modes(
                tmp_path,
                worker,
                *queue_files(worker / "queues.sqlite3"),
                blobs,
                blobs / "reports",
                blobs / "reports" / "daily",
                blobs / "reports" / "daily" / "order-1.txt",
            )
    finally:
        await queues.close()

    assert found == {
        ".worker": "700",
        ".worker/queues.sqlite3": "600",
        ".worker/queues.sqlite3-wal": "600",
        ".worker/queues.sqlite3-shm": "600",
        ".worker/blobs": "700",
        ".worker/blobs/reports": "700",
        ".worker/blobs/reports/daily": "700",
        ".worker/blobs/reports/daily/order-1.txt": "600",
    }


@pytest.mark.usefixtures("no_umask")
async def test_every_folder_made_for_a_named_queue_file_is_owner_only(tmp_path: Path) -> None:
    backend = open_backend("sqlite:///state/queues/orders.db", tmp_path)
    try:
        await backend.create_queue("orders")
    finally:
        await backend.close()

    state = tmp_path / "state"
    assert modes(tmp_path, state, state / "queues", state / "queues" / "orders.db") == {
        "state": "700",
        "state/queues": "700",
        "state/queues/orders.db": "600",
    }


@pytest.mark.subprocess
@pytest.mark.usefixtures("no_umask")
def test_worker_send_and_worker_run_make_owner_only_files(tmp_path: Path, record_db: Path) -> None:
    config = write_host_yaml(tmp_path)
    env = worker_environment(RECORD_DB=str(record_db))
    sent = subprocess.run(
        [sys.executable, "-m", "worker", "send", "work", "hello"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    worker = tmp_path / ".worker"
    assert modes(tmp_path, *worker.iterdir(), worker) == {".worker": "700", ".worker/queues.sqlite3": "600"}

    running_worker = WorkerProcess(config, env).start()
    try:
        poll(lambda: attempts(record_db), 60, what="the message handled")
        # The running host holds the file open in WAL mode: its -wal and -shm exist now.
        found = modes(tmp_path, *queue_files(worker / "queues.sqlite3"))
        assert running_worker.stop() == 0
    finally:
        running_worker.kill()
    assert found == {
        ".worker/queues.sqlite3": "600",
        ".worker/queues.sqlite3-wal": "600",
        ".worker/queues.sqlite3-shm": "600",
    }


def test_files_and_folders_others_can_read_are_reported_at_start_and_still_run(tmp_path: Path) -> None:
    write_host_yaml(tmp_path)
    record_db = tmp_path / "attempts.sqlite3"
    assert run_cli(tmp_path, "send", "work", "hello").returncode == 0
    worker = tmp_path / ".worker"
    queue_file = worker / "queues.sqlite3"
    (worker / "blobs").mkdir()
    worker.chmod(0o755)
    queue_file.chmod(0o664)
    (worker / "blobs").chmod(0o702)

    ran = run_cli(
        tmp_path, "run", "--app", "tests.apps.recording:app", "--no-supervisor", "--burst", env={"RECORD_DB": str(record_db)}
    )

    assert ran.returncode == 0, ran.stderr
    assert [row["event"] for row in attempts(record_db)] == ["start", "done"]  # reported, not refused
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    reported = [
        {key: line[key] for key in ("path", "mode", "access", "fix")}
        for line in lines
        if line["event"] == "embedded queue or blob storage open to other users"
    ]
    assert all(line["level"] == "warning" for line in lines if line["event"].endswith("open to other users"))
    assert reported == [
        {"path": str(worker), "mode": "0755", "access": "group can read, others can read", "fix": f"chmod 700 {worker}"},
        {
            "path": str(queue_file),
            "mode": "0664",
            "access": "group can read and write, others can read",
            "fix": f"chmod 600 {queue_file}",
        },
        {
            "path": str(worker / "blobs"),
            "mode": "0702",
            "access": "others can write",
            "fix": f"chmod 700 {worker / 'blobs'}",
        },
    ]

    for path in (worker, worker / "blobs"):
        path.chmod(0o700)
    queue_file.chmod(0o600)
    again = run_cli(
        tmp_path, "run", "--app", "tests.apps.recording:app", "--no-supervisor", "--burst", env={"RECORD_DB": str(record_db)}
    )
    assert again.returncode == 0, again.stderr
    assert "open to other users" not in again.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nobody can create a file")
def test_a_queue_file_that_cannot_be_created_is_refused_naming_it(tmp_path: Path) -> None:
    ran = run_cli(tmp_path, "send", "work", "hello", env={"AzureWebJobsStorage": "sqlite:////proc/queues.sqlite3"})

    assert ran.returncode == 2, ran.stderr
    # The notice of a new file comes first; then why it could not be made.
    assert ran.stderr.strip().splitlines()[-1] == (
        "worker send: error: embedded queue file /proc/queues.sqlite3 cannot be created: No such file or directory"
    )


@pytest.mark.usefixtures("no_umask")
def test_worker_init_writes_local_settings_readable_by_its_owner_only(tmp_path: Path) -> None:
    """local.settings.json is where an account key goes next: 0600 even under umask 0, the other files as the umask
    says."""
    made = run_cli(tmp_path, "init", "app")
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "app"
    found = modes(folder, *folder.iterdir())
    assert found.pop("local.settings.json") == "600"
    assert set(found.values()) == {"666"}, found


def test_settings_and_token_files_others_can_read_are_reported_at_start_and_still_run(tmp_path: Path) -> None:
    write_host_yaml(tmp_path, worker={"httpTokenFile": "token.txt"})
    (tmp_path / "local.settings.json").write_text(json.dumps({"Values": {"SOME_SETTING": "x"}}), encoding="utf-8")
    (tmp_path / "token.txt").write_text("t" * 32, encoding="utf-8")
    (tmp_path / "local.settings.json").chmod(0o644)
    (tmp_path / "token.txt").chmod(0o640)
    record_db = tmp_path / "attempts.sqlite3"

    ran = run_cli(
        tmp_path, "run", "--app", "tests.apps.recording:app", "--no-supervisor", "--burst", env={"RECORD_DB": str(record_db)}
    )

    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    reported = [
        {key: line[key] for key in ("level", "path", "mode", "access", "fix")}
        for line in lines
        if line["event"] == "settings or token file open to other users"
    ]
    settings, token = tmp_path / "local.settings.json", tmp_path / "token.txt"
    assert reported == [
        {
            "level": "warning",
            "path": str(settings),
            "mode": "0644",
            "access": "group can read, others can read",
            "fix": f"chmod 600 {settings}",
        },
        {"level": "warning", "path": str(token), "mode": "0640", "access": "group can read", "fix": f"chmod 600 {token}"},
    ]

    settings.chmod(0o600)
    token.chmod(0o600)
    again = run_cli(
        tmp_path, "run", "--app", "tests.apps.recording:app", "--no-supervisor", "--burst", env={"RECORD_DB": str(record_db)}
    )
    assert again.returncode == 0, again.stderr
    assert "open to other users" not in again.stderr

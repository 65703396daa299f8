"""What a worker process loads at start: the web framework only when it serves a port, the host only where it runs.

aiohttp (with the TLS contexts its connector makes at import) was most of a ``worker`` command's start; a worker
without ``worker.httpPort``, and every command but ``worker run``, no longer loads it. ``worker run`` itself, the
supervisor, loads neither the app nor the host, which only the processes it starts run. Python's own import log
(``-X importtime``, which the supervisor does not pass on to the processes it starts) says what a real
``worker run --burst`` imported.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.host.processes import worker_environment


def imported_by_a_burst_run(tmp_path: Path, *options: str, **settings: str) -> set[str]:
    env = worker_environment(
        AzureWebJobsStorage=f"sqlite:///{tmp_path / 'queues.sqlite3'}",
        RECORD_DB=str(tmp_path / "record.sqlite3"),
        **settings,
    )
    ran = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "worker",
            "run",
            "--burst",
            *options,
            "--app",
            "tests.apps.recording:app",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    return {line.rpartition("|")[2].strip() for line in ran.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.subprocess
def test_a_worker_without_a_port_does_not_load_the_web_framework_and_one_with_a_port_does(tmp_path: Path) -> None:
    assert "worker.runtime.host" in imported_by_a_burst_run(tmp_path, "--no-supervisor")  # the log is read
    assert "aiohttp" not in imported_by_a_burst_run(tmp_path, "--no-supervisor")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert "aiohttp" in imported_by_a_burst_run(
        tmp_path, "--no-supervisor", WORKER__worker__httpPort=str(port), WORKER__worker__httpHost="127.0.0.1"
    )


@pytest.mark.subprocess
def test_the_supervisor_loads_neither_the_app_nor_the_host_and_the_process_it_starts_runs_both(tmp_path: Path) -> None:
    supervisor = imported_by_a_burst_run(tmp_path)
    assert "worker.ops.supervisor" in supervisor  # the log is the supervisor's
    assert not {"worker.app", "worker.compat.loading", "worker.runtime.host", "worker.ops.host_process"} & supervisor
    assert {"worker.app", "worker.runtime.host"} <= imported_by_a_burst_run(tmp_path, "--no-supervisor")

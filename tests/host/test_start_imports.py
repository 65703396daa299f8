"""What a worker process loads at start: the web framework only when it serves a port.

aiohttp (with the TLS contexts its connector makes at import) was most of a ``worker`` command's start; a worker
without ``worker.httpPort``, and every command but ``worker run``, no longer loads it. Python's own import log
(``-X importtime``) says what a real ``worker run --burst`` imported.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.host.processes import worker_environment


def imported_by_a_burst_run(tmp_path: Path, **settings: str) -> set[str]:
    env = worker_environment(AzureWebJobsStorage=f"sqlite:///{tmp_path / 'queues.sqlite3'}",
                             RECORD_DB=str(tmp_path / "record.sqlite3"), **settings)
    ran = subprocess.run([sys.executable, "-X", "importtime", "-m", "worker", "run", "--burst", "--no-supervisor",
                          "--app", "tests.apps.recording:app"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    return {line.rpartition("|")[2].strip() for line in ran.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.subprocess
def test_a_worker_without_a_port_does_not_load_the_web_framework_and_one_with_a_port_does(tmp_path: Path) -> None:
    assert "worker.runtime.host" in imported_by_a_burst_run(tmp_path)  # the log is read
    assert "aiohttp" not in imported_by_a_burst_run(tmp_path)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert "aiohttp" in imported_by_a_burst_run(tmp_path, WORKER__worker__httpPort=str(port),
                                                WORKER__worker__httpHost="127.0.0.1")

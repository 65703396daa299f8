"""``worker spark``'s arguments and its answers when nothing runs: refused or answered before any JVM starts.

Starting servers for real is tests/pipeline/test_demo.py's.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.cli import run_cli


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("action", ["status", "stop"])
def test_with_nothing_started_status_and_stop_say_so_and_leave_no_folder(project: Path, action: str) -> None:
    ran = run_cli(project, "spark", action)

    assert ran.returncode == 0, ran.stderr
    state = project / ".worker" / "spark"
    expected = {
        "status": f"no Spark servers started from {state} are running\n",
        "stop": f"nothing to stop: no Spark servers started from {state} are running\n",
    }
    assert ran.stdout == expected[action]
    assert not (project / ".worker").exists()


@pytest.mark.parametrize(
    ("args", "option", "expected"),
    [
        (["start-cluster", "--host", "0.0.0.0"], "--host", "an address of this machine that clients reach it at"),
        (["start-connect", "--host", "::"], "--host", "an address of this machine that clients reach it at"),
        (["start-cluster", "--host", "not a host"], "--host", "an address to listen on"),
        (["start-cluster", "--port", "0"], "--port", "a port from 1 to 65535"),
        (["start-connect", "--port", "70000"], "--port", "a port from 1 to 65535"),
        (["start-cluster", "--cores", "0"], "--cores", "a number of at least 1"),
        (["start-cluster", "--memory", "lots"], "--memory", "an amount such as 512m or 4g"),
        (["start-connect", "--timeout", "0s"], "--timeout", "a duration from 1s to 1h"),
        (["stop", "--timeout", "2h"], "--timeout", "a duration from 1s to 1h"),
    ],
)
def test_a_bad_argument_is_one_line_naming_it_and_starts_nothing(
    project: Path, args: list[str], option: str, expected: str
) -> None:
    ran = run_cli(project, "spark", *args)

    assert ran.returncode == 2
    [line] = ran.stderr.splitlines()
    assert line.startswith(f"worker spark {args[0]}: error: argument {option}: expected {expected}"), line
    assert not (project / ".worker").exists()


def test_a_port_already_taken_is_refused_before_anything_starts(project: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = run_cli(project, "spark", "start-cluster", "--port", str(port))

    assert ran.returncode == 1
    assert ran.stderr.startswith(f"worker spark: error: cannot listen on port {port} at 127.0.0.1: "), ran.stderr
    assert run_cli(project, "spark", "status").stdout.startswith("no Spark servers started from")
    assert not (project / ".worker").exists()

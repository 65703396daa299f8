"""``worker run`` on a terminal (a pseudo-terminal) writes compact lines; off one, the JSON lines it always wrote.

A newcomer's first run printed fourteen lines for one message, and a message that failed three times three full
tracebacks with the host's frames. On a terminal: the start in one line, one line per invocation, a traceback at a
message's first failure only (the app's frames, the host's hidden), the summary table last. Operators and tests
parse what goes to a file or a pipe: that keeps its form exactly.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.host.processes import REPO, worker_environment
from worker.observability.logs import LOG_FORMAT_ENV

HELLO = """
import logging

from worker import QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="hello", connection="AzureWebJobsStorage")
def hello(msg: QueueMessage) -> None:
    logging.info("hello, %s", msg.get_body().decode())
"""

FAILING = """
from worker import QueueMessage, WorkerApp

app = WorkerApp()


def check(body: str) -> None:
    raise ValueError(f"cannot take {body}; AccountKey=c2VjcmV0LWtleS1vZi10aGUtdGVzdA==")


@app.queue_trigger(arg_name="msg", queue_name="hello", connection="AzureWebJobsStorage")
def hello(msg: QueueMessage) -> None:
    check(msg.get_body().decode())
"""
#: A body that would clear the screen, printed raw.
HOSTILE = "world\x1b[2J"
TIME = r"\d\d:\d\d:\d\d"
INVOCATION = re.compile(rf"^{TIME} hello (?P<id>[0-9a-f]{{8}}) (?P<outcome>\w+) [\d.]+ ms, attempt (?P<n>\d)/(?P<max>\d)")


def app_folder(folder: Path, source: str, max_dequeue_count: int, body: str) -> Path:
    """A folder holding an app, its host.json and local.settings.json (the embedded queue), and one message."""
    (folder / "function_app.py").write_text(source, encoding="utf-8")
    host = {"version": "2.0", "extensions": {"queues": {"maxDequeueCount": max_dequeue_count}}}
    (folder / "host.json").write_text(json.dumps(host), encoding="utf-8")
    local = {"IsEncrypted": False, "Values": {"AzureWebJobsStorage": "sqlite:///.worker/queues.sqlite3"}}
    (folder / "local.settings.json").write_text(json.dumps(local), encoding="utf-8")
    (folder / "local.settings.json").chmod(0o600)  # as worker init makes it: else a warning says it is open to others
    sent = run_cli(folder, "send", "hello", body)
    assert sent.returncode == 0, sent.stderr
    return folder


def environment() -> dict[str, str]:
    return {k: v for k, v in worker_environment().items() if k != LOG_FORMAT_ENV}


def run_on_terminal(folder: Path, *args: str, timeout: float = 60) -> list[str]:
    """``worker run --burst ARGS`` in ``folder`` with a pseudo-terminal as its stdin, stdout and stderr: its lines."""
    terminal, worker_side = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--burst", *args],
        cwd=folder,
        env=environment() | {"PYTHONPATH": str(REPO)},
        stdin=worker_side,
        stdout=worker_side,
        stderr=worker_side,
    )
    os.close(worker_side)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([terminal], [], [], deadline - time.monotonic())[0]:
                break
            try:
                data = os.read(terminal, 65536)
            except OSError:  # EIO: every process holding the terminal's other side has exited
                break
            if not data:
                break
            output += data
        assert process.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, output.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(terminal)
    return output.decode("utf-8").replace("\r\n", "\n").splitlines()


def summary(lines: list[str], *counts: str) -> None:
    """The run's last lines are its summary table: its header, one row, how long it ran."""
    *_, header, row, ran = lines
    assert header.split() == ["function", *counts], lines
    assert row.split()[0] == "hello", lines
    assert re.fullmatch(r"ran \d+\.\ds", ran), lines


@pytest.mark.subprocess
def test_one_message_on_a_terminal_is_three_lines_and_the_summary(tmp_path: Path) -> None:
    lines = run_on_terminal(app_folder(tmp_path, HELLO, 5, "world"))

    assert len(lines) == 6, lines
    started, said, invocation = lines[:3]
    assert re.fullmatch(rf"{TIME} host started \(pid \d+, burst\): hello on queue hello; embedded queue .+", started)
    found = INVOCATION.match(invocation)
    assert found and found["outcome"] == "succeeded" and (found["n"], found["max"]) == ("1", "5"), invocation
    assert said == f"{invocation[:8]} hello {found['id']} hello, world"  # the handler's own line, named alike
    summary(lines, "received", "succeeded")


@pytest.mark.subprocess
def test_a_poisoned_message_on_a_terminal_shows_one_traceback_of_the_apps_frames(tmp_path: Path) -> None:
    lines = run_on_terminal(app_folder(tmp_path, FAILING, 3, HOSTILE))
    text = "\n".join(lines)

    invocations = [found for line in lines if (found := INVOCATION.match(line))]
    assert [(f["outcome"], f["n"], f["max"]) for f in invocations] == [
        ("failed", "1", "3"),
        ("failed", "2", "3"),
        ("failed", "3", "3"),
    ]
    # One traceback, the first failure's: the app's two frames, the host's hidden in one line; the later failures
    # one line each, with the exception's type and text.
    assert text.count("Traceback (most recent call last):") == 1, text
    first = lines.index(next(line for line in lines if INVOCATION.match(line)))
    trace = lines[first + 1 : lines.index(next(line for line in lines[first + 1 :] if re.match(TIME, line)))]
    assert trace[0] == "Traceback (most recent call last):", text
    assert re.fullmatch(r"  … \d+ host frames hidden", trace[1]), text
    frames = [line for line in trace if line.startswith("  File ")]
    assert [frame.rsplit(" in ", 1)[1] for frame in frames] == ["hello", "check"], text
    assert all(str(tmp_path / "function_app.py") in frame for frame in frames), text
    assert not re.search(r"[/\\]worker[/\\]|asyncio|concurrent|threading", "\n".join(trace)), text
    for later in [line for line in lines if (found := INVOCATION.match(line)) and found["n"] != "1"]:
        assert later.endswith(r"ValueError: cannot take world\x1b[2J; AccountKey=***"), later
    assert re.search(rf"^{TIME} ERROR hello [0-9a-f]{{8}} moved to hello-poison: ValueError", text, re.M), text
    # Every compact line passes the redaction, and a body's control characters are written out, not obeyed.
    assert "c2VjcmV0" not in text and "\x1b" not in text, text
    summary(lines, "received", "failed", "retried", "poisoned")
    assert len(lines) == 1 + 3 + len(trace) + 1 + 3, text  # started, three invocations, the poison line, the table


@pytest.mark.subprocess
def test_log_format_json_on_a_terminal_reaches_the_process_that_runs_the_host(tmp_path: Path) -> None:
    lines = run_on_terminal(app_folder(tmp_path, HELLO, 5, "world"), "--log-format", "json")

    events = [json.loads(line)["event"] for line in lines if line.startswith("{")]
    assert {"supervisor started", "host started", "Executing", "hello, world", "Executed", "host stopped"} <= set(events)
    assert len(events) == len(lines) - 3, lines  # every line but the summary table's


@pytest.mark.subprocess
def test_off_a_terminal_the_log_stays_json_lines_with_whole_tracebacks(tmp_path: Path) -> None:
    folder = app_folder(tmp_path, FAILING, 3, "world")
    with (tmp_path / "worker.log").open("wb") as log:
        ran = subprocess.run(
            [sys.executable, "-m", "worker", "run", "--burst"],
            cwd=folder,
            env=environment() | {"PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            timeout=60,
        )
    assert ran.returncode == 0
    lines = [json.loads(line) for line in (tmp_path / "worker.log").read_text(encoding="utf-8").splitlines()]

    attempt = ["Executing", "handler failed", "Executed"]
    assert [line["event"] for line in lines] == [
        "local settings read",
        "config file",
        "supervisor started",
        "worker process started",
        "queue storage opened",
        "function loaded",
        "host started",
        *attempt,
        "message failed; it will be retried",
        *attempt,
        "message failed; it will be retried",
        *attempt,
        "message moved to the poison queue",
        "trigger queues are empty; stopping (burst mode)",
        "host stopped",
        "worker process exited",
        "supervisor stopped",
    ]
    failures = [line for line in lines if line["event"] == "handler failed"]
    assert all("worker/runtime/dispatcher.py" in line["exception"] for line in failures)  # every frame, every time
    assert all("AccountKey=***" in line["exception"] and "c2VjcmV0" not in line["exception"] for line in failures)


def test_an_unknown_log_format_in_the_environment_is_refused_before_the_run(tmp_path: Path) -> None:
    ran = run_cli(app_folder(tmp_path, HELLO, 5, "world"), "run", "--burst", env={LOG_FORMAT_ENV: "pretty"})

    assert ran.returncode == 2
    assert "WORKER_LOG_FORMAT='pretty' is not a log format: use one of auto, compact, plain, json" in ran.stderr

"""Invocation context and logs as in Functions, through a real ``worker run``: Context fields, log lines per invocation."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.host.processes import REPO, WorkerProcess, write_host_yaml
from tests.support import poll

APP = "tests.apps.context_app:app"


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _send(worker: WorkerProcess, queue: str, *bodies: str) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "worker", "send", queue, *bodies, "--config", str(worker.config)],
        cwd=REPO,
        env={**worker.merged_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture
def started(tmp_path: Path, connection: str | None) -> Any:
    def start(invocation_logs: bool = True) -> tuple[WorkerProcess, Path]:
        config = write_host_yaml(tmp_path, {"maxDequeueCount": 2}, {"invocationLogs": invocation_logs})
        record = tmp_path / "records.jsonl"
        env = {"RECORD_FILE": str(record)}
        if connection is not None:
            env["AzureWebJobsStorage"] = connection
        return WorkerProcess(config, env, app=APP).start(), record

    return start


@pytest.mark.subprocess
def test_context_fields_and_every_log_line_of_an_invocation_name_it(started: Any, connection: str | None) -> None:
    worker, record = started()
    try:
        worker.wait_for_log("host started")
        _send(worker, "sync-logs", "one", "two", "fail-three")
        _send(worker, "async-logs", "four")
        poll(lambda: len(_records(record)) == 5, 30, what="five invocations (fail-three twice)")
        poll(
            lambda: any(line.get("event") == "message moved to the poison queue" for line in worker.lines()),
            30,
            what="fail-three in poison",
        )
        assert worker.stop(signal.SIGTERM) == 0
    finally:
        worker.kill()
    rows = _records(record)
    lines = worker.lines()

    ids = [row["invocation_id"] for row in rows]
    assert len(set(ids)) == 5 and len({row["trace_parent"] for row in rows}) == 5
    for row in rows:
        assert row["thread_invocation_id"] == row["invocation_id"]
        assert row["function_directory"] == str(REPO / "tests" / "apps")
        version, trace, span, flags = row["trace_parent"].split("-")
        assert (version, len(trace), len(span), flags) == ("00", 32, 16, "01")
        assert row["max_retry_count"] == 1
    assert sorted(row["retry_count"] for row in rows if row["body"] == "fail-three") == [0, 1]

    by_id = {row["invocation_id"]: row for row in rows}

    def own_lines(event_start: str) -> list[dict[str, Any]]:
        return [line for line in lines if str(line.get("event", "")).startswith(event_start)]

    for line in own_lines("sync handler says") + own_lines("root logger says"):
        row = by_id[line["invocation_id"]]
        assert line["function"] == row["function_name"] == "sync_logger"
        assert line["event"].endswith(row["body"])
    for line in own_lines("async handler says") + own_lines("async stdlib says"):
        assert line["function"] == "async_logger" and by_id[line["invocation_id"]]["body"] == "four"
    assert len(own_lines("sync handler says")) == 4 and len(own_lines("async stdlib says")) == 1

    executing = {line["invocation_id"] for line in own_lines("Executing")}
    executed = {line["invocation_id"]: line for line in own_lines("Executed")}
    assert executing == set(ids) == set(executed)
    outcomes = sorted((by_id[i]["body"], line["outcome"]) for i, line in executed.items())
    assert outcomes == [
        ("fail-three", "failed"),
        ("fail-three", "failed"),
        ("four", "succeeded"),
        ("one", "succeeded"),
        ("two", "succeeded"),
    ]
    assert all(line["duration_ms"] >= 0 for line in executed.values())
    # No line outside an invocation carries one: the binding does not leak into the listener or the host.
    assert not [line for line in lines if line.get("event") in ("host started", "host stopped") and "invocation_id" in line]


@pytest.mark.subprocess
def test_invocation_logs_can_be_switched_off(started: Any) -> None:
    worker, record = started(invocation_logs=False)
    try:
        worker.wait_for_log("host started")
        _send(worker, "sync-logs", "quiet")
        poll(lambda: len(_records(record)) == 1, 30, what="the invocation")
        poll(
            lambda: any(str(line.get("event", "")).startswith("sync handler says") for line in worker.lines()),
            30,
            what="the handler's own line",
        )
        assert worker.stop(signal.SIGTERM) == 0
    finally:
        worker.kill()
    events = [line.get("event") for line in worker.lines()]
    assert "Executing" not in events and "Executed" not in events
    assert yaml.safe_load(worker.config.read_text())["worker"]["invocationLogs"] is False

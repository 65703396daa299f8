"""A function that runs Spark receives nothing until its Spark is ready: the host's own start costs no message.

A worker process starts cold with a message already waiting for a Spark function whose functionTimeout is shorter
than Spark's start, and with a single attempt allowed (maxDequeueCount): taken at once, that message would wait for
the session within its functionTimeout and go to poison without its handler running a job. Held in the queue until
Spark is ready, it is handled at its first attempt and deleted, while the app's function without Spark serves from
the start.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.spark.sessions import master_and_conf, process_env
from worker.backends.queues import QueueBackend, QueueNotFound
from worker.backends.registry import open_backend

REPO = Path(__file__).resolve().parents[2]
#: The Spark function's functionTimeout: shorter than a JVM's start and its session's first job, longer than the
#: handler's job on a session made and warmed.
FUNCTION_TIMEOUT = 3.0


@pytest.mark.subprocess
@pytest.mark.parametrize("where", ["local", "connect"])
def test_a_spark_functions_first_message_after_a_cold_start_is_not_timed_out_by_the_start(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """The Spark message is received once "Spark ready" is logged, at once (the listener is woken, not left to its
    long polling interval), and succeeds; the message without Spark was handled before Spark was ready; both
    queues are empty and nothing went to poison. On Connect the start is a session on a running server, often shorter
    than functionTimeout: the order and the outcome are checked there, the start's length only where Spark's JVM is
    the worker's own."""
    master, conf = master_and_conf(where, request)
    (tmp_path / "host.yaml").write_text(
        yaml.safe_dump(
            {
                "version": "1.0",
                "extensions": {"queues": {"maxPollingInterval": "00:01:00", "maxDequeueCount": 1}},
                "functions": {"total": {"functionTimeout": f"00:00:{FUNCTION_TIMEOUT:02.0f}"}},
                "connections": {"AzureWebJobsStorage": "sqlite:///queues.db"},
                "spark": {"master": master, "conf": conf},
            }
        ),
        encoding="utf-8",
    )
    result_file = tmp_path / "result.jsonl"
    env = process_env(RESULT_FILE=str(result_file), PYTHONPATH=str(REPO))
    config = str(tmp_path / "host.yaml")
    worker = [sys.executable, "-m", "worker"]
    for queue, body in (("spark-ready", "sum"), ("plain-ready", "no Spark here")):
        sent = subprocess.run(
            [*worker, "send", queue, body, "--config", config],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr

    run = subprocess.run(
        [*worker, "run", "--burst", "--app", "tests.apps.spark_ready:app", "--config", config],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    stopped = next(line for line in lines if line["event"] == "host stopped")
    assert {key: stopped[key] for key in ("succeeded", "failed", "retried", "released", "poisoned")} == {
        "succeeded": 2,
        "failed": 0,
        "retried": 0,
        "released": 0,
        "poisoned": 0,
    }, run.stderr[-3000:]
    assert asyncio.run(_counts(tmp_path)) == {"spark-ready": 0, "plain-ready": 0, "spark-ready-poison": 0}
    records = [json.loads(line) for line in result_file.read_text().splitlines()]
    assert [(r["function"], r["dequeue_count"]) for r in records] == [("plain", 1), ("total", 1)]
    assert records[1]["sum"] == 4950

    plain_done = _index(lines, "Executed", "plain")
    ready = _index(lines, "Spark ready")
    total_began = _index(lines, "Executing", "total")
    assert plain_done < ready < total_began, run.stderr[-3000:]
    assert _seconds(lines[ready], lines[total_began]) < 2, "the Spark message waited for a poll, not for the wake"
    if where == "local":
        assert lines[ready]["seconds"] > FUNCTION_TIMEOUT, "Spark started within functionTimeout: the test shows nothing"


def _index(lines: list[dict[str, Any]], event: str, function: str | None = None) -> int:
    """Where the log's first line of ``event`` (for ``function``) is."""
    found = [i for i, line in enumerate(lines) if line["event"] == event and line.get("function") == function]
    assert found, f"no {event!r} line for {function}"
    return found[0]


def _seconds(earlier: dict[str, Any], later: dict[str, Any]) -> float:
    return (datetime.fromisoformat(later["timestamp"]) - datetime.fromisoformat(earlier["timestamp"])).total_seconds()


async def _counts(folder: Path) -> dict[str, int]:
    """The messages left in the trigger queue, the other function's and the Spark function's poison queue."""
    backend = open_backend("sqlite:///queues.db", folder)
    try:
        return {queue: await _count(backend, queue) for queue in ("spark-ready", "plain-ready", "spark-ready-poison")}
    finally:
        await backend.close()


async def _count(backend: QueueBackend, queue: str) -> int:
    try:
        return await backend.approximate_count(queue)
    except QueueNotFound:  # a poison queue nothing was ever put in
        return 0

"""Per-function policies through real ``worker run`` processes on both backends: concurrency caps, retry delays,
a maxDequeueCount of one function's own, poison from code, and ``@app.retry`` of an azure.functions app (not applied
to a queue trigger, as in Functions).

The apps are tests/apps/policies.py and tests/apps/retry_function_app.py; each attempt is recorded with its time
(tests/apps/recording.py's table), so the tests read overlaps and gaps from what the handlers saw.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.host.processes import WorkerProcess, attempts
from tests.support import apoll
from worker.backends.queues import QueueBackend, QueueNotFound, RawMessage
from worker.backends.registry import DEFAULT_SQLITE_PATH, SQLITE_PREFIX
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

#: The queue the ``queue`` fixture creates; the others are created by the host at start.
QUEUE = "capped"


@pytest.fixture
def worker(tmp_path: Path, record_db: Path, connection: str | None) -> Iterator[Any]:
    """Start ``worker run`` on a host.yaml with the given sections; killed at the end if still running."""
    started: list[WorkerProcess] = []

    def start(app: str, settings: dict[str, Any]) -> WorkerProcess:
        config = tmp_path / "host.yaml"
        base = {"version": "1.0", "extensions": {"queues": {"maxPollingInterval": "200ms"}}}
        config.write_text(yaml.safe_dump(_merge(base, settings)), encoding="utf-8")
        storage = connection or f"{SQLITE_PREFIX}{DEFAULT_SQLITE_PATH.as_posix()}"
        process = WorkerProcess(config, {"RECORD_DB": str(record_db), "AzureWebJobsStorage": storage}, app=app).start()
        started.append(process)
        process.wait_for_log("host started")
        return process

    yield start
    for process in started:
        process.kill()


def _merge(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in more.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


async def _send(queue: QueueBackend, name: str, *bodies: str) -> list[str]:
    try:
        return [(await queue.put(name, encode(body, "base64"))).id for body in bodies]
    except QueueNotFound:
        await queue.create_queue(name)
        return [(await queue.put(name, encode(body, "base64"))).id for body in bodies]


async def _poisoned(queue: QueueBackend, name: str) -> list[RawMessage]:
    try:
        return await queue.peek(f"{name}-poison", 32)
    except QueueNotFound:
        return []


def _rows(record_db: Path, event: str) -> list[dict[str, Any]]:
    return [row for row in attempts(record_db) if row["event"] == event]


def _retried(process: WorkerProcess, function: str) -> list[dict[str, Any]]:
    """The lines saying that a message of ``function`` failed and when it will be retried (``visible_in``)."""
    return [
        line
        for line in process.lines()
        if line.get("event") == "message failed; it will be retried" and line.get("function") == function
    ]


async def test_max_concurrency_caps_one_function_and_reaches_the_cap(
    worker: Any, queue: QueueBackend, record_db: Path
) -> None:
    process = worker("tests.apps.policies:app", {"functions": {"capped": {"maxConcurrency": 2}}})
    loaded = {line["function"]: line for line in process.lines() if line.get("event") == "function loaded"}
    assert loaded["capped"]["max_concurrency"] == 2 and "max_concurrency" not in loaded["flaky"]
    await _send(queue, "capped", *[f"m{i}" for i in range(8)])
    await apoll(lambda: _true(len(_rows(record_db, "end")) == 8), 60, what="eight one-second invocations")
    assert process.stop(signal.SIGTERM) == 0

    starts = {row["message_id"]: row["at"] for row in _rows(record_db, "start")}
    ends = {row["message_id"]: row["at"] for row in _rows(record_db, "end")}
    assert len(starts) == 8
    # The most invocations running at any one moment: at each start, count those started and not yet ended.
    overlaps = [sum(1 for other in starts if starts[other] <= at < ends[other]) for at in starts.values()]
    assert max(overlaps) == 2, overlaps


async def test_retry_policy_and_own_max_dequeue_count_while_another_function_keeps_the_global_one(
    worker: Any, queue: QueueBackend, record_db: Path
) -> None:
    process = worker(
        "tests.apps.policies:app",
        {
            "extensions": {"queues": {"maxDequeueCount": 2}},
            "functions": {
                "flaky": {
                    "maxDequeueCount": 4,
                    "retry": {
                        "strategy": "exponentialBackoff",
                        "minimumInterval": "00:00:01",
                        "maximumInterval": "00:00:04",
                    },
                }
            },
        },
    )
    [flaky_id] = await _send(queue, "flaky", "try me")
    [steady_id] = await _send(queue, "steady", "try me too")
    [poisoned] = await apoll(lambda: _poisoned(queue, "flaky"), 60, what="flaky's message in poison")
    await apoll(lambda: _poisoned(queue, "steady"), 30, what="steady's message in poison")
    assert process.stop() == 0

    flaky = _rows(record_db, "flaky")
    assert [(row["message_id"], row["dequeue_count"]) for row in flaky] == [(flaky_id, n) for n in (1, 2, 3, 4)]
    assert poisoned.content == encode("try me", "base64")
    steady = _rows(record_db, "steady")
    assert [(row["message_id"], row["dequeue_count"]) for row in steady] == [(steady_id, 1), (steady_id, 2)]
    # steady keeps the global settings: maxDequeueCount 2, and no retry policy (visibilityTimeout 0: at once).
    [once] = _retried(process, "steady")
    assert (once["dequeue_count"], once["visible_in"], once["attempts_left"]) == (1, 0, 1), once

    # The delays flaky's policy chose, logged to the millisecond: after attempt n, min(4 s, 1 s * 2^(n-1)), each
    # jittered by up to 20 % either way (docs/apps.md, Retry).
    retried = _retried(process, "flaky")
    assert [(line["dequeue_count"], line["attempts_left"]) for line in retried] == [(1, 3), (2, 2), (3, 1)], retried
    delays = [line["visible_in"] for line in retried]
    jitter = [delay / base for delay, base in zip(delays, (1, 2, 4), strict=True)]
    assert all(0.7995 <= factor <= 1.2005 for factor in jitter), delays
    # The queue must keep the message hidden that long, less its clock's granularity (whole seconds on Azure Storage,
    # so up to a second early) and the log's rounding. How much later the next attempt starts (the listener's
    # polling, the receive, a busy machine) nothing promises, so the gaps between attempts are bounded from below.
    early = queue.limits.visibility_resolution + 0.0005
    gaps = [later["at"] - earlier["at"] for earlier, later in zip(flaky, flaky[1:], strict=False)]
    assert all(gap >= delay - early for gap, delay in zip(gaps, delays, strict=True)), (gaps, delays)


async def test_poison_raised_by_a_handler_poisons_after_one_attempt_with_its_reason(
    worker: Any, queue: QueueBackend, record_db: Path
) -> None:
    process = worker("tests.apps.policies:app", {"extensions": {"queues": {"maxDequeueCount": 5}}})
    [message_id] = await _send(queue, "doomed", "42")
    await _send(queue, "sorter", "bad row", "good row")
    [copy] = await apoll(lambda: _poisoned(queue, "doomed"), 30, what="the message in poison")
    [sorted_out] = await apoll(lambda: _poisoned(queue, "sorter"), 30, what="the bad row in poison")
    await apoll(lambda: _true(len(_rows(record_db, "sorter")) == 2), 30, what="both rows seen")
    assert process.stop() == 0

    assert [(row["message_id"], row["dequeue_count"]) for row in _rows(record_db, "doomed")] == [(message_id, 1)]
    moved = {line["function"]: line for line in process.lines() if line.get("event") == "message moved to the poison queue"}
    assert moved["doomed"]["reason"] == "order 42 refers to a customer that does not exist"
    assert moved["doomed"]["poison_message_id"] == copy.id
    assert moved["sorter"]["reason"] == "malformed record" and sorted_out.content == encode("bad row", "base64")
    totals = process.totals()
    assert totals["poisoned"] == 2 and totals["poison_requested"] == 2 and totals["succeeded"] == 1
    assert await queue.approximate_count("sorter") == 0


async def test_app_retry_of_an_azure_functions_app_is_not_applied_and_said_once(
    worker: Any, queue: QueueBackend, record_db: Path
) -> None:
    process = worker("tests.apps.retry_function_app:app", {"extensions": {"queues": {"maxDequeueCount": 3}}})
    assert "retry" not in process.wait_for_log("function loaded")
    [warned] = [line for line in process.lines() if line.get("event", "").startswith("retry policies are not applied")]
    assert warned["functions"] == ["retried"] and warned["max_dequeue_count"] == 3
    await _send(queue, "retried", "again")
    await apoll(lambda: _poisoned(queue, "retried"), 60, what="the message in poison")
    assert process.stop() == 0

    tries = _rows(record_db, "retried")
    assert [row["dequeue_count"] for row in tries] == [1, 2, 3]
    # The app's fixed_delay of 2 s is not applied: each failed attempt makes the message visible at once
    # (visibilityTimeout 0), as the queue trigger in Functions retries it. The logged delay is the one the update asked
    # for; how soon the next attempt then starts (polling, a busy machine) is not what this test is about.
    retried = _retried(process, "retried")
    assert [(line["dequeue_count"], line["visible_in"]) for line in retried] == [(1, 0), (2, 0)], retried


async def _true(value: bool) -> bool:
    return value

"""A writer paused while it holds a table's writer lock, in a real worker process: it loses its message, and when it
runs again it publishes nothing; the writer that got the message meanwhile fails its attempts while the lock is held
(a bounded wait), then publishes.

The paused writer runs its Spark on the Spark tests' Connect server, the other one on this process's local session:
two writers on two kinds of Spark, and no JVM of its own to start for the worker process (a local one took 15 s)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from functions import tables
from tests.apps.fenced_writer import app
from tests.host.processes import WorkerProcess
from tests.spark.sessions import SparkSessions, master_and_conf, process_env
from tests.support import apoll
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.runtime.host import Host
from worker.settings.config import HostConfig

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(300)]

#: The paused writer's lease: short, so that it is lost soon after the pause.
PAUSED_LEASE = "00:00:02"


def host_yaml(folder: Path, master: str) -> Path:
    """The paused writer's settings: a short lease, many attempts, Spark on ``master``."""
    settings = {
        "version": "1.0",
        "extensions": {"queues": {"maxPollingInterval": "200ms", "maxDequeueCount": 20}},
        "worker": {"drainTimeout": "5s"},
        "functions": {"write": {"leaseDuration": PAUSED_LEASE}},
        "spark": {"master": master, "conf": {"spark.sql.shuffle.partitions": "1"}},
    }
    path = folder / "host.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


async def test_a_writer_paused_under_the_lock_past_its_lease_publishes_nothing_and_the_next_writer_does(
    tmp_path: Path, spark_sessions: SparkSessions, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "table"
    queues = open_backend(None, tmp_path)
    await queues.create_queue("writes")
    await queues.put("writes", encode(json.dumps({"write": 1}), "base64"))
    connect, _ = master_and_conf("connect", request)
    paused = WorkerProcess(
        host_yaml(tmp_path, connect),
        process_env(FENCED_FOLDER=str(tmp_path)),
        name="paused",
        app="tests.apps.fenced_writer:app",
    ).start()
    monkeypatch.setenv("FENCED_FOLDER", str(tmp_path))
    monkeypatch.setenv("PIPELINE_LOCK_WAIT", "1s")
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    config = HostConfig(
        base_dir=tmp_path, max_polling_interval=0.2, max_dequeue_count=20, lease_duration=30, drain_timeout=5
    )
    other = Host(app, config, middleware=[spark_sessions.middleware(*master_and_conf("local", request))])
    running = None
    try:
        await apoll(lambda: _true((tmp_path / "building-1").exists()), 180, what="the first writer to hold the lock")
        os.kill(paused.host_pid, signal.SIGSTOP)
        try:
            running = asyncio.create_task(other.run())
            # Its lease runs out; the other worker takes the message and waits for the lock, in vain, and again.
            await apoll(lambda: _true(other.metrics.get("failed") >= 1), 60, what="a writer to give up on the lock")
            assert tables.current(table) is None
            assert [file.name for file in tmp_path.glob("building-*")] == ["building-1"], "computed without the lock"
            (tmp_path / "go").touch()
        finally:
            os.kill(paused.host_pid, signal.SIGCONT)
        # The message's holder now publishes: the other worker, or the paused one if it received the message anew
        # (visible again after each failed wait) in an invocation of its own.
        await apoll(lambda: _true(tables.current(table) is not None), 120, what="the message's holder to publish")
        stale = await asyncio.to_thread(paused.wait_for_log, "handler failed", 60)
        assert "StaleWriter: lease lost" in stale["error"], stale
    finally:
        if running is not None:
            other.request_stop()
            await asyncio.wait_for(running, 60)
        paused.stop()
        await queues.close()

    [version] = table.glob("v-*")  # the paused writer's version was discarded, never published then retired
    assert tables.current(table) == version
    session = spark_sessions.provider(*master_and_conf("local", request)).session()
    [row] = tables.read(session, table).collect()
    assert row["attempt"] > 1, "the version published is the paused writer's"
    assert (tmp_path / f"building-{row['attempt']}").exists()


async def _true(value: bool) -> bool:
    return value

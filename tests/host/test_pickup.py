"""Picking messages up at once: long polls on the embedded queue, this host's own writes, and room for everyone."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.host.processes import REPO, WorkerProcess, write_host_yaml
from tests.support import apoll, running
from worker import Out, QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend
from worker.bindings.encoding import encode
from worker.runtime.host import Host
from worker.settings.config import HostConfig

QUEUE = "pickup"


@pytest.fixture
def config(tmp_path: Path, connection: str | None) -> HostConfig:
    return HostConfig(base_dir=tmp_path, max_polling_interval=60, drain_timeout=1,
                      connections={"AzureWebJobsStorage": connection} if connection else {})


@pytest.mark.subprocess
@pytest.mark.parametrize("backend_kind", ["sqlite", "oci"])
async def test_an_idle_worker_long_polls_and_takes_a_message_sent_by_another_process_at_once(
    config: HostConfig, queue: QueueBackend, receive_times: list[float], tmp_path: Path, connection: str | None
) -> None:
    """After one empty receive, one receive waits the whole long poll (no polling meanwhile); another process's put
    ends it within moments. On the embedded queue the wait is this host's; on OCI Queue one GetMessages request
    waits on the service."""
    receives = receive_times
    handled: list[float] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def take(msg: QueueMessage) -> None:
        handled.append(time.monotonic())

    host = Host(app, config)
    task = asyncio.create_task(host.run())
    try:
        await apoll(lambda: _true(len(receives) >= 2), 10, what="the first receive and the long poll")
        await asyncio.sleep(3)  # idle: with polling there would be several receives by now, backing off
        assert len(receives) == 2, receives
        env = {"PYTHONPATH": str(REPO), "AzureWebJobsStorage": connection or ""}
        config_file = tmp_path / "host.yaml"
        config_file.write_text("version: '1.0'\n", encoding="utf-8")
        sent = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "worker", "send", QUEUE, "from another process",
                             "--config", str(config_file)], env=env, cwd=REPO, capture_output=True, text=True)
        sent_at = time.monotonic()
        assert sent.returncode == 0, sent.stderr
        await apoll(lambda: _true(bool(handled)), 10, what="the message to be handled")
        # A long poll ends within moments of another process's write (bench/pickup.py measures how soon);
        # a backed-off poll could wait a minute.
        assert handled[0] - sent_at < 1.0, handled[0] - sent_at
        assert len(receives) <= 4, receives
    finally:
        host.request_stop()
        stopping = time.monotonic()
        await asyncio.wait_for(task, 10)
    assert time.monotonic() - stopping < 2  # the waiting receive is cancelled at once, not waited out


@pytest.mark.subprocess
@pytest.mark.parametrize("backend_kind", ["sqlite", "oci"])
async def test_sigterm_ends_an_idle_workers_long_poll_at_once(
    tmp_path: Path, queue: QueueBackend, connection: str | None
) -> None:
    """A waiting receive is cancelled, not waited out: the worker exits 0 well inside the 20 s poll."""
    env = {"RECORD_DB": str(tmp_path / "attempts.sqlite3"), "TRIGGER_QUEUE": QUEUE}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    worker = WorkerProcess(write_host_yaml(tmp_path), env).start()
    try:
        worker.wait_for_log("host started")
        await asyncio.sleep(2)  # past the first receive: the long poll is waiting now
        worker.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert worker.wait(30) == 0
        assert time.monotonic() - signalled < 5, "the long poll was waited out"
    finally:
        worker.kill()


async def test_a_queue_output_to_a_queue_this_host_listens_on_wakes_that_listener(
    config: HostConfig, queue: QueueBackend
) -> None:
    """As Functions' QueueListener.Notify: the next function gets the message now, not at its next poll (up to 60 s)."""
    times: dict[str, float] = {}
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name="pickup-next")
    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def first(msg: QueueMessage, out: Out[str]) -> None:
        times["first"] = time.monotonic()
        out.set("hand over")

    @app.queue_trigger(arg_name="msg", queue_name="pickup-next")
    async def second(msg: QueueMessage) -> None:
        times["second"] = time.monotonic()

    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("received") == 0), 5, what="the host")
        await asyncio.sleep(7)  # second's listener backs off: 0.1 + 0.2 + ... s, now in a sleep of about 6 s
        await queue.put(QUEUE, encode("go", "base64"))
        await apoll(lambda: _true("second" in times), 30, what="the second function")
    assert times["second"] - times["first"] < 2.0, times


async def test_a_long_poll_holding_the_room_gives_it_back_to_a_function_that_has_messages(
    config: HostConfig, queue: QueueBackend
) -> None:
    """maxInFlight equal to one batch: the idle function's waiting receive must not starve the busy one."""
    app = WorkerApp()
    done: list[str] = []

    @app.queue_trigger(arg_name="msg", queue_name="pickup-idle")
    async def idle(msg: QueueMessage) -> None: ...

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def busy(msg: QueueMessage) -> None:
        done.append(msg.get_body().decode())

    for index in range(12):
        await queue.put(QUEUE, encode(f"m{index}", "base64"))
    tight = replace(config, batch_size=4, new_batch_threshold=0, max_in_flight=4)
    async with running(app, tight):
        await apoll(lambda: _true(len(done) == 12), 30, what="every message of the busy function")


async def _true(value: bool) -> bool:
    return value

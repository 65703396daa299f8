"""Picking messages up at once: long polls on the embedded queue, this host's own writes, and room for everyone."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import oci_connection
from tests.host.conftest import DELIVERY_LIMIT
from tests.host.processes import REPO, WorkerProcess, write_host_yaml
from tests.moto import CREDENTIALS
from tests.support import apoll, running
from worker import Out, QueueMessage, WorkerApp
from worker.backends.oci.connection import OCI_LIMITS, RELEASE_WAIT
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.backends.sqs.connection import MAX_LONG_POLL as SQS_LONG_POLL
from worker.backends.sqs.connection import RELEASE_MARGIN as SQS_RELEASE_MARGIN
from worker.backends.sqs.connection import SQS_LIMITS
from worker.bindings.encoding import encode
from worker.runtime.host import Host
from worker.runtime.signals import REPEAT_WINDOW
from worker.settings.config import HostConfig

if TYPE_CHECKING:
    from tests.moto import Moto
    from tests.oci.fixture import OciTestServer

QUEUE = "pickup"
#: The service's long poll, which these tests are about (the suite's OCI connections use a shorter one).
DEFAULT_LONG_POLL = int(OCI_LIMITS.long_poll)
#: Each remote backend's long poll at its service's default, and the longest a stopping worker waits for a poll
#: under way to end (its backend's ``close``: the poll's whole wait and a margin to release what it brought).
LONG_POLLS = {"oci": DEFAULT_LONG_POLL, "sqs": SQS_LONG_POLL}
STOP_WAITS = {"oci": RELEASE_WAIT, "sqs": SQS_LONG_POLL + SQS_RELEASE_MARGIN}
#: The queue of the second-signal test: not one the ``queue`` fixture clears, which it does not use.
QUEUE_SECOND_SIGNAL = "pickup-second-signal"


@pytest.fixture
def connection(backend_kind: str, request: pytest.FixtureRequest) -> str | None:
    """As the suite's, but with the service's default long poll of 20 s (OCI Queue's, SQS's): these tests are about
    that wait."""
    if backend_kind == "oci":
        return oci_connection(request.getfixturevalue("oci_server"), long_poll=DEFAULT_LONG_POLL)
    if backend_kind == "sqs":
        moto: Moto = request.getfixturevalue("moto_server")
        return moto.connection(long_poll=SQS_LONG_POLL)
    return None


@pytest.fixture
def config(tmp_path: Path, connection: str | None, backend_kind: str) -> HostConfig:
    """A host built in code, which does not check ``batchSize`` against the backend as ``worker run`` does: on SQS
    it is SQS's 10, or every receive of 16 would fail before it reached the service."""
    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=60,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": connection} if connection else {},
    )
    return replace(config, batch_size=SQS_LIMITS.max_batch) if backend_kind == "sqs" else config


@pytest.mark.subprocess
@pytest.mark.parametrize("backend_kind", ["sqlite", "oci", "sqs"])
async def test_an_idle_worker_long_polls_and_takes_a_message_sent_by_another_process_at_once(
    config: HostConfig,
    queue: QueueBackend,
    receive_times: list[float],
    tmp_path: Path,
    connection: str | None,
    backend_kind: str,
) -> None:
    """After one empty receive, one receive waits the whole long poll (no polling meanwhile); another process's put
    ends it within moments. On the embedded queue the wait is this host's; on OCI Queue one GetMessages request
    waits on the service, and on SQS one ReceiveMessage with WaitTimeSeconds 20."""
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
        if backend_kind == "sqs":  # the provider chain's environment variables, which moto's fixture set here
            env.update({name: os.environ[name] for name in CREDENTIALS})
        config_file = tmp_path / "host.yaml"
        config_file.write_text("version: '1.0'\n", encoding="utf-8")
        sent = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "worker", "send", QUEUE, "from another process", "--config", str(config_file)],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        sent_at = time.monotonic()
        assert sent.returncode == 0, sent.stderr
        await apoll(lambda: _true(bool(handled)), 10, what="the message to be handled")
        # A long poll ends within moments of another process's write (bench/pickup.py measures how soon);
        # a backed-off poll could wait a minute.
        assert handled[0] - sent_at < 1.0, handled[0] - sent_at
        # Besides the message's own receives, one more for each long poll that ran its whole wait before the put.
        waited_out = 0 if connection is None else int((sent_at - receives[1]) // LONG_POLLS[backend_kind])
        assert len(receives) <= 4 + waited_out, receives
    finally:
        host.request_stop()
        stopping = time.monotonic()
        await asyncio.wait_for(task, 10 + STOP_WAITS.get(backend_kind, 0))
    # The embedded queue's receive is cancelled at once (it gives back what it took); OCI Queue's and SQS's are left
    # to end.
    assert time.monotonic() - stopping < (2 if connection is None else STOP_WAITS[backend_kind] + 2)


@pytest.mark.subprocess
@pytest.mark.parametrize("backend_kind", ["sqlite", "oci"])
async def test_sigterm_ends_an_idle_worker_at_once_or_when_its_long_poll_ends(
    tmp_path: Path, queue: QueueBackend, connection: str | None
) -> None:
    """The embedded queue's waiting receive is cancelled: the worker exits 0 well inside the 20 s poll. OCI Queue's
    may be answered after its client has gone, so the worker waits for its end (20 s at most) and exits 0; a
    message arriving meanwhile ends it at once and is released, visible again for the next worker."""
    env = {"RECORD_DB": str(tmp_path / "attempts.sqlite3"), "TRIGGER_QUEUE": QUEUE}
    if connection is not None:
        env["AzureWebJobsStorage"] = connection
    worker = WorkerProcess(write_host_yaml(tmp_path), env).start()
    try:
        worker.wait_for_log("host started")
        await asyncio.sleep(2)  # past the first receive: the long poll is waiting now
        worker.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        if connection is None:
            assert worker.wait(30) == 0
            assert time.monotonic() - signalled < 5, "the long poll was waited out"
            return
        worker.wait_for_log("waiting for cancelled receives to end, to release what they bring")
        sent = await queue.put(QUEUE, encode("during the stop", "base64"))
        assert worker.wait(RELEASE_WAIT + 5) == 0
        assert time.monotonic() - signalled < 5, "the poll that took the message was not released at once"
        [again] = await apoll(lambda: queue.receive(QUEUE, 1, 30), 5, what="the released message")
        assert (again.id, again.dequeue_count) == (sent.id, 2)  # one delivery counted for the poll at stop
    finally:
        worker.kill()


@pytest.mark.subprocess
async def test_a_second_sigterm_ends_an_oci_worker_waiting_for_its_long_poll_at_once(
    tmp_path: Path, oci_server: OciTestServer
) -> None:
    """While the worker waits for its cancelled poll (it would release what it brings), a second signal exits at
    once, leaving that poll to the service (a message it takes waits out its lease, as after kill -9)."""
    backend = open_backend(oci_connection(oci_server), tmp_path)
    await backend.create_queue(QUEUE_SECOND_SIGNAL)
    env = {
        "RECORD_DB": str(tmp_path / "attempts.sqlite3"),
        "TRIGGER_QUEUE": QUEUE_SECOND_SIGNAL,
        "AzureWebJobsStorage": oci_connection(oci_server, long_poll=DEFAULT_LONG_POLL),
    }
    oci_server.set_delivery_limit(QUEUE_SECOND_SIGNAL, DELIVERY_LIMIT)
    worker = WorkerProcess(write_host_yaml(tmp_path), env).start()
    try:
        worker.wait_for_log("host started")
        await asyncio.sleep(2)  # past the first receive: the long poll is waiting now
        worker.send_signal(signal.SIGTERM)
        worker.wait_for_log("waiting for cancelled receives to end, to release what they bring")
        # The same signal again within REPEAT_WINDOW is one delivery made twice (coreutils' timeout signals the
        # command, then its group); a second signal is one sent after it.
        time.sleep(REPEAT_WINDOW * 2)
        worker.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert worker.wait(RELEASE_WAIT) == 128 + signal.SIGTERM
        assert time.monotonic() - signalled < 5
    finally:
        worker.kill()
        await backend.delete_queue(QUEUE_SECOND_SIGNAL)
        await backend.close()


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


#: Host runs stopped while messages arrive, and messages per queue put during each stop.
STOP_CYCLES = 4
PER_CYCLE = 6


@pytest.mark.parametrize("backend_kind", ["sqlite", "oci"])
async def test_stops_and_room_changes_while_messages_arrive_lose_none_and_dead_letter_none(
    config: HostConfig, queue: QueueBackend, connection: str | None, request: pytest.FixtureRequest
) -> None:
    """maxInFlight 1 and two functions: each time one has messages, the other's long poll gives its place back (a
    room change); and each host is stopped while both long-poll, with messages put as it stops. On OCI Queue the
    test server delivers to polls whose client hung up (its default). Every message is handled exactly once by
    the next host (the last ones are left visible for the next worker), and none reaches a dead-letter or poison
    queue."""
    sparse = f"{QUEUE}-sparse"
    await queue.create_queue(sparse)
    if queue.service_dead_letters:
        request.getfixturevalue("oci_server").set_delivery_limit(sparse, DELIVERY_LIMIT)
    handled: Counter[str] = Counter()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def steady(msg: QueueMessage) -> None:
        await asyncio.sleep(0.05)  # work that holds the one place a while, so the other function has to ask for it
        handled[msg.get_body().decode()] += 1

    @app.queue_trigger(arg_name="msg", queue_name=sparse)
    async def occasional(msg: QueueMessage) -> None:
        handled[msg.get_body().decode()] += 1

    sent: list[str] = []

    async def put_batch(cycle: int) -> None:
        for index in range(PER_CYCLE):
            for name in (QUEUE, sparse):
                sent.append(f"{name}-{cycle}-{index}")
                await queue.put(name, encode(sent[-1], "base64"))

    tight = replace(config, max_in_flight=1, batch_size=1, new_batch_threshold=0, max_polling_interval=1)
    await put_batch(0)
    for cycle in range(1, STOP_CYCLES + 1):
        host = Host(app, tight)
        task = asyncio.create_task(host.run())
        await apoll(lambda: _true(len(handled) == len(sent)), 60, what="the messages sent so far handled")
        await asyncio.sleep(0.5)  # stimulus: both queues empty, so both listeners long-poll when the stop comes
        host.request_stop()
        await put_batch(cycle)  # meets the polls the stop cancels
        await asyncio.wait_for(task, 60)
    last = sent[-2 * PER_CYCLE :]
    assert handled == Counter(sent[: -2 * PER_CYCLE])  # each once
    left: list[str] = []

    async def take_left() -> bool:
        for name in (QUEUE, sparse):
            left.extend(m.content for m in await queue.receive(name, queue.limits.max_batch, 60))
        return len(left) >= len(last)

    await apoll(take_left, 10, what="the messages put during the last stop to be visible")
    assert sorted(left) == sorted(encode(body, "base64") for body in last)
    for name in (QUEUE, sparse):
        if queue.service_dead_letters:
            assert await queue.dead_letter_count(name) == 0
        else:
            assert f"{name}-poison" not in await queue.list_queues()

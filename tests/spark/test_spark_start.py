"""Spark started with the host, before the first message, and a session that died made again for the next one.

Each test watches a session start, or kills one, so each makes its own
(``spark_sessions.private``) rather than disturbing the shared one; the
restarted Connect server is a server of the test's own. How long the first
Spark message takes once ``/readyz`` says ready is measured by
bench/spark_start.py, beside the same message on a host that makes Spark at
the first message.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.cluster import ConnectServer, StandaloneCluster
from tests.spark.sessions import SparkSessions, master_and_conf
from tests.support import apoll, free_port, get
from worker import QueueMessage, WorkerApp, spark
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.middleware.spark import Spark, SparkProvider
from worker.ops import spark_cluster
from worker.runtime.host import Host
from worker.settings.config import HostConfig

QUEUE = "spark-jobs"
PLAIN = "plain-jobs"


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[QueueBackend]:
    backend = open_backend(None, tmp_path)
    for name in (QUEUE, PLAIN):
        await backend.create_queue(name)
    yield backend
    await backend.close()


def summing_app(provider: SparkProvider, seen: dict[str, Any]) -> WorkerApp:
    """A Spark function (``spark=True``) that notes what Spark's readiness was as it began and how many sessions
    were made before and after its job (and, off Connect, the application it ran in), and a function without Spark
    that notes what readiness Spark had when it ran."""
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE, spark=True)
    def total(msg: QueueMessage) -> None:
        began_while, before = provider.problem(), provider.starts
        session = spark.session()
        result = session.range(0, 100, numPartitions=2).selectExpr("sum(id)").collect()[0][0]
        seen.setdefault("runs", []).append(
            {"began_while": began_while, "starts_before": before, "starts_after": provider.starts, "sum": result}
        )
        if not provider.remote:
            seen.setdefault("applications", []).append(session.sparkContext.applicationId)

    @app.queue_trigger(arg_name="msg", queue_name=PLAIN)
    def plain(msg: QueueMessage) -> None:
        seen["plain_ran_while"] = provider.problem()

    return app


async def test_a_handler_the_host_gave_up_on_before_spark_started_gets_no_session_made(
    request: pytest.FixtureRequest, spark_sessions: SparkSessions, tmp_path: Path, queue: QueueBackend
) -> None:
    """No session yet, and the host gave up on the invocation (functionTimeout) before the handler's first Spark
    call: ``spark.session()`` refuses at once rather than start Spark for an attempt that is over, which would take
    longer than a timed-out sync handler's grace and recycle the process."""
    provider = SparkProvider(spark_sessions.settings(*master_and_conf("local", request)))
    seen: dict[str, str] = {}
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=PLAIN)
    def late(msg: QueueMessage) -> None:
        msg.cancelled.wait(60)  # the host has given up before the first Spark call
        try:
            spark.session()
        except Exception as exc:
            seen["error"] = f"{type(exc).__name__}: {exc}"
            raise

    await queue.put(PLAIN, encode("late", "base64"))
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.2, function_timeout=1, max_dequeue_count=1)
    host = Host(app, config, middleware=[Spark(provider, owned=True)])
    task = asyncio.create_task(host.run())
    try:
        await apoll(lambda: _true(host.metrics.get("failed") == 1), 30, what="the handler to time out")
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 60)
    assert seen["error"] == "SparkUnavailable: the host gave up on the invocation before Spark was started"
    assert provider.starts == 0
    assert host.recycled is None


async def readiness(port: int) -> tuple[int, list[str]]:
    status, body = await asyncio.to_thread(get, port, "/readyz")
    return status, json.loads(body)["problems"]


@pytest.mark.parametrize("where", ["local", "cluster", "connect"])
async def test_spark_is_ready_before_the_first_message(
    where: str, request: pytest.FixtureRequest, spark_sessions: SparkSessions, tmp_path: Path, queue: QueueBackend
) -> None:
    """/readyz says "Spark starting" while work without Spark goes on; once it is ready, the first Spark handler finds
    the session made (it neither makes one nor waits)."""
    master, conf = master_and_conf(where, request)
    seen: dict[str, Any] = {}
    port = free_port()
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=5, http_port=port)
    await queue.put(PLAIN, encode("no Spark here", "base64"))
    with spark_sessions.private(master, conf) as provider:
        # The start waits until the test has seen it under way: a session on a warm Connect server was made in 0.2 s,
        # before /readyz first answered, once on a loaded machine.
        started = threading.Event()
        make = provider._make

        def make_when_seen(*args: Any, **kwargs: Any) -> Any:
            started.wait(60)
            return make(*args, **kwargs)

        provider._make = make_when_seen  # type: ignore[method-assign]
        host = Host(summing_app(provider, seen), config, middleware=[Spark(provider)])
        task = asyncio.create_task(host.run())
        try:
            starting = await apoll(lambda: _answered(port), 30, what="/readyz to answer")
            assert starting == (503, ["Spark starting"])
            await apoll(lambda: _true(host.metrics.get("succeeded", "plain") == 1), 30, what="the message without Spark")
            assert seen["plain_ran_while"] == "Spark starting"  # it did not wait for Spark
            started.set()
            await apoll(lambda: _ready(port), 180, what="/readyz to say ready")

            await queue.put(QUEUE, encode("sum", "base64"))
            await apoll(lambda: _true(host.metrics.get("succeeded", "total") == 1), 60, what="the Spark message")
        finally:
            host.request_stop()
            await asyncio.wait_for(task, 120)
    assert seen["runs"] == [{"began_while": None, "starts_before": 1, "starts_after": 1, "sum": 4950}]


@pytest.mark.parametrize("where", ["local", "cluster", "connect"])
async def test_a_session_that_died_is_made_again_for_the_next_invocation(
    where: str, request: pytest.FixtureRequest, spark_sessions: SparkSessions, tmp_path: Path, queue: QueueBackend
) -> None:
    """Local: Spark's JVM is killed from outside. Cluster: the master removes the application (its web UI's kill),
    which stops the driver's SparkContext. Connect: the server is stopped and another started on its port. Each time
    the next message's handler gets a new session and succeeds, at its first attempt."""
    server = ConnectServer(tmp_path / "connect").start() if where == "connect" else None
    master, conf = master_and_conf(where, request) if server is None else (server.url, {"spark.sql.shuffle.partitions": "2"})
    seen: dict[str, Any] = {}
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=5, max_dequeue_count=1)
    try:
        with spark_sessions.private(master, conf) as provider:
            host = Host(summing_app(provider, seen), config, middleware=[Spark(provider)])
            task = asyncio.create_task(host.run())
            try:
                await queue.put(QUEUE, encode("first", "base64"))
                await apoll(lambda: _true(host.metrics.get("succeeded", "total") == 1), 180, what="the first message")

                if where == "local":
                    await asyncio.to_thread(_kill_jvm)
                elif where == "cluster":
                    cluster: StandaloneCluster = request.getfixturevalue("spark_cluster")
                    await asyncio.to_thread(cluster.kill_application, seen["applications"][0])
                    await apoll(lambda: _true(_context_stopped()), 60, what="the master to stop the SparkContext")
                else:
                    assert server is not None
                    server.stop()
                    # The stopped server's connections to this process close as the client notices; until then
                    # the port may still be taken (seen in a full run), as it would be for an operator's restart.
                    await apoll(lambda: _true(_port_free(server.port)), 90, what="the stopped server's port")
                    server = ConnectServer(tmp_path / "connect-again", port=server.port).start()

                await queue.put(QUEUE, encode("second", "base64"))
                await apoll(
                    lambda: _true(host.metrics.get("succeeded", "total") + host.metrics.get("failed") >= 2),
                    180,
                    what="the second message to be done",
                )
            finally:
                host.request_stop()
                await asyncio.wait_for(task, 120)
    finally:
        if server is not None:
            server.stop()
    assert host.metrics.get("failed") == 0, seen
    assert [run["starts_after"] for run in seen["runs"]] == [1, 2]
    assert [run["sum"] for run in seen["runs"]] == [4950, 4950]
    if where == "cluster":  # a new application, not the killed one brought back
        assert len(set(seen["applications"])) == 2, seen["applications"]


async def test_a_connect_server_that_answers_nothing_fails_the_start_within_its_deadline(
    spark_sessions: SparkSessions, tmp_path: Path, queue: QueueBackend
) -> None:
    """A Connect server paused (SIGSTOP: it accepts connections and answers nothing) as the host starts: once
    startTimeout has passed, /readyz says why Spark did not start and the start thread has ended, and the Spark
    message waiting since before the start is still in the queue, never received. Once the server answers again,
    the host's next try makes the session, and only then is the message received, and handled at its first attempt.
    With the server gone, the host stops at once: it tries once to release the session there and goes on, rather
    than following the client's retries for minutes."""
    server = ConnectServer(tmp_path / "connect").start()
    conf = {"spark.sql.shuffle.partitions": "2"}
    port = free_port()
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=5, http_port=port)
    seen: dict[str, Any] = {}
    try:
        with spark_sessions.private(server.url, conf, start_timeout=4, check_timeout=2) as provider:
            host = Host(summing_app(provider, seen), config, middleware=[Spark(provider, owned=True)])
            await queue.put(QUEUE, encode("sum", "base64"))
            with server.paused():
                task = asyncio.create_task(host.run())
                try:
                    status, problems = await apoll(lambda: _failed_to_start(port), 60, what="the start to fail")
                    assert (status, problems) == (
                        503,
                        ["Spark did not start: Spark did not answer in 4 s (making the session and its warm-up job)"],
                    )
                    await apoll(lambda: _true(not _threads("spark-start")), 10, what="the start thread to end")
                    assert host.metrics.get("received", "total") == 0
                    assert await queue.approximate_count(QUEUE) == 1
                except BaseException:
                    host.request_stop()
                    raise
            try:
                await apoll(lambda: _true(host.metrics.get("succeeded", "total") == 1), 120, what="the Spark message")
                assert host.metrics.get("received", "total") == 1
                assert await readiness(port) == (200, [])
            finally:
                server.stop()
                host.request_stop()
                await asyncio.wait_for(task, 30)
    finally:
        server.stop()
    assert seen["runs"] == [{"began_while": None, "starts_before": 1, "starts_after": 1, "sum": 4950}]
    assert not _threads("spark-start")


def _threads(name: str) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == name and thread.is_alive()]


async def _failed_to_start(port: int) -> tuple[int, list[str]] | None:
    answer = await _answered(port)
    return answer if answer is not None and answer[1] and answer[1][0].startswith("Spark did not start") else None


def _kill_jvm() -> None:
    """SIGKILL the in-process session's JVM, as the kernel's OOM killer would, and wait until it is gone."""
    from pyspark import SparkContext

    process = SparkContext._gateway.proc
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)


def _context_stopped() -> bool:
    """Whether the driver's SparkContext has stopped (the JVM side, where the master's word arrives)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    return context is None or context._jsc is None or context._jsc.sc().isStopped()


async def _answered(port: int) -> tuple[int, list[str]] | None:
    try:
        return await readiness(port)
    except OSError:  # not listening yet
        return None


async def _ready(port: int) -> bool:
    status, problems = await readiness(port)
    assert problems in ([], ["Spark starting"]), problems
    return status == 200


def _port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now, as ``worker spark`` checks before it starts one."""
    try:
        spark_cluster.claim_port("127.0.0.1", port)
    except spark_cluster.SparkServerError:
        return False
    return True


async def _true(value: bool) -> bool:
    return value

"""Spark jobs bound to message leases, on local Spark, a standalone cluster and Spark Connect: cancelled when the host
gives up."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.host.processes import REPO, write_host_yaml
from tests.spark.cluster import ConnectServer
from tests.spark.sessions import SparkSessions, master_and_conf, process_env
from tests.support import apoll, poll
from worker import QueueMessage, WorkerApp, spark
from worker.backends.queues import PopReceiptMismatch, QueueBackend
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.middleware.connect_jobs import ConnectWebUi, cancel_left_jobs, session_tag_suffix
from worker.middleware.spark import Spark
from worker.runtime.host import Host
from worker.settings.config import HostConfig

QUEUE = "spark-jobs"
OTHER = "plain-jobs"
#: A job that runs for minutes on two cores unless cancelled.
ENDLESS = "sum(id % 7)"


@pytest.fixture(scope="module", params=["local", "cluster", "connect"])
def where(request: pytest.FixtureRequest) -> str:
    """Module-scoped, so pytest runs every test on one master before the next: one session each, not one per test."""
    return request.param


@pytest.fixture
def config(tmp_path: Path) -> HostConfig:
    return HostConfig(base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=1)


@pytest.fixture
def shared_spark(where: str, request: pytest.FixtureRequest, spark_sessions: SparkSessions) -> Spark:
    """The test process's session on ``where``'s master, handed to the host so it is not started per test."""
    return spark_sessions.middleware(*master_and_conf(where, request))


def _sleepy(x: int) -> int:
    """Runs on Spark's Python workers (imported from this module there), far longer than any test waits."""
    import time

    time.sleep(600)
    return x


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[QueueBackend]:
    backend = open_backend(None, tmp_path)
    await backend.create_queue(QUEUE)
    yield backend
    await backend.close()


def endless_job_app(seen: dict[str, Any], started: threading.Event) -> WorkerApp:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    def crunch(msg: QueueMessage) -> None:
        session = spark.session()
        seen["msg"] = msg
        started.set()
        run_recorded(seen, lambda: session.range(0, 10**13, numPartitions=2).selectExpr(ENDLESS).collect())

    return app


def run_recorded(seen: dict[str, Any], job: Callable[[], object]) -> None:
    """Run a handler's Spark job, noting in ``seen`` how it ended: "error" (then raised again) or "finished"."""
    try:
        job()
    except Exception as exc:
        seen["error"] = f"{type(exc).__name__}: {exc}"
        raise
    seen["finished"] = True


async def test_lost_lease_cancels_the_spark_job(config: HostConfig, queue: QueueBackend, shared_spark: Spark) -> None:
    seen: dict[str, Any] = {}
    started = threading.Event()
    await queue.put(QUEUE, encode("crunch", "base64"))
    host = Host(endless_job_app(seen, started), replace(config, lease_duration=2), middleware=[shared_spark])
    task = asyncio.create_task(host.run())
    try:
        await apoll(lambda: _true(started.is_set()), 120, what="the Spark job to start")
        msg = seen["msg"]
        thief = await _steal(queue, msg)
        await apoll(lambda: _true("error" in seen), 60, what="the Spark job to be cancelled")
        assert "cancel" in seen["error"].lower(), seen["error"]
        assert "finished" not in seen
        await apoll(lambda: _true(host.metrics.get("completions_skipped") == 1), 20, what="the skipped completion")
        await queue.delete(QUEUE, msg.id, thief)  # the message is the thief's, untouched by the host
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 120)


async def test_shutdown_past_drain_timeout_cancels_the_spark_job_and_releases_the_message(
    config: HostConfig, queue: QueueBackend, shared_spark: Spark
) -> None:
    seen: dict[str, Any] = {}
    started = threading.Event()
    [message_id] = [(await queue.put(QUEUE, encode("crunch", "base64"))).id]
    host = Host(endless_job_app(seen, started), config, middleware=[shared_spark])
    task = asyncio.create_task(host.run())
    await apoll(lambda: _true(started.is_set()), 120, what="the Spark job to start")

    host.request_stop()
    await asyncio.wait_for(task, 120)

    assert "cancel" in seen.get("error", "").lower(), seen
    [back] = await queue.peek(QUEUE, 32)
    assert (back.id, back.dequeue_count) == (message_id, 1)
    assert host.metrics.get("released") == 1


async def test_a_python_job_past_function_timeout_is_cancelled_and_the_message_handled_by_the_usual_rules(
    config: HostConfig, queue: QueueBackend, shared_spark: Spark
) -> None:
    seen: dict[str, Any] = {}
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    def slow(msg: QueueMessage) -> None:
        from pyspark.sql import functions as F

        def job() -> object:  # a Python UDF: the same job on local, on the cluster and on Connect (no RDDs there)
            session = spark.session()  # first: the session decides whether F.udf makes a Connect UDF
            return session.range(0, 2, numPartitions=2).select(F.udf(_sleepy, "long")("id")).collect()

        run_recorded(seen, job)

    await queue.put(QUEUE, encode("slow", "base64"))
    host = Host(app, replace(config, function_timeout=8, max_dequeue_count=1), middleware=[shared_spark])
    task = asyncio.create_task(host.run())
    try:
        await apoll(lambda: _true(host.metrics.get("poisoned") == 1), 120, what="the timed-out message in poison")
        await apoll(lambda: _true("error" in seen), 60, what="Spark to report the job cancelled")
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 120)
    assert "cancel" in seen["error"].lower(), seen["error"]
    assert "finished" not in seen
    assert host.metrics.get("failed") == 1


async def test_a_job_first_submitted_after_the_host_gave_up_is_cancelled(
    config: HostConfig, queue: QueueBackend, shared_spark: Spark
) -> None:
    """The timeout comes before the handler's first Spark call: its job is cancelled all the same, not left to run
    for its minutes; the handler then returns within the grace a timed-out sync handler has, so its attempt fails as
    usual and the process is not recycled.

    The function says it runs Spark (``spark=True``), so the session is made with the host before the message is
    received, whichever test ran before: a handler that had to make it after the give-up would spend seconds of
    start (a JVM, an application, a Connect session) in a grace of 2 s, and rightly recycle its process.
    """
    seen: dict[str, Any] = {}
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE, spark=True)
    def late(msg: QueueMessage) -> None:
        msg.cancelled.wait(60)  # the host has given up on it before its first job
        run_recorded(seen, lambda: spark.session().range(0, 10**13, numPartitions=2).selectExpr(ENDLESS).collect())

    await queue.put(QUEUE, encode("late", "base64"))
    host = Host(app, replace(config, function_timeout=1, max_dequeue_count=1), middleware=[shared_spark])
    task = asyncio.create_task(host.run())
    try:
        await apoll(lambda: _true(shared_spark.provider.ready()), 120, what="Spark to start with the host")
        await apoll(lambda: _true(host.metrics.get("failed") == 1), 30, what="the handler to time out")
        await apoll(lambda: _true("error" in seen), 60, what="the job started after the timeout to be cancelled")
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 120)
    assert "cancel" in seen["error"].lower(), seen["error"]
    assert "finished" not in seen
    assert host.recycled is None


async def test_jobs_submitted_after_the_lease_is_lost_are_cancelled_too(
    config: HostConfig, queue: QueueBackend, shared_spark: Spark
) -> None:
    """A handler that catches each cancellation and starts another job: the host keeps cancelling until it returns."""
    seen: dict[str, Any] = {"jobs": []}
    started = threading.Event()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    def stubborn(msg: QueueMessage) -> None:
        session = spark.session()
        seen["msg"] = msg
        started.set()
        for _ in range(3):
            began = time.monotonic()
            try:
                session.range(0, 10**13, numPartitions=2).selectExpr(ENDLESS).collect()
            except Exception as exc:
                seen["jobs"].append((time.monotonic() - began, f"{type(exc).__name__}: {exc}"))
        seen["returned"] = True

    await queue.put(QUEUE, encode("stubborn", "base64"))
    host = Host(app, replace(config, lease_duration=2), middleware=[shared_spark])
    task = asyncio.create_task(host.run())
    try:
        await apoll(lambda: _true(started.is_set()), 120, what="the Spark job to start")
        thief = await _steal(queue, seen["msg"])
        await apoll(lambda: _true("returned" in seen), 120, what="the handler to return after three cancelled jobs")
        await apoll(lambda: _true(host.metrics.get("completions_skipped") == 1), 20, what="the skipped completion")
        await queue.delete(QUEUE, seen["msg"].id, thief)
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 120)
    assert len(seen["jobs"]) == 3, seen
    assert all("cancel" in error.lower() for _, error in seen["jobs"]), seen
    # Every job after the first was started after the interrupt; it is cancelled on the next repeat (every
    # CANCEL_REPEAT_SECONDS), not left to run its minutes. The bound leaves room for a loaded machine.
    assert all(took < 10 for took, _ in seen["jobs"][1:]), seen["jobs"]


@pytest.fixture
def paused_server(tmp_path: Path) -> Iterator[ConnectServer]:
    """A Connect server of the test's own, stopped with the test, never the group's.

    A server paused as a query starts takes the interrupt, once resumed, while
    adaptive execution is submitting the query's first shuffle stage from a
    thread of its own: the operation's cancel runs first, the operation ends
    cancelled, and the job submitted a moment later belongs to no operation any
    interrupt can reach (:mod:`worker.middleware.connect_jobs`); this one would
    run for hours on both of the server's cores. The host, given the server's
    web UI, cancels it there.
    """
    server = ConnectServer(tmp_path / "connect").start()
    yield server
    server.stop()


async def test_a_connect_server_that_does_not_answer_does_not_hold_up_other_leases(
    paused_server: ConnectServer, spark_sessions: SparkSessions, tmp_path: Path, queue: QueueBackend
) -> None:
    """With the Connect server stopped (SIGSTOP), the interrupt of a lost lease hangs: other leases are renewed still."""
    seen: dict[str, Any] = {}
    started, waiting, let_go = threading.Event(), threading.Event(), threading.Event()
    app = endless_job_app(seen, started)

    @app.queue_trigger(arg_name="msg", queue_name=OTHER)
    def patient(msg: QueueMessage) -> None:
        waiting.set()
        let_go.wait(120)

    await queue.create_queue(OTHER)
    await queue.put(QUEUE, encode("crunch", "base64"))
    await queue.put(OTHER, encode("wait", "base64"))
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=5, lease_duration=2)
    conf = {"spark.sql.shuffle.partitions": "2"}
    with spark_sessions.private(paused_server.url, conf, web_ui=paused_server.web_ui) as provider:
        host = Host(app, config, middleware=[Spark(provider)])
        task = asyncio.create_task(host.run())
        try:
            await apoll(lambda: _true(started.is_set() and waiting.is_set()), 120, what="both handlers to start")
            with paused_server.paused():
                # The host finds its lease lost and interrupts the tag: a call that hangs.
                await _steal(queue, seen["msg"])
                await apoll(lambda: _true(host.metrics.get("leases_lost", "crunch") == 1), 20, what="the lost lease")
                renewed = host.metrics.get("lease_renewals", "patient")
                await apoll(
                    lambda: _true(host.metrics.get("lease_renewals", "patient") >= renewed + 4),
                    30,
                    what="four more renewals of the other message while the server is stopped",
                )
                assert host.metrics.get("leases_lost", "patient") == 0
            await apoll(lambda: _true("error" in seen), 60, what="the Spark job to be cancelled once the server answers")
            assert "cancel" in seen["error"].lower(), seen["error"]
            # A job the interrupt could not reach is found on the server and cancelled within a second of showing
            # (the host watches ten seconds after the handler returned): the bound leaves room for a loaded machine.
            await apoll(lambda: _true(paused_server.idle()), 30, what="no job of the interrupted query left on the server")
            let_go.set()
            await apoll(lambda: _true(host.metrics.get("succeeded", "patient") == 1), 20, what="the other message done")
        finally:
            let_go.set()
            host.request_stop()
            await asyncio.wait_for(task, 120)


async def _steal(queue: QueueBackend, msg: QueueMessage) -> str:
    """Take a message's lease from under the host, as a second receiver would after a lapse; returns the receipt."""

    async def steal() -> str | None:
        try:
            return (await queue.update(QUEUE, msg.id, msg.pop_receipt or "", 600)).pop_receipt
        except PopReceiptMismatch:
            return None

    return await apoll(steal, 10, what="the message to be stolen")


def test_spark_log_stays_out_of_the_worker_log(tmp_path: Path) -> None:
    """A real worker process: every line on its stderr is the worker's JSON; the JVM's output is in .worker/spark.log."""
    config = write_host_yaml(tmp_path, worker={"drainTimeout": "5s"})
    config.write_text(config.read_text() + "spark:\n  master: local[1]\n  conf:\n    spark.ui.enabled: false\n")
    env = process_env(PYTHONPATH=str(REPO), RESULT_FILE=str(tmp_path / "result"))
    worker = [sys.executable, "-m", "worker"]
    send = subprocess.run([*worker, "send", "spark-count", "1000", "--config", str(config)], env=env, cwd=REPO)
    assert send.returncode == 0
    run = subprocess.run(
        [*worker, "run", "--app", "tests.apps.spark_count:app", "--config", str(config), "--burst"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "result").read_text() == "1000"
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    not_json = [line for line in lines if not _is_json(line)]
    assert not not_json, f"lines on the worker's stderr that are not its JSON log: {not_json[:5]}"
    assert any(json.loads(line)["event"] == "starting Spark" for line in lines)
    spark_log = tmp_path / ".worker" / "spark.log"
    assert "WARN" in spark_log.read_text()
    assert stat.S_IMODE(spark_log.stat().st_mode) == 0o600  # owner-only, as the queue file beside it


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


async def _true(value: bool) -> bool:
    return value


def test_jobs_an_interrupt_missed_are_found_by_their_tag_and_cancelled_through_the_web_ui(
    spark_connect: ConnectServer, spark_sessions: SparkSessions, request: pytest.FixtureRequest
) -> None:
    """A job carrying a session's tag, running on the server, is found through its web UI and killed there. Here the
    job is a live query's, so that it is there every time; a job an interrupt missed carries the same tag."""
    master, conf = master_and_conf("connect", request)
    session = spark_sessions.provider(master, conf).session()
    tag, seen = "worker-invocation-web-ui", {}

    def query() -> None:
        session.addTag(tag)  # the client's tags are the thread's
        try:
            session.range(0, 10**13, numPartitions=2).selectExpr(ENDLESS).collect()
        except Exception as exc:
            seen["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            session.removeTag(tag)

    thread = threading.Thread(target=query, name="endless-query")
    thread.start()
    try:
        assert spark_connect.web_ui is not None
        ui = ConnectWebUi(spark_connect.web_ui)
        [job] = poll(lambda: ui.running_jobs(session_tag_suffix(session.session_id, tag)), 60, what="the job")
        assert cancel_left_jobs(ui, session.session_id, tag, watch=1) == [job]
    finally:
        if thread.is_alive():
            session.interruptTag(tag)
        thread.join(60)
    assert "cancel" in seen.get("error", "").lower(), seen
    assert spark_connect.running_jobs() == []

"""What fails beside the message path, in a running host on the embedded queue: a raising middleware hook is logged,
counted as its middleware's and gone around; a task of the host's own that fails is reported at once and stops the
host, which ``worker run`` then exits 1 for."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import worker.middleware as middleware_module
import worker.runtime.faults as faults_module
from tests.host.processes import worker_environment
from tests.support import apoll, captured_logs, closed_port, free_port, get, running
from worker import Middleware, QueueMessage, WorkerApp
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.model import Finished, FunctionSpec
from worker.runtime import inflight
from worker.runtime.completion import CompletionProcessor
from worker.runtime.host import Host
from worker.runtime.lease import LeaseScheduler
from worker.runtime.listener import Listener
from worker.settings.config import FunctionOptions, HostConfig

QUEUE = "guarded"


class RaisingLimit(Middleware):
    def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
        raise RuntimeError("limit broke")


class RaisingDelay(Middleware):
    def retry_delay(self, item: Finished, delay: float) -> float:
        raise RuntimeError("delay broke")


def app_with(middleware: Middleware, handled: list[str]) -> WorkerApp:
    app = WorkerApp()
    app.add_middleware(middleware)

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    def handle(msg: QueueMessage) -> None:
        body = msg.get_body().decode()
        handled.append(body)
        if body == "fail" and msg.dequeue_count == 1:
            raise ValueError("first attempt fails")

    return app


async def _put(tmp_path: Path, *bodies: str) -> None:
    queue = open_backend(None, tmp_path)
    await queue.create_queue(QUEUE)
    for body in bodies:
        await queue.put(QUEUE, encode(body, "base64"))
    await queue.close()


async def _true(value: bool) -> bool:
    return value


async def test_a_raising_receive_limit_is_logged_with_its_middleware_and_messages_are_still_handled(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _put(tmp_path, "a", "b", "c")
    handled: list[str] = []
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1)
    with captured_logs(monkeypatch, middleware_module) as logs:
        async with running(app_with(RaisingLimit(), handled), config) as host:
            await apoll(lambda: _true(host.metrics.get("succeeded") == 3), 10, what="three messages handled")
    assert sorted(handled) == ["a", "b", "c"]
    failed = [line for line in logs if line["event"].startswith("middleware hook failed")]
    assert failed[0]["middleware"] == "RaisingLimit" and failed[0]["hook"] == "receive_limit"
    assert "limit broke" in failed[0]["error"] and failed[0]["exc_info"]
    assert len(failed) == 1  # once a minute while it goes on failing, with a count
    assert host.metrics.middleware_failures("RaisingLimit") >= 1
    assert host.metrics.get("storage_errors") == 0


async def test_a_raising_retry_delay_leaves_the_configured_visibility_and_counts_as_the_handlers_failure(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _put(tmp_path, "fail")
    handled: list[str] = []
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1, visibility_timeout=1.0)
    with captured_logs(monkeypatch, middleware_module) as logs:
        async with running(app_with(RaisingDelay(), handled), config) as host:
            started = time.monotonic()
            await apoll(lambda: _true(host.metrics.get("succeeded") == 1), 20, what="the second attempt succeeded")
            took = time.monotonic() - started
    assert handled == ["fail", "fail"]
    assert took < 10  # back after visibilityTimeout (1 s), not after the lease (600 s)
    assert host.metrics.get("failed") == 1 and host.metrics.get("retried") == 1
    assert host.metrics.get("storage_errors") == 0
    assert host.metrics.middleware_failures("RaisingDelay") == 1
    assert [line["middleware"] for line in logs if line["event"].startswith("middleware hook failed")] == ["RaisingDelay"]


def _break(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, when: Callable[..., bool] = lambda *a: True) -> None:
    """Make ``owner.name`` raise once ``when(*args)`` holds: a fault injected into one task of the host's."""
    real = getattr(owner, name)

    if asyncio.iscoroutinefunction(real):

        async def broken(*args: Any, **kwargs: Any) -> Any:
            if when(*args):
                raise RuntimeError(f"injected into {name}")
            return await real(*args, **kwargs)
    else:

        def broken(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            if when(*args):
                raise RuntimeError(f"injected into {name}")
            return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, broken)


#: Each task the host owns, and how to make it fail: the task's name as reported, the method that raises.
OWNED_TASKS = {
    "listener": ("listener-handle", Listener, "_receive"),
    "lease scheduler": ("lease-scheduler", LeaseScheduler, "run"),
    "lease renewer": ("lease-renewer", LeaseScheduler, "_renew_due"),
    "completion": ("invocation-", CompletionProcessor, "complete"),
    "in-flight record": ("in-flight", inflight, "record"),
}


@pytest.mark.parametrize("task", sorted(OWNED_TASKS))
async def test_a_task_of_the_host_that_fails_is_reported_at_once_and_stops_the_host(
    task: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, owner, method = OWNED_TASKS[task]
    await _put(tmp_path, "a")
    release = asyncio.Event()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def handle(msg: QueueMessage) -> None:
        await release.wait()  # held until the renewer is due, for the renewer's case

    _break(monkeypatch, owner, method)
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1, lease_duration=2, drain_timeout=1)
    host = Host(app, config, in_flight=tmp_path / "in-flight.json")
    with captured_logs(monkeypatch, faults_module) as logs:
        run = asyncio.create_task(host.run())
        if task == "completion":
            release.set()
        done, _ = await asyncio.wait({run}, timeout=20)
        release.set()
        assert done, f"the host went on running with its {task} failed"
        await run
    assert len(host.faults.failed) == 1 and host.faults.failed[0].startswith(name)
    assert f"injected into {method}" in host.faults.failed[0]
    [line] = [line for line in logs if line["event"].startswith("a task of the host failed")]
    assert line["log_level"] == "error" and line["task"].startswith(name) and line["exc_info"]


async def test_readyz_names_the_failed_task_while_the_host_drains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _put(tmp_path, "a")
    release = asyncio.Event()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def handle(msg: QueueMessage) -> None:
        await release.wait()

    port = free_port()
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1, http_port=port, http_host="127.0.0.1", drain_timeout=30)
    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("received") == 1), 10, what="the message taken")
        _break(monkeypatch, Listener, "_receive")
        await _put(tmp_path, "b")  # the listener's next receive fails
        await apoll(lambda: _true(bool(host.faults.failed)), 10, what="the listener's fault reported")
        status, body = await asyncio.to_thread(get, port, "/readyz")
        release.set()
    assert status == 503 and "listener-handle failed: RuntimeError: injected into _receive" in body


@pytest.mark.subprocess
def test_worker_run_exits_1_when_a_task_of_its_host_fails(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(
        "from worker import WorkerApp, QueueMessage, Middleware\n"
        "from worker.runtime.listener import Listener\n"
        "async def broken(self, room, wait):\n"
        "    raise RuntimeError('injected')\n"
        "Listener._receive = broken\n"
        "app = WorkerApp()\n"
        "@app.queue_trigger(arg_name='msg', queue_name='work')\n"
        "def handle(msg: QueueMessage) -> None:\n"
        "    pass\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--app", "app:app"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=worker_environment(),
    )
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 30
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    events = [line["event"] for line in lines]
    assert "a task of the host failed; stopping, so that the process exits and is started again" in events
    assert "the host stopped because a task of its own failed" in events


@pytest.mark.subprocess
def test_burst_ends_with_exit_1_once_storage_stays_unreachable(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(
        "from worker import WorkerApp, QueueMessage\n"
        "app = WorkerApp()\n"
        "@app.queue_trigger(arg_name='msg', queue_name='work', connection='Unreachable')\n"
        "def handle(msg: QueueMessage) -> None:\n"
        "    pass\n"
    )
    (tmp_path / "host.yaml").write_text("worker:\n  burstStorageTimeout: 2s\n")
    with closed_port() as port:
        connection = (
            f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
            f"QueueEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        )
        done = subprocess.run(
            [sys.executable, "-m", "worker", "run", "--app", "app:app", "--burst"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env=worker_environment(Unreachable=connection),
        )
    assert done.returncode == 1, done.stderr[-3000:]
    gave_up = [
        json.loads(line) for line in done.stderr.splitlines() if "burst mode gives up" in line and line.startswith("{")
    ]
    assert len(gave_up) == 1 and gave_up[0]["seconds"] >= 2


async def test_the_embedded_queue_file_deleted_under_the_host_stops_it_naming_the_file(tmp_path: Path) -> None:
    await _put(tmp_path, "held")
    release, started = asyncio.Event(), asyncio.Event()
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def handle(msg: QueueMessage) -> None:
        started.set()
        await release.wait()  # keeps the host draining while /readyz is asked

    port = free_port()
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1, http_port=port, http_host="127.0.0.1", drain_timeout=30)
    host = Host(app, config)
    run = asyncio.create_task(host.run())
    await asyncio.wait_for(started.wait(), 10)
    queue_file = tmp_path / ".worker" / "queues.sqlite3"
    for path in queue_file.parent.glob("queues.sqlite3*"):
        path.unlink()
    await apoll(lambda: _true(bool(host.faults.failed)), 30, what="the deleted file noticed")
    status, body = await asyncio.to_thread(get, port, "/readyz")
    release.set()
    await asyncio.wait_for(run, 30)
    assert "StorageGone" in host.faults.failed[0] and str(queue_file) in host.faults.failed[0]
    assert status == 503 and "StorageGone" in body
    assert not queue_file.exists()  # the worker made no new file nobody else reads

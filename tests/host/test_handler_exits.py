"""A handler that raises SystemExit, KeyboardInterrupt or GeneratorExit fails its attempt; the host goes on.

Left alone, asyncio lets SystemExit and KeyboardInterrupt out of the event loop, which ends the process with the
batch's other messages done but not deleted. The behaviour is the dispatcher's, the same on every backend: the
embedded queue only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support import apoll, captured_logs, running
from worker import QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend, QueueNotFound
from worker.bindings.encoding import encode
from worker.runtime import dispatcher
from worker.settings.config import HostConfig

pytestmark = pytest.mark.parametrize("backend_kind", ["sqlite"])

QUEUE = "jobs"
RAISED = {"SystemExit": SystemExit(3), "KeyboardInterrupt": KeyboardInterrupt(), "GeneratorExit": GeneratorExit()}


@pytest.mark.parametrize("raised", list(RAISED))
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_handler_raising_a_base_exception_fails_that_attempt_and_the_batch_goes_on(
    tmp_path: Path, queue: QueueBackend, raised: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handled: list[str] = []

    def handle(msg: QueueMessage) -> None:
        body = msg.get_body().decode()
        if body == "exit":
            raise RAISED[raised]
        handled.append(body)

    async def handle_async(msg: QueueMessage) -> None:
        handle(msg)

    app = WorkerApp()
    app.queue_trigger(arg_name="msg", queue_name=QUEUE)(handle if kind == "sync" else handle_async)
    for body in ("ok 1", "exit", "ok 2"):
        await queue.put(QUEUE, encode(body, "base64"))
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.2, max_dequeue_count=1, drain_timeout=1)
    with captured_logs(monkeypatch, dispatcher) as logs:
        async with running(app, replace(config, batch_size=3)) as host:
            poisoned = await apoll(lambda: _poison(queue), 15, what="the exiting message in poison")
            await apoll(lambda: _empty(queue), 15, what="the other two deleted")
    assert sorted(handled) == ["ok 1", "ok 2"]
    assert [message.content for message in poisoned] == [encode("exit", "base64")]
    assert (host.metrics.get("succeeded"), host.metrics.get("failed")) == (2, 1)
    [failed] = [line for line in logs if line["event"] == "handler failed"]
    assert failed["error"] == f"{raised}: {RAISED[raised]}"


async def _poison(queue: QueueBackend) -> list[Any]:
    try:
        return await queue.peek(f"{QUEUE}-poison", 32)
    except QueueNotFound:
        return []


async def _empty(queue: QueueBackend) -> bool:
    return await queue.approximate_count(QUEUE) == 0

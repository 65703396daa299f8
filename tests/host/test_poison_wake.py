"""A message this host moves to ``<queue>-poison`` wakes its own listener there, as the Functions host's does.

On Azure Storage a listener of an empty queue backs off up to maxPollingInterval; without the wake the poison
function ran up to that long after the move.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from tests.azurite import Azurite
from tests.support import apoll, running
from worker import QueueMessage, WorkerApp
from worker.backends.queues import put_creating
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.runtime.host import Host
from worker.settings.config import HostConfig


def _receives(host: Host, function: str) -> float:
    """How many receives ``function``'s listener has made (the receive-duration histogram's count)."""
    family = host.metrics.receive_seconds.family()
    return next(
        (
            sample.value
            for sample in family.samples
            if sample.name.endswith("_count") and sample.labels.get("function") == function
        ),
        0,
    )


async def _true(value: bool) -> bool:
    return value


async def test_a_move_to_the_poison_queue_runs_the_poison_function_at_once(azurite: Azurite, tmp_path: Path) -> None:
    queue = f"wake-{uuid.uuid4().hex[:8]}"
    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=60,
        max_dequeue_count=1,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": azurite.connection_string},
    )
    host_ref: list[Host] = []
    moved_at: list[float] = []
    poison_ran_at: list[float] = []
    app = WorkerApp()

    @app.function_name("fails")
    @app.queue_trigger(arg_name="msg", queue_name=queue, connection="AzureWebJobsStorage")
    async def fails(msg: QueueMessage) -> None:
        # Fail only once the poison queue's listener has backed off: after seven empty receives its wait is
        # 6.4 s +-20 %, so only a wake can make it receive within a couple of seconds.
        while not host_ref or _receives(host_ref[0], "on_poison") < 7:
            await asyncio.sleep(0.05)
        moved_at.append(time.monotonic())
        raise RuntimeError("fails, to be poisoned")

    @app.function_name("on_poison")
    @app.queue_trigger(arg_name="msg", queue_name=f"{queue}-poison", connection="AzureWebJobsStorage")
    async def on_poison(msg: QueueMessage) -> None:
        poison_ran_at.append(time.monotonic())

    backend = open_backend(azurite.connection_string, tmp_path)
    try:
        await put_creating(backend, queue, encode("doomed", "base64"))
        async with running(app, config) as host:
            host_ref.append(host)
            await apoll(lambda: _true(bool(poison_ran_at)), 30, what="the poison function")
            assert host.metrics.get("poisoned", "fails") == 1
    finally:
        await backend.close()
    assert poison_ran_at[0] - moved_at[0] < 2.0, poison_ran_at[0] - moved_at[0]

"""A stop that lands while a receive is in flight leaves none of its messages hidden.

Seen on Azurite: a Ctrl-C during a batch receive left its messages neither run nor released until their lease ended,
so the next ``worker run --burst`` waited for them. A full batch makes the listener run a further receive beside its
own; at stop the listener ends and cancels that one, whose request the service may already have answered.

Here the host's backend is wrapped to see its receives: the listener's own second receive waits in the wrapper (it
never reaches the service) until the stop is requested, and the further receive goes on to the service, which takes
its messages and whose answer is held there (Azurite behind the fault proxy; the embedded queue's file with its write
lock held, as another process writing would) until the listener has cancelled it. Then the answer is let through,
and once the host has stopped every message it did not handle is visible again at once, long before the lease.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import worker.runtime.host as host_module
from tests.azurite import Azurite
from tests.reliability.faultproxy import Fault, FaultProxy, FaultRates
from tests.support import apoll, running
from worker import QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend
from worker.backends.registry import SQLITE_PREFIX, open_backend
from worker.bindings.encoding import encode
from worker.settings.config import HostConfig

QUEUE = "stop-during-receive"
BATCH = 4
#: The first receive's batch, and the further receive's.
MESSAGES = 2 * BATCH
#: The lease the host takes: a message that waited it out would be long past the test's deadline.
LEASE = 600
#: Seconds each step of the test may take on a loaded machine.
DEADLINE = 15


@dataclass
class Service:
    """Where the host's storage is, and how a receive's answer is held there after the service took its messages."""

    connection: str
    hold: Callable[[], None]
    let_through: Callable[[], None]
    #: Whether the service has answered a held receive (it took the messages); where that cannot be seen, the held
    #: receive takes them only once let through.
    answered: Callable[[], bool] = lambda: True


@pytest.fixture(params=["sqlite", "azurite"])
async def service(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Service]:
    if request.param == "azurite":
        azurite: Azurite = request.getfixturevalue("azurite")
        proxy = FaultProxy(azurite.port, FaultRates(latency=(0.0, 0.0))).start()
        try:
            yield Service(
                proxy.connection_string,
                lambda: proxy.inject(Fault.HOLD_AFTER, "receive"),
                proxy.let_through,
                lambda: proxy.stats().held == 1,
            )
        finally:
            proxy.stop()
        return
    path = tmp_path / "queue.db"
    other = sqlite3.connect(path, isolation_level=None)
    try:
        # Another process's write under way: the receive's take waits for it, and happens once it ends.
        yield Service(
            f"{SQLITE_PREFIX}{path}",
            lambda: other.execute("BEGIN IMMEDIATE"),
            lambda: other.execute("ROLLBACK") if other.in_transaction else None,
        )
    finally:
        other.close()


@dataclass
class Receives:
    """The host's receives as the wrapper sees them."""

    stop_requested: asyncio.Event
    further_cancelled: asyncio.Event
    listener: asyncio.Task[Any] | None = None
    further_started: bool = False


def wrap_receives(monkeypatch: pytest.MonkeyPatch, service: Service) -> Receives:
    """Wrap the receive of every backend the host opens: the listener's own receives after its first wait for the
    stop and bring nothing; a further receive has its answer held at the service, and the wrapper tells the test
    when its caller is cancelled."""
    seen = Receives(asyncio.Event(), asyncio.Event())
    real_open = host_module.open_backend

    def wrapped_open(connection: str | None, base_dir: Path, **kwargs: Any) -> QueueBackend:
        backend = real_open(connection, base_dir, **kwargs)
        receive = backend.receive

        async def held(*args: Any, **kwargs: Any) -> Any:
            task = asyncio.current_task()
            if seen.listener is None:
                seen.listener = task
            elif task is seen.listener:
                await seen.stop_requested.wait()
                return []
            else:
                service.hold()
                seen.further_started = True
            try:
                return await receive(*args, **kwargs)
            except asyncio.CancelledError:
                seen.further_cancelled.set()
                raise

        backend.receive = held  # type: ignore[method-assign]
        return backend

    monkeypatch.setattr(host_module, "open_backend", wrapped_open)
    return seen


async def test_a_receive_cancelled_at_stop_after_the_service_took_its_messages_hides_none(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = open_backend(service.connection, tmp_path)
    try:
        await direct.delete_queue(QUEUE)
        await direct.create_queue(QUEUE)
        sent = {(await direct.put(QUEUE, encode(f"m{i}", "base64"))).id for i in range(MESSAGES)}
        handled: list[str] = []

        async def handler(msg: QueueMessage) -> None:
            handled.append(msg.id)

        app = WorkerApp()
        app.queue_trigger(arg_name="msg", queue_name=QUEUE, connection="Store")(handler)
        config = HostConfig(
            base_dir=tmp_path,
            batch_size=BATCH,
            new_batch_threshold=2 * BATCH,
            max_in_flight=4 * BATCH,
            lease_duration=LEASE,
            max_polling_interval=0.2,
            drain_timeout=5,
            connections={"Store": service.connection},
        )
        seen = wrap_receives(monkeypatch, service)
        try:
            async with running(app, config) as host:

                async def further_receive_under_way() -> bool:
                    return len(handled) == BATCH and seen.further_started and service.answered()

                await apoll(
                    further_receive_under_way,
                    DEADLINE,
                    what="the first batch handled, and a further receive answered by the service and held",
                )
                host.request_stop()
                seen.stop_requested.set()
                await asyncio.wait_for(seen.further_cancelled.wait(), DEADLINE)
                service.let_through()
        finally:
            service.let_through()
        assert sorted(handled) == sorted(set(handled)) and len(handled) == BATCH
        left = sent - set(handled)
        found: dict[str, int] = {}

        async def visible_again() -> bool:
            for message in await direct.receive(QUEUE, 32, 30):
                found[message.id] = message.dequeue_count
            return set(found) >= left

        await apoll(visible_again, 5, what=f"{len(left)} messages visible again at once")
        assert set(found) == left
        assert all(count <= 2 for count in found.values()), f"more than the cancelled delivery counted: {found}"
    finally:
        await direct.close()

"""Listener, lease renewal and completion inside one host process, on a real embedded queue.

The host runs as a task on the test's event loop with its own backend; the
test talks to the same queue file through a second backend, as another
process would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import AZURITE_SDK, BACKENDS
from tests.support import apoll, running
from worker import Out, QueueMessage, WorkerApp
from worker.backends.queues import PopReceiptMismatch, QueueBackend, QueueNotFound
from worker.backends.registry import DEFAULT_SQLITE_PATH, SQLITE_PREFIX
from worker.bindings.encoding import encode
from worker.model import Lease
from worker.observability.metrics import Metrics
from worker.runtime.host import COMPLETION_GRACE, Host
from worker.runtime.lease import LeaseScheduler
from worker.runtime.threads import TIMEOUT_GRACE
from worker.settings.config import HostConfig

QUEUE = "jobs"


@pytest.fixture(params=[*BACKENDS, AZURITE_SDK])
def backend_kind(request: pytest.FixtureRequest) -> str:
    """Azure on the SDK's public calls too: what the host does with a message must not depend on the path."""
    return str(request.param)


@pytest.fixture
def config(tmp_path: Path, connection: str | None) -> HostConfig:
    return HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        lease_duration=600,
        new_batch_threshold=8,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": connection} if connection else {},
    )


def one_function(handler: Callable[..., Any], queue: str = QUEUE) -> WorkerApp:
    app = WorkerApp()
    app.queue_trigger(arg_name="msg", queue_name=queue)(handler)
    return app


async def put(backend: QueueBackend, *bodies: str, encoding: str = "base64") -> list[str]:
    return [(await backend.put(QUEUE, encode(b, encoding))).id for b in bodies]


async def poison_of(backend: QueueBackend) -> list[Any]:
    try:
        return await backend.peek(f"{QUEUE}-poison", 32)
    except QueueNotFound:
        return []


# -- listener -----------------------------------------------------------------------------------------------------


async def test_listener_takes_a_batch_then_the_next_when_in_flight_falls_to_the_threshold(
    config: HostConfig, queue: QueueBackend
) -> None:
    gate = asyncio.Event()
    started: list[str] = []

    async def handler(msg: QueueMessage) -> None:
        started.append(msg.id)
        if len(started) <= 3:
            await gate.wait()  # the first three finish when the test says so
        else:
            await asyncio.Event().wait()  # the rest hold until shutdown

    await put(queue, *(str(i) for i in range(20)))
    cfg = replace(config, batch_size=4, new_batch_threshold=1)
    async with running(one_function(handler), cfg) as host:
        await apoll(lambda: _ready(lambda: len(started) == 4), 10, what="the first batch")
        assert host.metrics.get("received") == 4, "fetched before in-flight fell to newBatchThreshold"
        gate.set()
        # Three finish: in-flight falls to 1 = newBatchThreshold, so exactly one more batch of 4 comes.
        await apoll(lambda: _ready(lambda: len(started) == 8), 10, what="the second batch")
        assert host.metrics.get("received") == 8
        assert host.metrics.get("succeeded") == 3


async def _ready(check: Callable[[], bool]) -> bool:
    return check()


async def test_max_in_flight_bounds_messages_held_across_functions(config: HostConfig, queue: QueueBackend) -> None:
    held = 0
    most = 0

    async def hold(msg: QueueMessage) -> None:
        nonlocal held, most
        held += 1
        most = max(most, held)
        await asyncio.sleep(0.05)  # the handler's own work
        held -= 1

    app = WorkerApp()
    app.function_name("a")(app.queue_trigger(arg_name="msg", queue_name=QUEUE)(hold))
    await queue.create_queue("other")

    async def hold_b(msg: QueueMessage) -> None:
        await hold(msg)

    app.queue_trigger(arg_name="msg", queue_name="other")(hold_b)
    for i in range(30):
        await queue.put(QUEUE, encode(str(i), "base64"))
        await queue.put("other", encode(str(i), "base64"))
    async with running(app, replace(config, batch_size=8, new_batch_threshold=8, max_in_flight=5)) as host:
        await apoll(lambda: _ready(lambda: host.metrics.get("succeeded") == 60), 30, what="all 60 messages")
    assert 1 < most <= 5


@pytest.mark.parametrize("backend_kind", ["azurite"])  # a backend that cannot wait; the embedded queue long-polls
async def test_empty_queue_backs_off_exponentially_and_resets_on_a_message(
    config: HostConfig, queue: QueueBackend, receive_times: list[float]
) -> None:
    """Receives on an empty queue come 0.1, 0.2, 0.4 ... s apart; a message brings the next poll back to 0.1 s."""
    receives = receive_times
    handled = asyncio.Event()

    async def handler(msg: QueueMessage) -> None:
        handled.set()

    cfg = replace(config, max_polling_interval=3.0)
    host = Host(one_function(handler), cfg)
    try:
        task = asyncio.create_task(host.run())
        await apoll(lambda: _ready(lambda: len(receives) >= 5), 20, what="five empty polls")
        # 0.1 + 0.2 + 0.4 + 0.8 s, each at least 80 % of itself: a fixed 0.1 s poll would take 0.4 s.
        assert receives[4] - receives[0] >= 0.8 * 1.5
        await put(queue, "wake up")
        await asyncio.wait_for(handled.wait(), 10)
        after = len(receives)
        await apoll(lambda: _ready(lambda: len(receives) >= after + 2), 10, what="two polls after the message")
        # Without a reset the next gap would be at least 0.8 * 1.6 s; after a reset it is 0.1-0.2 s.
        assert receives[after + 1] - receives[after - 1] < 1.2
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 30)


# -- lease renewal ------------------------------------------------------------------------------------------------


async def test_one_scheduler_renews_hundreds_of_leases_without_a_task_per_message(queue: QueueBackend) -> None:
    for i in range(200):
        await queue.put(QUEUE, str(i))
    metrics = Metrics()
    # 10 s leases renewed at a quarter: a renewal may be up to 7.5 s late on a machine the whole suite shares (with
    # 3 s leases renewed at half, a 1.5 s stall of this process let a batch lapse in one full run in five; with 6 s
    # leases, a 3 s one once, with six test processes on two cores).
    scheduler = LeaseScheduler(duration=10, fraction=0.25, metrics=metrics)
    task = asyncio.create_task(scheduler.run())
    leases: list[Lease] = []
    most_tasks = 0
    try:
        # Each batch held as soon as it is received, as the dispatcher does: a lease held later than its receive
        # would be renewed by a clock that started late.
        while len(leases) < 200:
            for m in await queue.receive(QUEUE, 32, 10):
                leases.append(lease := Lease(queue, QUEUE, m.id, m.pop_receipt))
                scheduler.hold(lease)
        deadline = time.monotonic() + 30
        while min(lease.renewals for lease in leases) < 3:
            assert time.monotonic() < deadline, "leases were not renewed three times in 30 s"
            most_tasks = max(most_tasks, len(asyncio.all_tasks()))
            assert await queue.receive(QUEUE, 32, 1) == [], "a renewed lease lapsed"
            await asyncio.sleep(0.05)  # sampling interval of this watch loop, not a wait for a condition
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert most_tasks <= 70, f"{most_tasks} tasks for 200 leases"
    assert metrics.get("leases_lost") == 0


async def test_lost_lease_cancels_the_async_handler_and_skips_its_completion(
    config: HostConfig, queue: QueueBackend
) -> None:
    started = asyncio.Event()
    seen: dict[str, Any] = {}

    async def handler(msg: QueueMessage) -> None:
        seen["msg"] = msg
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            seen["lease_lost"] = msg.lease_lost.is_set()
            raise

    [message_id] = await put(queue, "stolen")
    async with running(one_function(handler), replace(config, lease_duration=1)) as host:
        await asyncio.wait_for(started.wait(), 10)
        thief = await _steal(queue, seen["msg"])
        await apoll(lambda: _ready(lambda: host.metrics.get("completions_skipped") == 1), 10, what="a skipped completion")
        assert seen == {"msg": seen["msg"], "cancelled": True, "lease_lost": True}
        assert host.metrics.get("leases_lost") == 1
        assert host.metrics.get("succeeded") == host.metrics.get("released") == 0
        await queue.delete(QUEUE, message_id, thief)  # the host left the thief's receipt valid


async def test_lost_lease_is_visible_to_a_sync_handler(config: HostConfig, queue: QueueBackend) -> None:
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    seen: dict[str, Any] = {}

    def handler(msg: QueueMessage) -> None:
        seen["msg"] = msg
        loop.call_soon_threadsafe(started.set)
        seen["noticed"] = msg.lease_lost.wait(30)

    await put(queue, "stolen from a thread")
    async with running(one_function(handler), replace(config, lease_duration=1)) as host:
        await asyncio.wait_for(started.wait(), 10)
        await _steal(queue, seen["msg"])
        await apoll(lambda: _ready(lambda: host.metrics.get("completions_skipped") == 1), 10, what="a skipped completion")
    # The handler's thread, which the host stopped waiting for, records what it saw as it wakes: maybe only now.
    await apoll(lambda: _ready(lambda: "noticed" in seen), 10, what="the handler to wake")
    assert seen["noticed"] is True


async def _steal(queue: QueueBackend, msg: QueueMessage) -> str:
    """Rotate the message's pop receipt behind the host's back, as a receiver after a lapsed lease would.

    The message stays invisible throughout, so the host's own listener cannot
    take it again; the host's next renewal must find its receipt stale.
    """

    async def try_steal() -> str | None:
        try:
            receipt = await queue.update(QUEUE, msg.id, msg.pop_receipt or "", 600)
        except PopReceiptMismatch:  # the host renewed in between; read the new receipt and try again
            return None
        return receipt.pop_receipt

    return await apoll(try_steal, 10, what="the message to be stolen")


# -- completion ---------------------------------------------------------------------------------------------------


async def test_failure_hides_the_message_for_visibility_timeout_then_retries(
    config: HostConfig, queue: QueueBackend
) -> None:
    attempts: list[tuple[int, float]] = []

    async def handler(msg: QueueMessage) -> None:
        attempts.append((msg.dequeue_count, time.monotonic()))
        if msg.dequeue_count == 1:
            raise ValueError("first try fails")

    await put(queue, "retry me")
    async with running(one_function(handler), replace(config, visibility_timeout=1.5)) as host:
        await apoll(lambda: _ready(lambda: host.metrics.get("succeeded") == 1), 15, what="the retry to succeed")
    assert [count for count, _ in attempts] == [1, 2]
    assert attempts[1][1] - attempts[0][1] >= 1.5 * 0.9
    assert (host.metrics.get("failed"), host.metrics.get("retried")) == (1, 1)
    assert await queue.approximate_count(QUEUE) == 0


async def test_function_timeout_is_a_failure(config: HostConfig, queue: QueueBackend) -> None:
    async def handler(msg: QueueMessage) -> None:
        await asyncio.sleep(60)

    await put(queue, "slow")
    async with running(one_function(handler), replace(config, function_timeout=1, max_dequeue_count=1)) as host:
        poisoned = await apoll(lambda: poison_of(queue), 15, what="the timed-out message in poison")
    assert len(poisoned) == 1
    assert host.metrics.get("failed") == 1 and host.metrics.get("poisoned") == 1


async def test_message_over_max_dequeue_count_is_poisoned_before_the_handler_runs(
    config: HostConfig, queue: QueueBackend
) -> None:
    calls: list[str] = []

    async def handler(msg: QueueMessage) -> None:
        calls.append(msg.id)

    [message_id] = await put(queue, "crashed twice")
    for _ in range(2):  # two receives by workers that died: dequeue count reaches 2
        [taken] = await queue.receive(QUEUE, 1, 60)
        await queue.update(QUEUE, message_id, taken.pop_receipt or "", 0)
    async with running(one_function(handler), replace(config, max_dequeue_count=2)) as host:
        poisoned = await apoll(lambda: poison_of(queue), 15, what="the message in poison")
    assert calls == []
    assert [p.content for p in poisoned] == [encode("crashed twice", "base64")]
    assert host.metrics.get("poisoned") == 1


async def test_bad_input_fails_clearly_and_the_host_goes_on(config: HostConfig, queue: QueueBackend) -> None:
    """Bad base64 is poisoned at once (as in Functions); bad UTF-8 and bad JSON fail in get_json and are retried."""
    handled: list[Any] = []

    async def handler(msg: QueueMessage) -> None:
        handled.append(msg.get_json())

    await queue.put(QUEUE, "this is not base64!")
    await queue.put(QUEUE, encode(b"\xff\xfe not utf-8", "base64"))
    await queue.put(QUEUE, encode("{not json", "base64"))
    await put(queue, '{"ok": 1}', '{"ok": 2}')
    async with running(one_function(handler), replace(config, max_dequeue_count=2)) as host:
        poisoned = await apoll(lambda: _at_least(poison_of(queue), 3), 20, what="three bad messages in poison")
    assert sorted(h["ok"] for h in handled) == [1, 2]
    assert "this is not base64!" in [p.content for p in poisoned]
    assert host.metrics.get("succeeded") == 2
    assert host.metrics.get("poisoned") == 3
    assert host.metrics.get("failed") == 4  # UTF-8 and JSON failures, twice each; bad base64 never reached it


async def test_a_body_that_is_not_utf8_is_poisoned_at_once_for_a_str_trigger(
    config: HostConfig, queue: QueueBackend
) -> None:
    """A handler that takes ``str`` could never be given such a body: like bad base64, no attempt can decode it."""
    handled: list[str] = []

    async def handler(msg: str) -> None:
        handled.append(msg)

    await queue.put(QUEUE, encode(b"\xff\xfe not utf-8", "base64"))
    await put(queue, "caf\u00e9")
    async with running(one_function(handler), replace(config, max_dequeue_count=5)) as host:
        [poisoned] = await apoll(lambda: poison_of(queue), 15, what="the undecodable message in poison")
        await apoll(lambda: _ready(lambda: host.metrics.get("succeeded") == 1), 10, what="the good message")
    assert handled == ["caf\u00e9"]
    assert poisoned.content == encode(b"\xff\xfe not utf-8", "base64")  # as stored, for a fixed handler
    assert (host.metrics.get("failed"), host.metrics.get("poisoned")) == (0, 1)  # on its first attempt


async def _at_least(peek: Any, n: int) -> list[Any]:
    found = await peek
    return found if len(found) >= n else []


async def test_message_encoding_none_passes_text_through(config: HostConfig, queue: QueueBackend) -> None:
    bodies: list[bytes] = []

    async def handler(msg: QueueMessage) -> None:
        bodies.append(msg.get_body())

    await queue.put(QUEUE, "plain <text> é")
    async with running(one_function(handler), replace(config, message_encoding="none")) as host:
        await apoll(lambda: _ready(lambda: host.metrics.get("succeeded") == 1), 10, what="the message")
    assert bodies == ["plain <text> é".encode()]


# -- output bindings ----------------------------------------------------------------------------------------------


async def test_queue_output_is_sent_on_success_only(config: HostConfig, queue: QueueBackend) -> None:
    app = WorkerApp()

    @app.queue_output(arg_name="out", queue_name="results")
    @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
    async def handler(msg: QueueMessage, out: Out[list[str]]) -> None:
        job = msg.get_json()
        out.set([f"{job['n']}-a", f"{job['n']}-b"])
        if job["fail"]:
            raise RuntimeError("set, then failed: nothing may be sent")

    await put(queue, '{"n": 1, "fail": false}', '{"n": 2, "fail": true}')
    async with running(app, replace(config, max_dequeue_count=1)) as host:
        await apoll(lambda: _ready(lambda: host.metrics.get("poisoned") == 1), 10, what="the failing message")
        await apoll(lambda: _ready(lambda: host.metrics.get("succeeded") == 1), 10, what="the good message")
    sent = await queue.peek("results", 32)
    assert sorted(m.content for m in sent) == sorted(encode(t, "base64") for t in ("1-a", "1-b"))


@pytest.mark.parametrize("kind", ["worker", "functions"])
async def test_an_output_of_a_type_no_message_carries_is_poisoned_on_the_first_attempt(
    config: HostConfig, queue: QueueBackend, kind: str
) -> None:
    """A number on a WorkerApp's queue output; a dict on an azure.functions one (the Python worker would send its
    keys): no attempt could send either, so the message goes to poison at once with the reason, and nothing is
    sent."""
    if kind == "worker":
        app = WorkerApp()

        @app.queue_output(arg_name="out", queue_name="results")
        @app.queue_trigger(arg_name="msg", queue_name=QUEUE)
        def handler(msg: QueueMessage, out: Out[int]) -> None:
            out.set(123)
    else:
        import azure.functions as func

        from worker.compat.functions import from_function_app

        functions_app = func.FunctionApp()

        @functions_app.queue_trigger(arg_name="msg", queue_name=QUEUE, connection="AzureWebJobsStorage")
        @functions_app.queue_output(arg_name="$return", queue_name="results", connection="AzureWebJobsStorage")
        def job(msg: func.QueueMessage) -> Any:
            return {"n": 1}

        app = from_function_app(functions_app, environ={}).app
        # A FunctionApp always names its connection: the embedded queue's file, when that is the backend here.
        embedded = f"{SQLITE_PREFIX}{DEFAULT_SQLITE_PATH.as_posix()}"
        config = replace(config, connections={"AzureWebJobsStorage": embedded, **config.connections})
    await put(queue, "one")
    async with running(app, replace(config, max_dequeue_count=5)) as host:
        await apoll(lambda: _ready(lambda: host.metrics.get("poisoned") == 1), 10, what="the message in poison")
        assert host.metrics.get("retried") == 0
    [poisoned] = await queue.peek(f"{QUEUE}-poison", 32)
    assert poisoned.content == encode("one", "base64")
    with pytest.raises(QueueNotFound):
        await queue.peek("results", 32)


# -- cardinality many ---------------------------------------------------------------------------------------------


async def test_cardinality_many_hands_the_batch_over_renews_every_lease_and_completes_each_message(
    config: HostConfig, queue: QueueBackend
) -> None:
    batches: list[list[str]] = []
    renewed = asyncio.Event()
    app = WorkerApp()
    holder: dict[str, Host] = {}

    @app.queue_trigger(arg_name="msgs", queue_name=QUEUE, cardinality="many")
    async def handler(msgs: list[QueueMessage]) -> None:
        batches.append(sorted(m.get_body().decode() for m in msgs))
        # Hold past two lease periods so that every message's lease must be renewed, twice.
        await apoll(
            lambda: _ready(lambda: holder["host"].metrics.get("lease_renewals") >= 2 * len(msgs)),
            20,
            what="every lease renewed twice",
        )
        renewed.set()
        for m in msgs:
            if m.get_body() == b"bad-3":
                m.fail("this one is wrong")

    await queue.put(QUEUE, "%%% not base64")
    await put(queue, "ok-1", "ok-2", "bad-3", "ok-4")
    cfg = replace(config, batch_size=8, lease_duration=1, max_dequeue_count=1)
    async with running(app, cfg) as host:
        holder["host"] = host
        await asyncio.wait_for(renewed.wait(), 30)
        poisoned = await apoll(lambda: _at_least(poison_of(queue), 2), 20, what="two poison messages")
        await apoll(lambda: _ready(lambda: host.metrics.get("succeeded") == 3), 20, what="three deletions")
    assert batches == [["bad-3", "ok-1", "ok-2", "ok-4"]]
    assert sorted(p.content for p in poisoned) == sorted(["%%% not base64", encode("bad-3", "base64")])
    assert await queue.approximate_count(QUEUE) == 0
    assert host.metrics.get("leases_lost") == 0


# -- shutdown -----------------------------------------------------------------------------------------------------

#: Kubernetes' default terminationGracePeriodSeconds: the SIGKILL after it loses a stop's releases.
KUBERNETES_DEFAULT_GRACE = 30.0


@pytest.mark.parametrize("backend_kind", ["sqlite"])  # the timing is the host's, not the backend's
async def test_a_stop_gives_a_stuck_sync_handler_the_timeout_grace_after_drain_timeout_and_no_more(
    config: HostConfig, queue: QueueBackend
) -> None:
    """Before: drainTimeout, then 10 s more waiting for a thread nothing can stop: 43 s with the defaults."""
    started, release = asyncio.Event(), threading.Event()
    loop = asyncio.get_running_loop()

    def stuck(msg: QueueMessage) -> None:
        loop.call_soon_threadsafe(started.set)
        release.wait(60)  # never looks at msg.cancelled

    [message_id] = await put(queue, "never returns")
    drain = 0.2
    host = Host(one_function(stuck), replace(config, drain_timeout=drain))
    task = asyncio.create_task(host.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        began = time.monotonic()
        host.request_stop()
        await asyncio.wait_for(task, 30)
        took = time.monotonic() - began
    finally:
        release.set()
    assert took < drain + TIMEOUT_GRACE + 1.0, took
    assert [m.id for m in await queue.peek(QUEUE, 32)] == [message_id]  # released, visible again at once


def test_with_the_defaults_a_stop_fits_kubernetes_default_grace() -> None:
    worst = HostConfig().drain_timeout + COMPLETION_GRACE + TIMEOUT_GRACE
    assert worst <= KUBERNETES_DEFAULT_GRACE - 2, worst  # room for the signal to arrive and the process to exit

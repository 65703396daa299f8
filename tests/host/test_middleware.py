"""Middleware plugged in from the app and from host.yaml, in a running host on the embedded queue: every hook seen."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support import apoll, running
from worker import InvocationFailed, Middleware, Poison, QueueMessage, WorkerApp
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.invocation import Invocation
from worker.model import Fate, Finished, FunctionSpec, Result, StartupRefused
from worker.ops import preflight
from worker.runtime.host import Host
from worker.settings.config import HostConfig


class HookCounter(Middleware):
    """Counts every hook; the test reads what it saw."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.done: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def host_started(self, functions: Sequence[FunctionSpec]) -> None:
        self.calls["host_started"] += 1
        self.functions = [f.name for f in functions]

    def host_stopped(self) -> None:
        self.calls["host_stopped"] += 1

    def receive_limit(self, function: FunctionSpec, config: HostConfig, running: int, room: int) -> int:
        self.calls["receive_limit"] += 1
        return room

    def after_receive(self, function: FunctionSpec, count: int) -> None:
        self.calls["received"] += count

    async def before_invocation(self, invocation: Invocation) -> None:  # an async hook, awaited by the host
        self.calls["before_invocation"] += 1
        invocation.kwargs["tag"] = "from middleware"

    def after_invocation(self, invocation: Invocation, result: Result) -> None:
        self.calls["after_invocation"] += 1

    def on_interrupt(self, invocation: Invocation) -> None:
        self.calls["on_interrupt"] += 1

    def retry_delay(self, item: Finished, delay: float) -> float:
        self.calls["retry_delay"] += 1
        return delay

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        self.done.append((item.raw.content, done.value))


def hooked_app(counter: HookCounter, seen: dict[str, Any]) -> WorkerApp:
    app = WorkerApp()
    app.add_middleware(counter)

    @app.queue_trigger(arg_name="msg", queue_name="hooked")
    def hooked(msg: QueueMessage, tag: str) -> None:
        body = msg.get_body().decode()
        seen[body] = tag
        if body == "fail":
            raise RuntimeError("fails")
        if body == "poison":
            raise Poison("never valid")
        if body == "slow":
            msg.cancelled.wait(30)

    return app


async def test_a_middleware_added_by_the_app_sees_every_hook(tmp_path: Path) -> None:
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1, max_dequeue_count=2, function_timeout=2)
    queue = open_backend(None, tmp_path)
    await queue.create_queue("hooked")
    for body in ("ok", "fail", "poison", "slow"):
        await queue.put("hooked", encode(body, "base64"))
    counter, seen = HookCounter(), {}
    async with running(hooked_app(counter, seen), config) as host:
        await apoll(lambda: _true(len(counter.done) == 6), 30, what="six completions")
        assert host.metrics.get("poison_requested") == 1
    await queue.close()

    assert counter.functions == ["hooked"]
    assert seen == {
        "ok": "from middleware",
        "fail": "from middleware",
        "poison": "from middleware",
        "slow": "from middleware",
    }
    # ok deleted; fail retried, then poisoned; poison poisoned at once; slow past functionTimeout twice, the same.
    assert sorted(counter.done) == sorted(
        [
            (encode("ok", "base64"), "deleted"),
            (encode("fail", "base64"), "retried"),
            (encode("fail", "base64"), "poisoned"),
            (encode("poison", "base64"), "poisoned"),
            (encode("slow", "base64"), "retried"),
            (encode("slow", "base64"), "poisoned"),
        ]
    )
    calls = counter.calls
    assert calls["host_started"] == calls["host_stopped"] == 1
    assert calls["before_invocation"] == calls["after_invocation"] == len(counter.done)
    assert calls["received"] == len(counter.done) and calls["receive_limit"] >= 1
    assert calls["on_interrupt"] == 2  # the slow one ran past functionTimeout twice
    assert calls["retry_delay"] == 2


class Refusing(Middleware):
    """Fails every attempt before the handler runs, with its own reason."""

    def before_invocation(self, invocation: Invocation) -> None:
        raise InvocationFailed("refused by policy")


async def test_middleware_named_in_host_yaml_is_loaded_and_can_fail_an_attempt(tmp_path: Path) -> None:
    app = WorkerApp()
    ran: list[str] = []

    @app.queue_trigger(arg_name="msg", queue_name="refused")
    def never(msg: QueueMessage) -> None:
        ran.append("ran")

    config = HostConfig(
        base_dir=tmp_path, max_polling_interval=0.1, max_dequeue_count=1, middleware=("tests.host.test_middleware:Refusing",)
    )
    queue = open_backend(None, tmp_path)
    await queue.create_queue("refused")
    await queue.put("refused", encode("x", "base64"))
    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("poisoned") == 1), 30, what="the refused message in poison")
    await queue.close()
    assert not ran


def test_middleware_that_cannot_be_loaded_and_unknown_function_sections_are_refused_together(tmp_path: Path) -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="only-queue")
    def only(msg: QueueMessage) -> None: ...

    from worker.settings.config import FunctionOverrides

    config = HostConfig(
        base_dir=tmp_path,
        middleware=("tests.host.test_middleware:Missing", "no_colon"),
        functions={"typo": FunctionOverrides({"max_concurrency": 1}, "host.yaml:7")},
    )
    with pytest.raises(StartupRefused) as refused:
        preflight.check(app, config)  # `worker run` runs these checks once, before it builds the host
    problems = refused.value.problems
    assert any("Missing" in line and "cannot be loaded" in line for line in problems), problems
    assert any("no_colon" in line and "module:attribute" in line for line in problems), problems
    assert "host.yaml:7: functions.typo: the app has no function of that name (its functions: only)" in problems
    assert len(problems) == 3


async def _true(value: bool) -> bool:
    return value


class Gate(Middleware):
    """Holds every invocation in ``before_invocation`` until the test opens the gate (as a slow input read would)."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.open = asyncio.Event()
        self.done: list[str] = []
        self.held: list[Invocation] = []

    async def before_invocation(self, invocation: Invocation) -> None:
        self.held.append(invocation)
        self.waiting.set()
        await self.open.wait()

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        self.done.append(done.value)


async def test_a_message_given_back_at_shutdown_while_middleware_ran_before_it_never_reaches_the_handler(
    tmp_path: Path,
) -> None:
    """Shutdown releases every message whose handler has not started; one held in a ``before_invocation`` hook at
    that moment has not started, so its handler must not start afterwards (it would run to the end and then see its
    message released, and run again elsewhere)."""
    app = WorkerApp()
    gate = Gate()
    app.add_middleware(gate)
    ran: list[str] = []

    @app.queue_trigger(arg_name="msg", queue_name="gated")
    def gated(msg: QueueMessage) -> None:
        ran.append(msg.id)

    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1, drain_timeout=5)
    queue = open_backend(None, tmp_path)
    await queue.create_queue("gated")
    await queue.put("gated", encode("x", "base64"))
    host = Host(app, config)
    task = asyncio.create_task(host.run())
    try:
        await asyncio.wait_for(gate.waiting.wait(), 30)
        host.request_stop()
        # The host gives the message up while the hook still runs; it is released once the hook returns.
        await apoll(lambda: _true(gate.held[0].interrupted), 10, what="the unstarted message given up")
        gate.open.set()
        await asyncio.wait_for(task, 30)
    finally:
        gate.open.set()
        host.request_stop()
        await asyncio.wait_for(task, 60)
    assert ran == []
    assert gate.done == ["released"]
    [message] = await queue.peek("gated", 1)
    assert message.dequeue_count == 1
    await queue.close()

"""The middleware API as docs/middleware.md describes it, in a running host on the embedded queue: the invocation a
hook receives is frozen, each middleware's per-invocation state is its own, every type a hook receives is exported
from ``worker``, a middleware written against the older names still runs (with a DeprecationWarning), and one that
held receives back wakes the listeners when it allows them."""

from __future__ import annotations

import asyncio
import re
import time
import typing
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

import worker
from tests.support import apoll, running
from worker import (
    Delivery,
    Fate,
    Finished,
    FunctionOptions,
    FunctionSpec,
    Invocation,
    Middleware,
    QueueMessage,
    Result,
    WorkerApp,
)
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.model import StartupRefused
from worker.ops import preflight
from worker.runtime.host import Host
from worker.settings.config import HostConfig


class Meddler(Middleware):
    """Tries to assign to what it receives, and keeps per-invocation state of its own."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.refused: list[str] = []
        self.kept: list[Any] = []

    def before_invocation(self, invocation: Invocation) -> None:
        for attribute, value in (("started", True), ("options", None), ("kwargs", {}), ("id", "mine"), ("made_up", 1)):
            try:
                setattr(invocation, attribute, value)
            except AttributeError:
                self.refused.append(attribute)
        invocation.scratch(self)["mine"] = self.name
        invocation.kwargs["by"] = self.name  # what a hook may change: the handler's arguments

    def after_invocation(self, invocation: Invocation, result: Result) -> None:
        self.kept.append(dict(invocation.scratch(self)))


async def test_the_invocation_a_hook_receives_cannot_be_assigned_to_and_its_scratch_is_its_own(tmp_path: Path) -> None:
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1)
    queue = open_backend(None, tmp_path)
    await queue.create_queue("frozen")
    await queue.put("frozen", encode("x", "base64"))
    first, second = Meddler("first"), Meddler("second")
    called: list[str] = []
    app = WorkerApp()
    app.add_middleware(first)
    app.add_middleware(second)

    @app.queue_trigger(arg_name="msg", queue_name="frozen")
    def handle(msg: QueueMessage, by: str) -> None:
        called.append(by)

    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("succeeded") == 1), 30, what="the message handled")
    await queue.close()
    assert first.refused == second.refused == ["started", "options", "kwargs", "id", "made_up"]
    assert (first.kept, second.kept) == ([{"mine": "first"}], [{"mine": "second"}])
    assert called == ["second"]


def test_every_type_a_hook_receives_is_exported_from_worker() -> None:
    received: set[Any] = set()
    for name in (
        "host_started",
        "receive_limit",
        "after_receive",
        "before_invocation",
        "after_invocation",
        "on_interrupt",
        "retry_delay",
        "after_completion",
    ):
        received |= set(typing.get_type_hints(getattr(Middleware, name)).values())
    # And what they hold: an invocation's deliveries, a finished message's parts.
    reached = {Invocation, Delivery, Finished}
    for holder in (Delivery, Finished):
        received |= set(typing.get_type_hints(holder).values())
    received |= set(typing.get_type_hints(Invocation).values())
    types: set[type] = set()
    for hint in received | reached:
        for found in (hint, *typing.get_args(hint)):
            if isinstance(found, type) and found.__module__.startswith("worker"):
                types.add(found)
    assert {Invocation, Delivery, Finished, FunctionSpec, FunctionOptions, Result, Fate, QueueMessage} <= types
    assert sorted(t.__name__ for t in types if getattr(worker, t.__name__, None) is not t) == []
    assert [f.name for f in fields(Finished)] == [
        "function",
        "invocation_id",
        "backend",
        "queue",
        "raw",
        "lease",
        "options",
        "log",
    ]


class OldStyle(Middleware):
    """A middleware as one was written before the invocation was frozen: the older names, still working."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}
        self.warned: list[str] = []

    def receive_limit(self, function: FunctionSpec, config: FunctionOptions, running: int, room: int) -> int:
        return room

    def after_invocation(self, invocation: Invocation, result: Result) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.seen["max_dequeue_count"] = invocation.config.max_dequeue_count
            self.seen["job_tags"] = list(invocation.job_tags)
            self.seen["binding_data"] = dict(invocation.binding_data)
        self.warned += [str(w.message) for w in caught if w.category is DeprecationWarning]

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.seen["visibility_timeout"] = item.config.visibility_timeout
        self.warned += [str(w.message) for w in caught if w.category is DeprecationWarning]


async def test_a_middleware_written_against_the_older_names_still_runs_and_is_told_they_are_deprecated(
    tmp_path: Path,
) -> None:
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1, max_dequeue_count=4, visibility_timeout=7)
    queue = open_backend(None, tmp_path)
    await queue.create_queue("older")
    await queue.put("older", encode("x", "base64"))
    old = OldStyle()
    app = WorkerApp()
    app.add_middleware(old)

    @app.queue_trigger(arg_name="msg", queue_name="older")
    def handle(msg: QueueMessage) -> None:
        """Nothing: the middleware is what is looked at."""

    async with running(app, config) as host:
        await apoll(lambda: _true("visibility_timeout" in old.seen), 30, what="the message completed")
        assert host.metrics.get("succeeded") == 1
    await queue.close()
    assert old.seen == {"max_dequeue_count": 4, "job_tags": [], "binding_data": {}, "visibility_timeout": 7}
    assert [w.split(" is deprecated")[0] for w in old.warned] == [
        "Invocation.config",
        "Invocation.job_tags",
        "Invocation.binding_data",
        "Finished.config",
    ]


def test_done_is_still_importable_as_the_former_name_of_fate() -> None:
    with pytest.warns(DeprecationWarning, match="worker.Done is deprecated; use worker.Fate"):
        from worker import Done
    assert Done is Fate
    with pytest.warns(DeprecationWarning):
        assert worker.Done.POISONED is Fate.POISONED  # asked for again, it warns again


async def _true(value: bool) -> bool | None:
    return value or None


class Tenants(Middleware):
    """Reads a function option of its own, as Spark's middleware reads ``spark=True``."""

    function_options = {"tenant": "tenant='name': the tenant whose work the function does"}

    def __init__(self) -> None:
        self.tenants: dict[str, str] = {}

    def host_started(self, functions: Sequence[FunctionSpec]) -> None:
        self.tenants = {f.name: f.extra("tenant") for f in functions if f.extra("tenant") is not None}


def test_an_option_nothing_reads_is_refused_at_start_by_name_with_every_other_problem(tmp_path: Path) -> None:
    app = WorkerApp()
    app.add_middleware(Tenants())

    @app.queue_trigger(arg_name="msg", queue_name="aaa", tenant="acme", spark=True)
    def declared(msg: QueueMessage) -> None:
        """Every option read by someone: Tenants, Spark's middleware."""

    @app.queue_trigger(arg_name="msg", queue_name="bbb", sparkk=True, connection="Missing")
    def misspelt(msg: QueueMessage) -> None:
        """An option nobody reads, and a connection that resolves to nothing."""

    config = HostConfig(base_dir=tmp_path)
    found = preflight.problems(app, config, environ={})
    assert [line for line in found if "option" in line] == [
        "function misspelt: option 'sparkk' is not one the host or its middleware reads (they read: "
        "batching_window, channel, checkpoints, spark, tenant)"
    ]
    assert any("Missing" in line for line in found)  # listed together
    with pytest.raises(StartupRefused) as refused:
        Host(app, config)
    assert refused.value.problems == [line for line in found if "option" in line]


async def test_a_middleware_reads_its_own_function_options_and_old_keywords_still_work(tmp_path: Path) -> None:
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.1)
    tenants = Tenants()
    app = WorkerApp()
    app.add_middleware(tenants)

    @app.queue_trigger(arg_name="msg", queue_name="tenants", tenant="acme", checkpoints=True)
    def handle(msg: QueueMessage) -> None:
        """Nothing to do."""

    [spec] = app.functions
    with pytest.warns(DeprecationWarning, match="FunctionSpec.checkpoints"):
        assert spec.checkpoints is True  # type: ignore[attr-defined]
    with pytest.warns(DeprecationWarning, match="FunctionSpec.spark"):
        assert spec.spark is False  # type: ignore[attr-defined]
    async with running(app, config):
        await apoll(lambda: _true(bool(tenants.tenants)), 30, what="the host started")
    assert tenants.tenants == {"handle": "acme"}


async def test_the_worked_example_of_docs_middleware_md_runs_as_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "middleware.md").read_text()
    [example, *_] = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "middleware_example"}
    exec(compile(example, "docs/middleware.md", "exec"), namespace)  # noqa: S102 -- the page's own example
    app: WorkerApp = namespace["app"]
    [tenants] = app.middleware
    queue = open_backend(None, tmp_path)
    await queue.create_queue("orders")
    await queue.put("orders", encode("order 1", "base64"))
    async with running(app, HostConfig(base_dir=tmp_path, max_polling_interval=0.1)) as host:
        await apoll(lambda: _true(host.metrics.get("succeeded") == 1), 30, what="the order handled")
    await queue.close()
    assert "acme b'order 1'" in capsys.readouterr().out
    assert set(tenants.slowest) == {"handle"}  # type: ignore[attr-defined]


class Gate(Middleware):
    """Holds back the receives of the functions given ``gated=True`` until it opens, as Spark's middleware holds back
    its functions' until the session is ready."""

    function_options = {"gated": "gated=True: received only once the gate opens"}

    def __init__(self) -> None:
        self.open = False
        self.asked: Counter[str] = Counter()

    def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
        self.asked[function.name] += 1
        return room if self.open or not function.extra("gated") else 0

    def opened(self) -> None:
        self.open = True
        self.wake_listeners()


async def test_a_listener_held_back_receives_as_soon_as_its_middleware_wakes_the_listeners(tmp_path: Path) -> None:
    """A listener held back asks receive_limit again when an invocation completes; once the other function's
    message is done nothing completes any more, so only ``wake_listeners`` (called from another thread, as a session
    made in the background calls it) lets the held function receive, and at once, not after a polling interval."""
    config = HostConfig(base_dir=tmp_path, max_polling_interval=60)
    queue = open_backend(None, tmp_path)
    for name in ("held", "free"):
        await queue.create_queue(name)
        await queue.put(name, encode(name, "base64"))
    gate = Gate()
    app = WorkerApp()
    app.add_middleware(gate)
    handled: list[str] = []

    @app.queue_trigger(arg_name="msg", queue_name="held", gated=True)
    def held(msg: QueueMessage) -> None:
        handled.append("held")

    @app.queue_trigger(arg_name="msg", queue_name="free")
    def free(msg: QueueMessage) -> None:
        handled.append("free")

    async with running(app, config) as host:
        await apoll(lambda: _true(host.metrics.get("succeeded", "free") == 1), 30, what="the message not held back")
        assert gate.asked["held"] >= 1 and host.metrics.get("received", "held") == 0
        opened = time.monotonic()
        await asyncio.to_thread(gate.opened)
        await apoll(lambda: _true(host.metrics.get("succeeded", "held") == 1), 10, what="the held message")
        woken_within = time.monotonic() - opened
    await queue.close()
    assert handled == ["free", "held"]
    assert woken_within < 5, woken_within

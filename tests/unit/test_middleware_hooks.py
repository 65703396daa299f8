"""The middleware hooks: found by name, each documented, each combined as the chain's table says, each guarded."""

from __future__ import annotations

import inspect
import re
from collections import Counter
from pathlib import Path

import pytest

import worker.middleware
from tests.support import captured_logs
from worker import Middleware
from worker.middleware import COMBINE, HOOKS, Chain
from worker.model import FunctionSpec
from worker.settings.config import FunctionOptions, HostConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "middleware.md"


def _documented() -> dict[str, list[str]]:
    """The hooks of the page's "Hooks" table, each with the arguments its row names."""
    section = PAGE.read_text(encoding="utf-8").split("\n## Hooks\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)\(([^)]*)\)", section, flags=re.MULTILINE)
    return {name: [arg.strip() for arg in args.split(",") if arg.strip()] for name, args in rows}


def test_every_hook_of_middleware_has_its_row_in_docs_middleware_md_and_every_row_is_a_hook() -> None:
    documented = _documented()
    assert sorted(documented) == sorted(HOOKS)
    for name in HOOKS:
        parameters = list(inspect.signature(getattr(Middleware, name)).parameters)[1:]
        assert documented[name] == parameters, f"{name}: the page's row names other arguments"
        assert inspect.getdoc(getattr(Middleware, name)), f"{name} has no docstring"
    assert set(COMBINE) <= set(HOOKS)


class Announcing(Middleware):
    """A middleware base with a hook that Middleware does not have, as a new hook is before it is Middleware's."""

    defaults_called = 0

    def shard_moved(self, shard: str) -> None:
        """A shard moved to this worker (the default does nothing but count that it ran)."""
        Announcing.defaults_called += 1


class Hears(Announcing):
    def __init__(self, name: str, heard: list[str]) -> None:
        self.name = name
        self.heard = heard

    def shard_moved(self, shard: str) -> None:
        self.heard.append(f"{self.name} {shard}")


class Deaf(Announcing):
    def shard_moved(self, shard: str) -> None:
        raise RuntimeError("cannot hear")


def test_a_hook_declared_on_a_subclass_alone_is_dispatched_by_name_skipping_middleware_that_do_not_override_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heard: list[str] = []
    failed: Counter[str] = Counter()
    Announcing.defaults_called = 0
    chain = Chain(
        [Hears("a", heard), Announcing(), Middleware(), Deaf(), Hears("b", heard)], failed=lambda name: failed.update([name])
    )
    with captured_logs(monkeypatch, worker.middleware) as logs:
        chain.hook("shard_moved")("s1")
        chain.hook("shard_moved")("s2")
    assert heard == ["a s1", "b s1", "a s2", "b s2"]
    assert Announcing.defaults_called == 0  # the middleware that does not override it is never called
    assert failed == Counter({"Deaf": 2})  # counted each time, logged once (then once a minute)
    failures = [line for line in logs if line["event"].startswith("middleware hook failed")]
    assert [(line["middleware"], line["hook"]) for line in failures] == [("Deaf", "shard_moved")]
    with pytest.raises(AttributeError):
        chain.hook("shard_moveed")


def test_each_hook_combines_its_answers_as_the_table_says_and_a_raising_one_is_gone_around() -> None:
    order: list[str] = []

    class Layer(Middleware):
        def __init__(self, name: str, limit: int, delay: float) -> None:
            self.name, self.limit, self.delay = name, limit, delay

        def not_ready(self) -> list[str]:
            return [f"{self.name} not ready"]

        def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
            order.append(f"{self.name} sees {room}")
            return self.limit

        def retry_delay(self, item: object, delay: float) -> float:
            order.append(f"{self.name} after {delay}")
            return self.delay

        def host_stopped(self) -> None:
            order.append(f"{self.name} stopped")

    class Broken(Middleware):
        def not_ready(self) -> list[str]:
            raise RuntimeError("no answer")

        def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
            raise RuntimeError("no answer")

        def retry_delay(self, item: object, delay: float) -> float:
            raise RuntimeError("no answer")

    failed: Counter[str] = Counter()
    chain = Chain([Layer("a", 5, 2.0), Broken(), Layer("b", 7, 3.0)], failed=lambda name: failed.update([name]))
    spec = FunctionSpec("f", lambda msg: None, "msg", "queue", None, False)
    assert chain.receive_limit(spec, HostConfig(), 0, 10) == 5  # the lowest, none below 0
    assert chain.retry_delay(object(), 30.0) == 3.0  # each layer's replaces the one before
    assert chain.not_ready() == ["a not ready", f"{Broken.not_ready.__qualname__} failed", "b not ready"]
    chain.host_stopped()
    assert order == ["a sees 10", "b sees 5", "a after 30.0", "b after 2.0", "b stopped", "a stopped"]
    assert failed == Counter({"Broken": 3})


async def test_invocation_hooks_await_async_ones_thread_the_result_in_reverse_and_let_a_raise_through() -> None:
    order: list[str] = []

    class Sync(Middleware):
        def before_invocation(self, invocation: object) -> None:
            order.append("sync before")

        def after_invocation(self, invocation: object, result: str) -> None:
            order.append(f"sync after {result}")  # returns None: keeps it

    class Async(Middleware):
        async def before_invocation(self, invocation: object) -> None:
            order.append("async before")

        async def after_invocation(self, invocation: object, result: str) -> str:
            order.append(f"async after {result}")
            return "replaced"

    chain = Chain([Sync(), Async()])
    await chain.before_invocation(object())
    assert await chain.after_invocation(object(), "ran") == "replaced"  # a Result, as far as the chain cares
    assert order == ["sync before", "async before", "async after ran", "sync after replaced"]

    class Refuses(Middleware):
        def before_invocation(self, invocation: object) -> None:
            raise ValueError("fails the attempt")

    with pytest.raises(ValueError, match="fails the attempt"):
        await Chain([Refuses()]).before_invocation(object())

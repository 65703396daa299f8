"""Per-function settings, retry policies and the pieces that enforce them, as small objects without I/O."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from worker import Middleware, WorkerApp
from worker.backends.queues import RawMessage
from worker.middleware import Chain
from worker.middleware.concurrency import ConcurrencyLimit
from worker.model import Fate, FunctionSpec, Outcome, Result
from worker.runtime import verdict
from worker.runtime.listener import Capacity
from worker.settings.config import ConfigError, FunctionOptions, HostConfig, load_config, parse_duration
from worker.settings.retry import RetryPolicy, parse_retry


def _load(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> HostConfig:
    path = tmp_path / "host.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, environ=environ or {})


def test_a_function_section_overrides_the_global_settings_for_that_function_only(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """
extensions:
  queues:
    maxDequeueCount: 3
    batchSize: 16
functions:
  resize:
    maxDequeueCount: 4
    batchSize: 2
    maxConcurrency: 2
    functionTimeout: 00:00:30
    retry: {strategy: exponentialBackoff, minimumInterval: 1s, maximumInterval: 00:00:04}
""",
        {"WORKER__functions__resize__leaseDuration": "2m", "WORKER__functions__other__maxPollingInterval": "5s"},
    )
    resize = config.for_function("resize")
    assert (
        resize.max_dequeue_count,
        resize.batch_size,
        resize.max_concurrency,
        resize.function_timeout,
        resize.lease_duration,
    ) == (4, 2, 2, 30.0, 120.0)
    assert resize.retry == RetryPolicy("exponentialBackoff", 1.0, 4.0)
    assert resize.new_batch_threshold == 1 * (os.cpu_count() or 1)  # derived from its own batchSize
    assert config.for_function("other").max_polling_interval == 5.0
    # A function with no section runs with the global values (a FunctionOptions of them, not the whole HostConfig).
    unnamed = config.for_function("unnamed")
    assert all(getattr(unnamed, name) == getattr(config, name) for name in FunctionOptions.__slots__)
    assert unnamed.max_dequeue_count == 3 and unnamed.max_concurrency is None
    assert not hasattr(unnamed, "http_port") and not hasattr(unnamed, "spark_master")


def test_retry_precedence_host_yaml_function_then_code_then_global(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """
retry: {strategy: fixedDelay, delayInterval: 00:00:09}
functions:
  pinned:
    retry: {strategy: fixedDelay, delayInterval: 1s}
""",
    )
    code = RetryPolicy("fixedDelay", 5.0, 5.0)
    assert config.for_function("pinned", code).retry == RetryPolicy("fixedDelay", 1.0, 1.0)
    assert config.for_function("coded", code).retry == code
    assert config.for_function("plain").retry == RetryPolicy("fixedDelay", 9.0, 9.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("functions:\n  a:\n    bogus: 1\n", "host.yaml:3: functions.a.bogus: unknown key (a function may set"),
        ("functions:\n  a:\n    batchSize: 40\n", "host.yaml:3: functions.a.batchSize: must be between 1 and 32, got 40"),
        ("functions:\n  a:\n    maxConcurrency: 0\n", "host.yaml:3: functions.a.maxConcurrency: must be between 1"),
        ("functions:\n  a: 3\n", "host.yaml:2: functions.a: expected a mapping of settings, got 3"),
        (
            "functions:\n  a:\n    retry: {strategy: linear}\n",
            "host.yaml:3: functions.a.retry: strategy must be fixedDelay or exponentialBackoff, got 'linear'",
        ),
        ("retry: {strategy: fixedDelay}\n", "host.yaml:1: retry: fixedDelay needs delayInterval"),
        (
            "retry: {strategy: exponentialBackoff, minimumInterval: 5s, maximumInterval: 1s}\n",
            "retry: maximumInterval (1s) is shorter than minimumInterval (5s)",
        ),
        (
            "retry: {strategy: fixedDelay, delayInterval: 1s, minimumInterval: 1s}\n",
            "retry: fixedDelay takes delayInterval, maxRetryCount; unknown: minimumInterval",
        ),
    ],
)
def test_bad_function_sections_and_retry_policies_are_refused_with_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, text)
    assert expected in str(refused.value).replace(str(tmp_path) + "/", "")


def test_host_json_functions_list_is_still_accepted_and_ignored(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text('{"version": "2.0", "functions": ["a", "b"]}', encoding="utf-8")
    config = load_config(path, environ={})
    assert config.ignored_keys == ("functions",) and not config.functions


def test_host_json_retry_is_not_applied_as_in_functions_and_host_yaml_retry_is(tmp_path: Path) -> None:
    policy = {"strategy": "fixedDelay", "delayInterval": "00:00:05"}
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"version": "2.0", "retry": policy}), encoding="utf-8")
    config = load_config(path, environ={"AzureFunctionsJobHost__retry__delayInterval": "00:00:09"})
    assert config.ignored_keys == ("retry",) and config.retry is None
    config = _load(tmp_path, yaml.safe_dump({"retry": policy}))
    assert config.ignored_keys == () and config.retry == RetryPolicy("fixedDelay", 5.0, 5.0)


def test_exponential_backoff_doubles_up_to_the_maximum_and_jitters_within_twenty_percent() -> None:
    policy = parse_retry(
        {
            "strategy": "exponential_backoff",
            "minimum_interval": "00:00:01",
            "maximum_interval": "00:00:04",
            "max_retry_count": "3",
        },
        parse_duration,
    )
    exact = [policy.delay(n, lambda _low, _high: 1.0) for n in range(1, 6)]
    assert exact == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert policy.delay(3, lambda low, _high: low) == pytest.approx(3.2)
    assert policy.delay(3, lambda _low, high: high) == pytest.approx(4.8)
    assert all(0.8 <= policy.delay(1) <= 1.2 for _ in range(200))
    fixed = parse_retry({"strategy": "fixedDelay", "delayInterval": "00:00:03"}, parse_duration)
    assert [fixed.delay(n, lambda _low, _high: 1.0) for n in (1, 7)] == [3.0, 3.0]


def test_app_retry_takes_function_apps_arguments() -> None:
    app = WorkerApp()

    @app.retry(strategy="fixed_delay", max_retry_count="2", delay_interval="00:00:02")
    @app.queue_trigger(arg_name="msg", queue_name="retried")
    def retried(msg: object) -> None: ...

    [spec] = app.functions
    assert spec.retry == RetryPolicy("fixedDelay", 2.0, 2.0)

    @app.retry(strategy="exponential_backoff", max_retry_count="2", minimum_interval="00:00:01")
    @app.queue_trigger(arg_name="msg", queue_name="unbounded")
    def unbounded(msg: object) -> None: ...

    [problem] = app.problems
    assert problem.startswith("function unbounded: retry: ") and "exponentialBackoff needs maximumInterval" in problem
    assert [s.name for s in app.functions] == ["retried"]


def _spec(many: bool = False) -> FunctionSpec:
    return FunctionSpec("f", lambda msg: None, "msg", "queue", None, False, many=many)


def test_concurrency_limit_gives_room_up_to_the_cap_and_a_batch_counts_as_one() -> None:
    limit = ConcurrencyLimit()
    capped = HostConfig(max_concurrency=2)
    assert limit.receive_limit(_spec(), capped, running=0, room=16) == 2
    assert limit.receive_limit(_spec(), capped, running=1, room=16) == 1
    assert limit.receive_limit(_spec(), capped, running=2, room=16) == 0
    assert limit.receive_limit(_spec(many=True), capped, running=1, room=16) == 16
    assert limit.receive_limit(_spec(many=True), capped, running=2, room=16) == 0
    assert limit.receive_limit(_spec(), HostConfig(), running=500, room=16) == 16


async def test_capacity_counts_receives_in_progress_as_running_and_waits_for_the_allowed_room() -> None:
    capacity = Capacity(limit=64)
    allowed = lambda: max(0, 2 - capacity.running("f", batches=False))  # noqa: E731 -- a cap of 2, as maxConcurrency
    assert await capacity.reserve("f", threshold=100, want=16, allowed=allowed) == 2
    assert capacity.running("f", batches=False) == 2 and capacity.running("f", batches=True) == 1
    waiting = asyncio.ensure_future(capacity.reserve("f", threshold=100, want=16, allowed=allowed))
    await asyncio.sleep(0)
    assert not waiting.done()  # the first receive's room counts although nothing is dispatched yet
    capacity.received("f", 2)
    capacity.started("f")
    capacity.started("f")
    capacity.give_back("f", 1, invocations=1)
    assert await asyncio.wait_for(waiting, 1) == 1
    assert (capacity.total, capacity.in_flight("f"), capacity.running("f", batches=False)) == (2, 2, 2)


async def test_a_long_poll_holding_the_room_is_asked_to_give_it_back_when_another_function_has_none() -> None:
    capacity = Capacity(limit=4)
    assert await capacity.reserve("idle", threshold=100, want=4) == 4
    preempt = capacity.long_poll("idle")
    starving = asyncio.ensure_future(capacity.reserve("busy", threshold=100, want=4))
    await asyncio.sleep(0)
    assert preempt.is_set() and not starving.done()
    capacity.long_poll_done(preempt)
    capacity.received("idle", 4)
    capacity.give_back("idle", 4)
    assert await asyncio.wait_for(starving, 1) == 4


def test_middleware_chain_runs_before_hooks_in_order_and_after_hooks_in_reverse() -> None:
    order: list[str] = []

    class Named(Middleware):
        def __init__(self, name: str) -> None:
            self.name = name

        def receive_limit(self, function: FunctionSpec, config: HostConfig, running: int, room: int) -> int:
            order.append(f"limit {self.name}")
            return room - 1

        def host_started(self, functions: object) -> None:
            order.append(f"started {self.name}")

        def host_stopped(self) -> None:
            order.append(f"stopped {self.name}")

    class Broken(Middleware):
        def host_started(self, functions: object) -> None:
            raise RuntimeError("a hook that fails is logged, not fatal")

    chain = Chain([Named("a"), Broken(), Named("b")])
    chain.host_started([])
    assert chain.receive_limit(_spec(), HostConfig(), 0, 10) == 8
    chain.host_stopped()
    assert order == ["started a", "started b", "limit a", "limit b", "stopped b", "stopped a"]


def test_a_message_dequeued_more_than_max_dequeue_count_is_poison_before_it_runs() -> None:
    def raw(count: int) -> RawMessage:
        return RawMessage(
            id="m",
            content="",
            dequeue_count=count,
            insertion_time=datetime.now(UTC),
            expiration_time=None,
            time_next_visible=None,
            pop_receipt="r",
        )

    assert verdict.admitted(raw(3), 3) is None
    assert verdict.admitted(raw(4), 3) == Result(Outcome.POISON, "dequeue count 4 is over maxDequeueCount 3")


@pytest.mark.parametrize(
    ("queue", "dequeue_count", "outcome", "expected"),
    [
        ("q", 1, Outcome.SUCCEEDED, Fate.DELETED),
        ("q", 5, Outcome.SUCCEEDED, Fate.DELETED),
        ("q", 5, Outcome.RELEASE, Fate.RELEASED),
        ("q", 1, Outcome.FAILED, Fate.RETRIED),
        ("q", 3, Outcome.FAILED, Fate.POISONED),  # the last attempt
        ("q", 1, Outcome.POISON, Fate.POISONED),  # asked for, or no attempt could succeed
        ("q-poison", 3, Outcome.FAILED, Fate.LEFT),  # a poison queue has no poison queue
        ("q-poison", 1, Outcome.POISON, Fate.LEFT),
        ("q-poison", 1, Outcome.SUCCEEDED, Fate.DELETED),
    ],
)
def test_one_place_says_what_an_attempt_comes_to(queue: str, dequeue_count: int, outcome: Outcome, expected: Fate) -> None:
    assert verdict.fate(queue, dequeue_count, 3, Result(outcome, "why")) is expected

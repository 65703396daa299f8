"""The settings one function may have of its own, in one table: each is one field of :class:`PerFunction`.

A field, made with :func:`per_function`, is the whole setting: its Python type and default, its key in a
``functions.<name>`` section and its global key, how it is read and checked, the Azure Functions setting it
mirrors and what it means. Everything else follows from the fields: ``HostConfig`` (the global values) and
``FunctionOptions`` (one function's) both are a :class:`PerFunction`; the loader reads the global keys and the
``functions.<name>`` keys against these entries; the host's "function loaded" line names those that differ from
the global values; the settings reference (``docs/hooks/reference.py``) lists them. Adding a setting is one field
here, plus the code that uses it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, TypeVar

from worker.settings.retry import RetryPolicy, parse_retry
from worker.settings.schema import WEEK, Between, Setting, no_check, one_of, parse_duration, parse_integer, parse_text

__all__ = [
    "FUNCTION_SETTINGS",
    "IN_SECTION",
    "Computed",
    "FunctionSetting",
    "PerFunction",
    "default_threshold",
    "per_function",
]

P = TypeVar("P")
D = TypeVar("D")


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionSetting(Setting):
    """One per-function setting: the :class:`Setting` that reads it (``attr`` is its field), and its keys and words.

    ``key`` is its name in a ``functions.<name>`` section, None where only the global key sets it (a SAM
    template may still set it for one function); ``global_key`` is its host.yaml key for every function, None for a
    setting of single functions only. ``functions`` is the Azure Functions setting it mirrors ("" where there is
    none), ``meaning`` what it does, as the settings reference gives them; ``default_text`` the default as the
    reference words it where it is computed at start.
    """

    key: str | None
    global_key: str | None
    functions: str
    meaning: str
    default_text: str = ""


@dataclass(frozen=True, slots=True)
class Computed(Generic[P]):
    """A default computed when the settings are made (from the machine), and how the reference words it."""

    factory: Callable[[], P]
    text: str


#: Where a field's metadata holds its entry.
_ENTRY = "function setting"


def per_function(
    key: str | None,
    global_key: str | None,
    parse: Callable[[Any], P],
    check: Callable[[Any], str | None] = no_check,
    *,
    default: D | Computed[P],
    functions: str,
    meaning: str,
) -> P | D:
    """A field of :class:`PerFunction` that carries its :class:`FunctionSetting` (made once the field's name is
    known). Typed as what its parser and its default give, so that the field's annotation must hold both."""
    entry = partial(
        FunctionSetting,
        parse=parse,
        check=check,
        key=key,
        global_key=global_key,
        functions=functions,
        meaning=meaning,
        default_text=default.text if isinstance(default, Computed) else "",
    )
    if isinstance(default, Computed):
        return field(default_factory=default.factory, metadata={_ENTRY: entry})
    return field(default=default, metadata={_ENTRY: entry})


def _optional_duration(value: Any) -> float | None:
    """functionTimeout: -1 (or null) means no limit, as in host.json."""
    if value is None or value == -1 or value == "-1":
        return None
    return parse_duration(value)


def _retry_policy(value: Any) -> RetryPolicy:
    return parse_retry(value, parse_duration)


def default_threshold(batch_size: int) -> int:
    """newBatchThreshold's default, as in Functions: half the batch size times the processor count."""
    return batch_size // 2 * (os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class PerFunction:
    """The settings a function runs with, each with its default; Azure Functions' where it has one.

    Durations are seconds. ``HostConfig`` holds the global values and ``FunctionOptions`` one function's.
    """

    #: None: no limit (-1 in host.json).
    function_timeout: float | None = per_function(
        "functionTimeout",
        "functionTimeout",
        _optional_duration,
        Between(1, 10 * WEEK, "s"),
        default=30 * 60.0,
        functions="`functionTimeout`",
        meaning="longest a handler may run; past it the invocation fails and its Spark jobs are cancelled; `-1`: no limit",
    )
    batch_size: int = per_function(
        "batchSize",
        "extensions.queues.batchSize",
        parse_integer,
        Between(1, 32),
        default=16,
        functions="`extensions.queues.batchSize`",
        meaning="messages per receive, per function; at most the backend's limit (OCI Queue: 20, SQS: 10)",
    )
    new_batch_threshold: int = per_function(
        "newBatchThreshold",
        "extensions.queues.newBatchThreshold",
        parse_integer,
        Between(0, 10_000),
        default=Computed(lambda: default_threshold(16), "batchSize / 2 × processors"),
        functions="`extensions.queues.newBatchThreshold`",
        meaning="fetch again when a function's in-flight count falls to this",
    )
    max_polling_interval: float = per_function(
        "maxPollingInterval",
        "extensions.queues.maxPollingInterval",
        parse_duration,
        Between(0.1, 86400, "s"),
        default=60.0,
        functions="`extensions.queues.maxPollingInterval`",
        meaning="longest back-off on an empty queue (backends that cannot long-poll)",
    )
    visibility_timeout: float = per_function(
        "visibilityTimeout",
        "extensions.queues.visibilityTimeout",
        parse_duration,
        Between(0, WEEK, "s"),
        default=0.0,
        functions="`extensions.queues.visibilityTimeout`",
        meaning="delay before a failed message is visible again",
    )
    max_dequeue_count: int = per_function(
        "maxDequeueCount",
        "extensions.queues.maxDequeueCount",
        parse_integer,
        Between(1, 10_000),
        default=5,
        functions="`extensions.queues.maxDequeueCount`",
        meaning="attempts before a message goes to `<queue>-poison`",
    )
    #: Not in a ``functions:`` section: a SAM template's function sets it (SQS bodies are stored as they are).
    message_encoding: str = per_function(
        None,
        "extensions.queues.messageEncoding",
        parse_text,
        one_of("base64", "none"),
        default="base64",
        functions="`extensions.queues.messageEncoding`",
        meaning="how bodies are stored",
    )
    lease_duration: float = per_function(
        "leaseDuration",
        "worker.leaseDuration",
        parse_duration,
        Between(1, WEEK, "s"),
        default=600.0,
        functions="none: Functions' lease is a fixed 10 minutes",
        meaning="lease taken at receive and renewed while the handler runs",
    )
    #: None: a failed message waits visibilityTimeout.
    retry: RetryPolicy | None = per_function(
        "retry",
        "retry",
        _retry_policy,
        default=None,
        functions="host.json's `retry` shape (host.json's own is not applied to queue triggers, as in Functions)",
        meaning="delay before each retry of a failed message: `{strategy: fixedDelay, delayInterval}` or "
        "`{strategy: exponentialBackoff, minimumInterval, maximumInterval}` (see [Retry](../apps.md#retry))",
    )
    #: None: bounded by maxInFlight only.
    max_concurrency: int | None = per_function(
        "maxConcurrency",
        None,
        parse_integer,
        Between(1, 100_000),
        default=None,
        functions="none: on Functions a queue trigger's concurrency is `batchSize` + `newBatchThreshold`",
        meaning="invocations of that function at once (per function only)",
    )


#: The table: every per-function setting, in :class:`PerFunction`'s order.
FUNCTION_SETTINGS: tuple[FunctionSetting, ...] = tuple(
    item.metadata[_ENTRY](attr=item.name) for item in dataclasses.fields(PerFunction)
)

#: The settings a ``functions.<name>`` section may set, by their key there.
IN_SECTION: dict[str, FunctionSetting] = {entry.key: entry for entry in FUNCTION_SETTINGS if entry.key is not None}

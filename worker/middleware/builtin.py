"""The host's own middleware, in the order it runs, and the loading of middleware named in host.yaml."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from worker.backends.storage import Storage
from worker.middleware import Middleware, spark_settings
from worker.middleware.bindings import Bindings
from worker.middleware.concurrency import ConcurrencyLimit
from worker.middleware.counting import Counting
from worker.middleware.logs import InvocationLogs
from worker.middleware.retry import RetryDelay
from worker.model import FunctionSpec
from worker.observability.metrics import Metrics
from worker.settings import sections
from worker.settings.config import OWN_SECTIONS, HostConfig
from worker.settings.sections import SectionSchema

if TYPE_CHECKING:
    from worker.observability.otel import Telemetry


#: The host's own middleware classes but tracing's (which declares no function option, and whose module needs the
#: ``otel`` extra) and Spark's (whose module is imported only where Spark is asked for: its declarations are in
#: :mod:`.spark_settings`).
STANDARD: tuple[type[Middleware], ...] = (Counting, InvocationLogs, Bindings, ConcurrencyLimit, RetryDelay)


def _declaring(given: Sequence[Middleware]) -> list[type[Middleware] | Middleware]:
    """What declares the options and sections read: the host's own middleware classes, then ``given``."""
    return [*STANDARD, *given]


def function_options(given: Sequence[Middleware]) -> dict[str, str]:
    """The function options the host's own middleware and ``given`` (the app's and host.yaml's) declare they read."""
    declared: dict[str, str] = dict(spark_settings.FUNCTION_OPTIONS)
    for middleware in _declaring(given):
        declared.update(middleware.function_options)
    return declared


def settings_sections(given: Sequence[Middleware]) -> list[SectionSchema]:
    """The settings sections the host's own middleware and ``given`` declare they read."""
    schemas = [schema for middleware in _declaring(given) for schema in middleware.settings_sections]
    return schemas if spark_settings.SECTION in schemas else [*schemas, spark_settings.SECTION]


def gives_spark(given: Sequence[Middleware]) -> bool:
    """Whether ``given`` holds a Spark middleware; none can unless its module was imported, so this imports none."""
    module = sys.modules.get("worker.middleware.spark")
    return module is not None and any(isinstance(m, module.Spark) for m in given)


def section_problems(config: HostConfig, given: Sequence[Middleware]) -> list[str]:
    """A line for each wrong value in a section the middleware read (``spark.master``), and for each top-level
    section nothing reads, by name, for the host to list with its other start problems."""
    return sections.problems(config.sections, settings_sections(given), OWN_SECTIONS)


def standard(
    config: HostConfig,
    metrics: Metrics,
    storage: Storage,
    functions: Sequence[FunctionSpec],
    given: Sequence[Middleware] = (),
    telemetry: Telemetry | None = None,
) -> list[Middleware]:
    """Tracing first when on (its span is current for everything after it), counting (it sees every final result),
    then logs, bindings, the concurrency cap, the retry delay, Spark.

    Bindings only where one of ``functions`` (the app's) has an input or output binding: its two hooks would
    otherwise run for every message to find nothing to do.

    Spark's middleware only where Spark is asked for (:func:`.spark_settings.asked_for`: a function's
    ``spark=True``, a ``spark:`` section, or an app that imports :mod:`worker.spark`), so that an app without Spark
    neither lists it nor imports its module. It is made from host.yaml's ``spark:`` section, which it declares and
    reads (its session is made only when a handler asks for one) unless ``given`` (the app's and host.yaml's
    middleware) already has one: a caller that keeps one session across host runs hands it in that way.
    ``telemetry``: the OpenTelemetry SDK the ``OTEL_*`` variables asked for (:mod:`worker.observability.tracing`),
    whose module is imported only then.
    """
    found: list[Middleware] = []
    if telemetry is not None:
        from worker.middleware.tracing import Tracing

        found.append(Tracing(telemetry))
    found.append(Counting(metrics))
    if config.invocation_logs:
        found.append(InvocationLogs())
    if any(function.inputs or function.outputs for function in functions):
        found.append(Bindings(storage, config.message_encoding))
    found += [ConcurrencyLimit(), RetryDelay()]
    given_spark = gives_spark(given)
    if not given_spark and spark_settings.asked_for(config, functions, given_spark):
        from worker.middleware.spark import Spark

        found.append(Spark.from_settings(spark_settings.from_config(config)))
    return found


def load(names: Sequence[str]) -> tuple[list[Middleware], list[str]]:
    """Middleware named ``module:attribute`` (a Middleware subclass, made with no arguments, or an instance).

    Returns what loaded and one problem line for each name that did not, so that the host can refuse them all at once.
    """
    loaded: list[Middleware] = []
    problems: list[str] = []
    for name in names:
        where = f"worker.middleware {name!r}"
        module_name, _, attr = name.partition(":")
        if not module_name or not attr:
            problems.append(f"{where}: expected module:attribute")
            continue
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{where}: cannot be loaded: {type(exc).__name__}: {exc}")
            continue
        if isinstance(target, type) and issubclass(target, Middleware):
            try:
                target = target()
            except Exception as exc:
                problems.append(f"{where}: cannot be made without arguments: {type(exc).__name__}: {exc}")
                continue
        if not isinstance(target, Middleware):
            problems.append(f"{where}: is not a worker.Middleware subclass or instance")
            continue
        loaded.append(target)
    return loaded, problems

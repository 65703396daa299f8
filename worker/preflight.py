"""What makes an app impossible to run, found before anything starts, every problem at once.

A host that starts with a function it cannot serve looks healthy while that
function's messages pile up, so everything that can be known at start is
checked here: every binding's connection resolves (as Functions resolves it)
to something this host can open, and every ``%setting%`` in a blob path is
set. Each problem is one line naming the function and the binding; the
caller refuses the app with all of them (``worker run`` exits 2).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

from worker import expressions
from worker.app import FunctionSpec, WorkerApp
from worker.blob_bindings import BlobInput, BlobOutput
from worker.config import HostConfig
from worker.connections import DEFAULT, ConnectionSettingError, Service
from worker.outputs import OutputBinding
from worker.queues import DEFAULT_SQLITE_PATH, SQLITE_PREFIX
from worker.queues.connection import ConnectionStringError, parse_connection_string
from worker.queues.sqlite import file_problem


class StartupRefused(ValueError):
    """The app cannot run as configured; ``problems`` has one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("the app cannot run:\n" + "\n".join(f"  {line}" for line in problems))


def _bindings(spec: FunctionSpec) -> Iterator[tuple[str, str | None, Service, str | None]]:
    """(where, connection, service, blob path) for the trigger and every binding of ``spec``."""
    yield f"function {spec.name}, trigger queueTrigger ({spec.arg_name})", spec.connection, "queue", None
    for binding in (*spec.inputs, *spec.outputs):
        if isinstance(binding, OutputBinding):
            yield f"function {spec.name}, output binding queue ({binding.arg_name})", binding.connection, "queue", None
        else:
            direction = "input" if isinstance(binding, BlobInput) else "output"
            assert isinstance(binding, (BlobInput, BlobOutput))
            where = f"function {spec.name}, {direction} binding blob ({binding.arg_name})"
            yield where, binding.connection, "blob", binding.path


def problems(app: WorkerApp, config: HostConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every reason the app's functions cannot run with ``config``; empty when all can."""
    environ = os.environ if environ is None else environ
    found: list[str] = []
    names = {spec.name for spec in app.functions}
    for name, section in config.functions.items():
        if name not in names:
            found.append(f"{section.where}: functions.{name}: the app has no function of that name "
                         f"(its functions: {', '.join(sorted(names))})")
    for spec in app.functions:
        for where, connection, service, path in _bindings(spec):
            if problem := connection_problem(config, connection, service):
                found.append(f"{where}: {problem}")
            if path is not None and (unset := unset_settings("path", path, environ)):
                found.append(f"{where}: {unset}")
    return found


def connection_problem(config: HostConfig, connection: str | None, service: Service) -> str | None:
    """Why ``connection`` cannot serve ``service`` ("queue" or "blob"), or None when it can.

    None as ``connection`` is a WorkerApp binding that names none (AzureWebJobsStorage, else the embedded queue).
    """
    try:
        value = config.resolve_connection(connection, service, embedded_default=connection is None).value
    except ConnectionSettingError as exc:
        return str(exc)
    if value is None or value.startswith(SQLITE_PREFIX):
        return file_problem(config.base_dir / (value[len(SQLITE_PREFIX):] if value else DEFAULT_SQLITE_PATH))
    try:
        parsed = parse_connection_string(value)
    except ConnectionStringError as exc:
        return f"connection {connection or DEFAULT}: {exc}"
    if (parsed.queue_endpoint if service == "queue" else parsed.blob_endpoint) is None:
        key = "QueueEndpoint" if service == "queue" else "BlobEndpoint"
        return f"connection {connection or DEFAULT} has no {key} (nor an AccountName to derive one from)"
    return None


def unset_settings(what: str, text: str, environ: Mapping[str, str]) -> str | None:
    """The problem with ``%SETTING%`` references in ``text`` (a queue name, a path) that are not set, or None."""
    missing = [name for name in expressions.setting_names(text) if name not in environ]
    if not missing:
        return None
    names = ", ".join(missing)
    plural = len(missing) > 1
    setting, verb = ("app settings", "are") if plural else ("app setting", "is")
    return f"the {what} {text!r} refers to the {setting} {names}, which {verb} not set"


def check(app: WorkerApp, config: HostConfig, more: list[str] | None = None) -> None:
    """Raise :class:`StartupRefused` listing every problem (and ``more`` found elsewhere), if there is any."""
    if found := [*(more or []), *problems(app, config)]:
        raise StartupRefused(found)

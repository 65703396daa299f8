"""What makes an app impossible to run, found before anything starts, every problem at once.

A host serving a function it cannot run looks healthy while that function's messages pile up.
So every binding's connection must resolve to something this host can open.
Every ``%setting%`` in a blob path must be set.
Each problem is one line naming function and binding; ``worker run`` then exits 2.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import NamedTuple

from worker.app import WorkerApp
from worker.backends.azure.connection import parse_connection_string
from worker.backends.embedded.files import Exposed, exposed
from worker.backends.embedded.queues import file_problem
from worker.backends.failures import ConnectionStringError
from worker.backends.queues import InvalidArgument
from worker.backends.registry import DEFAULT_SQLITE_PATH, SQLITE_PREFIX, backend_kind, private_paths
from worker.backends.registry import connection_problem as queue_connection_problem
from worker.bindings import expressions
from worker.bindings.blobs import BlobInput, BlobOutput
from worker.bindings.outputs import OutputBinding
from worker.middleware import builtin, spark_settings
from worker.model import FunctionSpec, StartupRefused
from worker.observability import tracing
from worker.runtime.host import unknown_options
from worker.runtime.poison import POISON_SUFFIX, is_poison_queue, poison_queue
from worker.settings.config import HostConfig
from worker.settings.connections import DEFAULT, ConnectionSettingError, MissingConnection, Service


class _Binding(NamedTuple):
    """The trigger or one binding of a function, as start-up checks see it."""

    where: str
    connection: str | None
    service: Service
    #: The queue's name (queue bindings) or the blob path (blob bindings).
    name: str
    trigger: bool = False
    #: The queue's channel (queue bindings on OCI Queue), if one is named.
    channel: str | None = None


def _bindings(spec: FunctionSpec) -> Iterator[_Binding]:
    """The trigger and every binding of ``spec``."""
    yield _Binding(
        f"function {spec.name}, trigger queueTrigger ({spec.arg_name})",
        spec.connection,
        "queue",
        spec.queue_name,
        trigger=True,
        channel=spec.extra("channel"),
    )
    for binding in (*spec.inputs, *spec.outputs):
        if isinstance(binding, OutputBinding):
            where = f"function {spec.name}, output binding queue ({binding.arg_name})"
            yield _Binding(where, binding.connection, "queue", binding.queue_name, channel=binding.channel)
        else:
            direction = "input" if isinstance(binding, BlobInput) else "output"
            assert isinstance(binding, (BlobInput, BlobOutput))
            where = f"function {spec.name}, {direction} binding blob ({binding.arg_name})"
            yield _Binding(where, binding.connection, "blob", binding.path)


def problems(app: WorkerApp, config: HostConfig, environ: Mapping[str, str] | None = None, looked_in: str = "") -> list[str]:
    """Every reason the app's functions cannot run with ``config``; empty when all can.

    Includes host.yaml's ``worker.middleware`` names that cannot be loaded, the problems of the settings sections
    middleware read (``spark:``), and an installed PySpark whose private parts the Spark middleware cannot find, so
    that the CLI lists them with the rest.
    ``looked_in``: see :func:`connection_problem`.
    """
    environ = os.environ if environ is None else environ
    loaded, found = builtin.load(config.middleware)
    given = [*app.middleware, *loaded]
    found += unknown_options(app, given) + builtin.section_problems(config, given)
    if spark_settings.asked_for(config, app.functions, builtin.gives_spark(given)):
        from worker.middleware import spark  # only where Spark is asked for: an app without it never imports it

        if spark_problem := spark.start_problem(app.functions, given, config):
            found.append(spark_problem)
    names = {spec.name for spec in app.functions}
    for name, section in config.functions.items():
        if name not in names:
            found.append(
                f"{section.where}: functions.{name}: the app has no function of that name "
                f"(its functions: {', '.join(sorted(names))})"
            )
    for spec in app.functions:
        for binding in _bindings(spec):
            if problem := connection_problem(config, binding.connection, binding.service, looked_in):
                found.append(f"{binding.where}: {problem}")
            elif binding.service == "queue":
                found.extend(f"{binding.where}: {line}" for line in limit_problems(spec, binding, config))
            if binding.service == "blob" and (unset := expressions.unset_settings("path", binding.name, environ)):
                found.append(f"{binding.where}: {unset}")
    return found


def limit_problems(spec: FunctionSpec, binding: _Binding, config: HostConfig) -> list[str]:
    """Where a queue binding asks more than its backend's service takes: a line per setting, naming the limit.

    Every queue name is held to the backend's name rule, and so is the
    trigger's ``<queue>-poison`` where the host keeps poison there (a poison
    message that cannot be put there would come back for ever); the trigger also to
    its limits, with the function's settings (its ``functions:`` section over
    the global ones), naming the key that set each value.
    """
    connection = config.resolve_connection(binding.connection, "queue", embedded_default=binding.connection is None).value
    kind = backend_kind(connection)
    found = []
    # The names as the host will use them: a Functions app's %SETTING% names were resolved when it was converted.
    try:
        kind.limits.check_name(binding.name)
    except InvalidArgument as exc:
        found.append(f"{exc} ({kind.name})")
    else:
        if binding.trigger and kind.host_poison(connection) and not is_poison_queue(binding.name):
            try:
                kind.limits.check_name(poison_queue(binding.name))
            except InvalidArgument as exc:
                found.append(
                    f"its poison queue: {exc} ({kind.name}), so the trigger queue's name must leave "
                    f"room for {POISON_SUFFIX!r} ({len(binding.name)} characters now)"
                )
    if binding.channel is not None and not kind.capabilities.channels:
        found.append(f"channel {binding.channel!r}: {kind.name} has no channels")
    if not binding.trigger:
        return found
    if spec.extra("checkpoints") and not kind.capabilities.updates_content:
        found.append(
            f"checkpoints=True: {kind.name} cannot change a message's content while it is held, so "
            "msg.checkpoint could not store anything"
        )
    own = config.for_function(spec.name, spec.retry, spec.settings)
    found += kind.limits.exceeded(own, kind.name, partial(config.key_of, spec.name))
    return found


def exposed_files(app: WorkerApp, config: HostConfig) -> list[Exposed]:
    """The embedded queue's and blob store's files and folders, of every binding, that other users can read or write.

    Reported at start and not refused: a folder may be shared by design (a volume
    with Kubernetes' ``fsGroup``), and refusing would not take back what was read.
    """
    paths: dict[Path, None] = {}
    for spec in app.functions:
        for binding in _bindings(spec):
            try:
                value = config.resolve_connection(
                    binding.connection, binding.service, embedded_default=binding.connection is None
                ).value
            except ConnectionSettingError:  # problems() refuses it
                continue
            paths.update(dict.fromkeys(private_paths(value, config.base_dir)))
    return [found for path in paths if (found := exposed(path)) is not None]


def exposed_secret_files(config: HostConfig, local_settings: Path | None) -> list[Exposed]:
    """local.settings.json (connection strings, keys) and ``worker.httpTokenFile`` (the endpoint token), when other
    users can read or write them: warned about at start as the queue file is, and for the same reason not refused."""
    paths = [local_settings] if local_settings is not None else []
    if config.http_token_file is not None:
        paths.append(config.base_dir / Path(config.http_token_file).expanduser())
    return [found for path in paths if (found := exposed(path)) is not None]


def environment_problems(environ: Mapping[str, str]) -> list[str]:
    """What in the process's settings cannot be had: not a Python Functions app (FUNCTIONS_WORKER_RUNTIME), or
    OpenTelemetry traces asked for (``OTEL_*``) without the extra that exports them."""
    found = []
    runtime = environ.get("FUNCTIONS_WORKER_RUNTIME")
    if runtime is not None and runtime.strip().lower() != "python":
        found.append(
            f"FUNCTIONS_WORKER_RUNTIME is {runtime!r}: this host runs Python apps only (set it to python, or leave it unset)"
        )
    if problem := tracing.problem(environ):
        found.append(problem)
    return found


def connection_problem(config: HostConfig, connection: str | None, service: Service, looked_in: str = "") -> str | None:
    """Why ``connection`` cannot serve ``service`` ("queue" or "blob"), or None when it can.

    None as ``connection`` is a WorkerApp binding that names none (AzureWebJobsStorage, else the embedded queue).
    ``looked_in`` (every place settings came from) is added to the message of a connection found nowhere.
    """
    try:
        value = config.resolve_connection(connection, service, embedded_default=connection is None).value
    except MissingConnection as exc:
        return f"{exc} ({looked_in})" if looked_in else str(exc)
    except ConnectionSettingError as exc:
        return str(exc)
    if service == "queue":
        problem = queue_connection_problem(value, config.base_dir)
        embedded = not value or value.startswith(SQLITE_PREFIX)  # its problems name the file
        return f"connection {connection or DEFAULT}: {problem}" if problem and not embedded else problem
    if value is None or value.startswith(SQLITE_PREFIX):
        return file_problem(config.base_dir / (value[len(SQLITE_PREFIX) :] if value else DEFAULT_SQLITE_PATH))
    try:
        parsed = parse_connection_string(value)
    except ConnectionStringError as exc:
        return f"connection {connection or DEFAULT}: {exc}"
    if parsed.blob_endpoint is None:
        return f"connection {connection or DEFAULT} has no BlobEndpoint (nor an AccountName to derive one from)"
    return None


def check(app: WorkerApp, config: HostConfig) -> None:
    """Raise :class:`StartupRefused` listing every problem, if there is any."""
    if found := problems(app, config):
        raise StartupRefused(found)

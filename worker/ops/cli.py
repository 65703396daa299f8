"""``worker``: run an app, and look at or write to its queues.

Exit codes: 0 success; 1 a queue operation failed (a missing queue, storage trouble).
2: bad arguments (a queue name or message the service would refuse), settings or app.
2 also: an embedded queue file that is not SQLite or cannot be written.
3 (``worker run --no-supervisor``): recycled after a sync handler passed functionTimeout.
``worker spark`` exits 1 when a server cannot start (a port taken, no pyspark, not ready in time).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import ipaddress
import json
import math
import os
import re
import shlex
import sys
import tempfile
import threading
import traceback
from collections.abc import Awaitable, Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import structlog

from worker.backends.failures import ConnectionStringError
from worker.backends.queues import (
    DEFAULT_TTL_SECONDS,
    NEVER_EXPIRES,
    InvalidArgument,
    Limits,
    MessageTooLarge,
    QueueBackend,
    QueueError,
    QueueNotFound,
    RawMessage,
    UnusableFile,
)
from worker.backends.registry import (
    EMBEDDED,
    KINDS,
    SQLITE_PREFIX,
    BackendKind,
    UnsupportedConnection,
    backend_kind,
    connection_problem,
    embedded_file,
    open_backend,
)
from worker.bindings.encoding import body_text, encode
from worker.compat.discovery import AppLoadError, app_directory, discover, is_template, queue_readers
from worker.model import StartupRefused
from worker.observability import tracing
from worker.observability.logs import LOG_FORMAT_ENV, LOG_FORMATS, configure_logging, private_stderr
from worker.observability.redaction import redact, remember_environment
from worker.ops import completion, scaffold, spark_cluster
from worker.ops.locate import PROJECT_ROOT_MARKERS, SETTINGS_FILES, find, find_config, searched_folders
from worker.ops.open_files import raise_open_files_limit
from worker.ops.spark_cluster import SparkServerError
from worker.ops.supervisor import (
    SUPERVISOR_ENV,
    Supervisor,
    child_command,
    die_with_supervisor,
)
from worker.ops.terminal import printable
from worker.runtime.handover import RECYCLED
from worker.runtime.poison import failure_of, looked_up_policy, poison_queue, source_queue
from worker.runtime.signals import forwarded_act_as_original, ignore_at_exit
from worker.settings import local_settings
from worker.settings.config import (
    ConfigError,
    HostConfig,
    load_config,
    parse_duration,
    parse_http_host,
    unused_functions_settings,
)
from worker.settings.connections import ConnectionSettingError
from worker.settings.http_token import http_token
from worker.settings.local_settings import LocalSettingsError

T = TypeVar("T")

DEFAULT_CONNECTION = "AzureWebJobsStorage"
#: Said after a refusal for a missing AzureWebJobsStorage: where `worker send` put the messages, and how to run there.
MISSING_STORAGE_HINT = (
    f"what to do: with {DEFAULT_CONNECTION} unset, the other worker commands (worker send) use the embedded queue, "
    f".worker/queues.sqlite3 beside the settings file (else in the current folder); to run the app on it, set "
    f"{DEFAULT_CONNECTION}=sqlite:///.worker/queues.sqlite3 in the environment, in local.settings.json's Values or "
    f"under host.yaml's connections:, or leave connection= out of the trigger; for Azure Storage, set it to the "
    f"account's connection string (UseDevelopmentStorage=true for Azurite)"
)


#: ``worker --help``'s last words: where to begin, and where the documentation is.
MAIN_EPILOG = (
    "Begin with: worker init hello && cd hello && worker send hello world && worker run --burst. "
    "The documentation: the docs/ folder of the source (Markdown, readable as it is), or the site that "
    "make docs builds into site/ from a clone of the repository (see its README)."
)

#: ``worker run --help``'s last words: how to see the worker at work.
RUN_EPILOG = (
    "The web console: worker run --http-port 8080 --http-host 127.0.0.1, then open http://127.0.0.1:8080/ "
    "on this machine; the start's 'web console' line gives its address and how to get in (with "
    "WORKER_HTTP_TOKEN set, the token; without, loopback only)."
)


class UsageError(Exception):
    """Bad arguments, configuration or app: exit code 2."""


def _config(path: str | None, app: str | None = None) -> HostConfig:
    """The settings of ``--config``; without it, :func:`find_config`'s file, else the defaults."""
    if path is None:
        found = find_config(app)
        return load_config(found)
    if not Path(path).is_file():
        raise UsageError(f"config file {path} does not exist")
    return load_config(path)


#: The longest ``send --delay``: the longest the backends that take a delay (the embedded queue, Azure Storage) hide
#: a new message.
MAX_DELAY = EMBEDDED.limits.max_visibility
DURATIONS = "such as 30s, 10m, 2h, 1d or hh:mm:ss"


def _duration_within(text: str, low: float, high: float, accepted: str) -> float:
    """A duration from ``low`` to ``high`` seconds; anything else is one line naming what is accepted (exit 2)."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        seconds = None
    if seconds is None or not low <= seconds <= high:
        raise argparse.ArgumentTypeError(f"expected {accepted}, got {text!r}")
    return seconds


def _delay(text: str) -> float:
    return _duration_within(text, 0, MAX_DELAY, f"a duration from 0s to {MAX_DELAY / 86400:g}d, {DURATIONS}")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def _host(text: str) -> str:
    try:
        return parse_http_host(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ttl(text: str) -> float:
    """At least a second, with no upper bound (Azure Storage has none), or -1: the message never expires."""
    if text.strip() == str(NEVER_EXPIRES):
        return NEVER_EXPIRES
    return _duration_within(text, 1, math.inf, f"a duration of at least 1s, {DURATIONS}, or -1 (never expires)")


def _with_backend(
    config: HostConfig, connection: str | None, work: Callable[[QueueBackend], Awaitable[T]], *, writes: bool = False
) -> T:
    """Open the backend ``connection`` names (None: AzureWebJobsStorage, else the embedded queue), run ``work``, close it.

    Only a command that ``writes`` makes an embedded queue file that is not there. One that only reads sees an
    empty store instead (a throwaway file), so that looking never leaves an empty file behind, often a second
    one in the wrong folder; it says there is none.
    """
    with tempfile.TemporaryDirectory(prefix="worker-") as scratch:
        try:
            string = config.connection_string(connection)
            if (file := embedded_file(string, config.base_dir)) is not None:
                if not writes and not file.exists():
                    print(printable(f"no embedded queue file at {file}: nothing has been sent to it yet"), file=sys.stderr)
                    string = f"{SQLITE_PREFIX}{Path(scratch, 'empty.sqlite3').as_posix()}"
                else:
                    _announce(file, connection_problem(string, config.base_dir))
            backend = open_backend(string, config.base_dir)
        except (UnsupportedConnection, ConnectionSettingError) as exc:
            raise UsageError(f"connection {connection or DEFAULT_CONNECTION}: {exc}") from None

        async def main() -> T:
            try:
                return await work(backend)
            finally:
                await backend.close()

        return asyncio.run(main())


def _announce(file: Path, problem: str | None) -> None:
    """Say which embedded queue file a command uses, on stderr (stdout stays what scripts parse): a second file is
    easy to make by mistake. A file that cannot be used (read-only, say) is refused first, with no notice."""
    if problem is not None:
        raise UnusableFile(problem)
    print(
        printable(f"embedded queue: {file}" if file.exists() else f"creating a new embedded queue file at {file}"),
        file=sys.stderr,
    )


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def cmd_run(args: argparse.Namespace) -> int:
    supervisor_pid = os.environ.get(SUPERVISOR_ENV) if args.no_supervisor else None
    if supervisor_pid is not None:  # first: a supervisor killed while this process starts takes it along
        die_with_supervisor(int(supervisor_pid))
        forwarded_act_as_original()
    ignore_at_exit()  # before the app registers its own atexit callbacks, so that it comes after them
    if args.no_supervisor and (args.processes or 1) > 1:
        raise UsageError("--no-supervisor runs one process; --processes needs the supervisor")
    config = _config(args.config, args.app)
    if args.http_port is not None:  # the flag wins over worker.httpPort (and WORKER__worker__httpPort)
        config = dataclasses.replace(config, http_port=args.http_port)
    if args.http_host is not None:
        config = dataclasses.replace(config, http_host=args.http_host)
    token = http_token(config, os.environ) if config.http_port else None  # read now: a bad one is refused at once
    # --log-level, when given, sets one level for all; else host.json's logging.logLevel sets each category's. The log
    # goes to the process's own copy of stderr: a handler closing descriptor 2 neither stops nor redirects it.
    _configure_run_log(args, config)
    log = structlog.get_logger("worker.ops.cli")
    raised = raise_open_files_limit()  # the processes of the supervisor inherit it
    if supervisor_pid is None:  # said once, by worker run itself, not again by the process it supervises
        _log_start(args, config, log, raised)
    if not args.no_supervisor:
        # Even one process runs under a supervisor, which starts a fresh one when a sync handler past
        # functionTimeout makes it recycle itself (worker.runtime.recycle), and settles nothing itself. It needs
        # nothing of the app: the app is imported (its import-time code run, its warnings said) and checked only
        # in the processes that run it, and a process that refuses it exits 2, which ends worker run with 2.
        command = child_command(args.app, str(config.source) if config.source else None, args.log_level, args.burst)
        supervisor = Supervisor(
            command,
            args.processes or config.processes,
            http_port=config.http_port,
            http_host=config.http_host,
            token=token,
            open_data=config.http_open_data,
            allowed=config.http_allowed_hosts,
            burst=args.burst,
            child_env=_function_processes(args.app, config.base_dir),
        )
        return asyncio.run(supervisor.run())
    # Only this branch loads the app, and with it the host: imported here, so that the supervisor above does not.
    from worker.ops.host_process import run_here

    return run_here(args, config, log, supervisor_pid)


def _log_start(args: argparse.Namespace, config: HostConfig, log: Any, raised: tuple[int, int] | None) -> None:
    """Log what ``worker run`` starts from: the open files limit, local settings, settings this host does not use,
    and which settings file was read (or that none was)."""
    if raised is not None:
        log.info("limit on open files raised", soft=raised[0], now=raised[1])
    if args.local_settings.found:
        log.info("local settings read", path=str(args.local_settings.path), settings=len(args.local_settings.applied))
    if args.local_settings.skipped:
        log.info("local settings skipped: already defined in the environment", keys=list(args.local_settings.skipped))
    unused = unused_functions_settings(os.environ)
    if unused:  # named once rather than dropped without a word: an app moved from Functions carries them
        log.info("Functions app settings not used by this host", settings=unused)
    if config.source is not None:
        log.info("config file", path=str(config.source))
        if args.config is None and (unread := _unread_settings_file(config.source)) is not None:
            log.warning(
                f"{unread.name} beside {config.source.name} is not read: {config.source.name} wins; merge "
                f"them into one, or name the one to read with --config",
                read=str(config.source),
                not_read=str(unread),
            )
    else:
        log.info("no config file; defaults", looked_in=[str(folder) for folder in searched_folders(args.app)])


def _configure_run_log(args: argparse.Namespace, config: HostConfig) -> None:
    """The run's log, in ``--log-format``, else ``WORKER_LOG_FORMAT``, else auto; the processes it starts are told the
    same in their environment (they read no ``--log-format``)."""
    log_format = args.log_format or os.environ.get(LOG_FORMAT_ENV) or "auto"
    if log_format not in LOG_FORMATS:
        raise UsageError(f"{LOG_FORMAT_ENV}={log_format!r} is not a log format: use one of {', '.join(LOG_FORMATS)}")
    os.environ[LOG_FORMAT_ENV] = log_format
    configure_logging(
        args.log_level,
        categories=config.log_levels,
        stream=private_stderr(),
        log_format=log_format,
        max_dequeue_count=config.max_dequeue_count,
    )


def _unread_settings_file(read: Path) -> Path | None:
    """A settings file beside the one found that loses to it (``worker init``'s host.json beside a host.yaml someone
    added): said at start, since the one not read silently changes nothing."""
    for name in SETTINGS_FILES:
        if name != read.name and read.name in SETTINGS_FILES and (read.parent / name).is_file():
            return read.parent / name
    return None


def _function_processes(app: str, base_dir: Path) -> list[dict[str, str]]:
    """For a SAM template of several functions, what each function's processes have in their environment: Lambda
    isolates every function (its modules, its environment), so each runs in processes of its own. Empty for other
    apps. The template is read, nothing of it imported."""
    if not is_template(app):
        return []
    from worker.compat.sam import FUNCTION_ENV, runnable_functions

    path = Path(app) if Path(app).is_absolute() else base_dir / app
    if not path.is_file():
        path = Path.cwd() / app
    try:
        functions = runnable_functions(path)
    except (OSError, ValueError):  # the process that loads it says what is wrong
        return []
    return [{FUNCTION_ENV: name} for name in functions] if len(functions) > 1 else []


def cmd_send(args: argparse.Namespace) -> int:
    config = _config(args.config)

    texts = []
    for number, body in enumerate(args.bodies, 1):  # refuse the whole command before anything is sent
        # The argument's bytes as the shell passed them (bytes that are not UTF-8 arrive as surrogate escapes):
        # base64 carries any bytes; none stores text, so such a body is refused.
        try:
            texts.append(encode(os.fsencode(body), config.message_encoding))
        except ValueError as exc:
            raise UsageError(f"message {number}: {exc}") from None
    _kind(config, args.connection).limits.check_name(args.queue)  # refused (2) before anything is made
    ttl = DEFAULT_TTL_SECONDS if args.ttl is None else args.ttl
    if ttl != NEVER_EXPIRES and args.delay >= ttl:  # refused before the queue is made
        raise UsageError(
            f"--delay must be shorter than --ttl (default {DEFAULT_TTL_SECONDS / 86400:g}d), got "
            f"{args.delay:g}s and {ttl:g}s"
        )
    limit = _limits(config, args.connection).max_message_bytes
    for number, text in enumerate(texts, 1):
        if (size := len(text.encode("utf-8"))) > limit:
            raise MessageTooLarge(
                f"message {number} is {size} bytes as stored ({config.message_encoding}); "
                f"the limit is {limit} bytes ({limit // 1024} KiB)"
            )

    if problem := tracing.problem(os.environ):
        raise UsageError(problem)
    if (warning := _other_connection(config, args.queue, args.connection)) is not None:
        _tell(warning)
    # Each put is a PRODUCER span whose context the message carries, where the backend has message properties.
    telemetry = tracing.start(os.environ, tracing.SERVICE_NAME)

    async def work(backend: QueueBackend) -> list[RawMessage]:
        if backend.capabilities.creates_queues:
            await backend.create_queue(args.queue)
        target = telemetry.traced(backend) if telemetry is not None else backend
        return [await target.put(args.queue, text, visibility_timeout=args.delay, time_to_live=args.ttl) for text in texts]

    try:
        sent = _with_backend(config, args.connection, work, writes=True)
    finally:
        if telemetry is not None:
            telemetry.shutdown()
    for message in sent:
        _say(message.id)
    return 0


def _other_connection(config: HostConfig, queue: str, connection: str | None) -> str | None:
    """A warning when the app beside the settings reads ``queue`` only through connections that reach other storage
    than ``connection`` does, or None.

    Why: a Functions app often reads its queue through a connection of its own (``OrdersStorage``); ``worker send``
    without ``--connection`` would put the message in the default storage (a new embedded queue, say), where the
    app never looks. The message is still sent: the user may mean it.
    """
    folders = dict.fromkeys([Path.cwd().resolve(), config.base_dir.resolve()])  # where the app is run, or its files
    found = [(folder, readers) for folder in folders if (readers := queue_readers(folder, os.environ).get(queue))]
    if not found:
        return None
    app_folder, readers = found[0]

    def storage(name: str | None) -> str | None:
        try:
            return config.connection_string(name)
        except ConnectionSettingError:
            return f"(unresolved {name})"

    if any(storage(reader) == storage(connection) for reader in readers):
        return None
    names = ", ".join(sorted(reader or DEFAULT_CONNECTION for reader in readers))
    return (
        f"warning: the app in {app_folder} reads queue {queue!r} through connection {names}, not "
        f"{connection or DEFAULT_CONNECTION}, which reaches other storage; the message is sent there all the "
        f"same: pass --connection {sorted(r or DEFAULT_CONNECTION for r in readers)[0]} to reach the app"
    )


def _kind(config: HostConfig, connection: str | None) -> BackendKind:
    """The kind of backend ``connection`` names, for its limits before anything opens."""
    try:
        return backend_kind(config.connection_string(connection))
    except (UnsupportedConnection, ConnectionSettingError) as exc:
        raise UsageError(f"connection {connection or DEFAULT_CONNECTION}: {exc}") from None


def _limits(config: HostConfig, connection: str | None) -> Limits:
    """What ``connection`` accepts, as its string sets it (OCI Queue's ``maxMessageBytes=``), before anything opens."""
    try:
        return _kind(config, connection).limits_of(config.connection_string(connection))
    except ConnectionStringError as exc:
        raise UsageError(f"connection {connection or DEFAULT_CONNECTION}: {exc}") from None


def cmd_peek(args: argparse.Namespace) -> int:
    config = _config(args.config)
    limits = _kind(config, args.connection).limits
    limits.check_name(args.queue)  # a name the service would refuse is a usage error (2), not a missing queue (1)
    if args.max is not None:
        limits.check_count(args.max)

    async def peek(backend: QueueBackend) -> tuple[list[RawMessage], str]:
        found = await backend.peek(args.queue, args.max or limits.max_batch)
        return found, "" if found else await _nothing_visible(backend, args.queue)

    messages, empty = _with_backend(config, args.connection, peek)
    _print_messages(messages, config, args.json, empty)
    return 0


async def _nothing_visible(backend: QueueBackend, queue: str) -> str:
    """What to say of a queue that shows no message: empty, or holding only messages nobody can see now."""
    held = await backend.approximate_count(queue)
    if held == 0:
        return f"queue {queue} is empty"
    return (
        f"queue {queue} has no visible messages; it holds about {held} that are invisible now (leased by a "
        "worker, or sent with a delay)"
    )


def _print_messages(
    messages: list[RawMessage], config: HostConfig, as_json: bool, empty: str, *, poison: bool = False
) -> None:
    """The messages as JSON, or a line each for people; ``empty`` is that line when there are none.

    ``poison``: each message's attempts and last failure reason, in place of its dequeue count (a poison copy's
    own, which counts nothing), where its backend kept them (:func:`worker.runtime.poison.failure_of`)."""
    rows = []
    for m in messages:
        row: dict[str, Any] = {
            "id": m.id,
            "dequeueCount": m.dequeue_count,
            "insertionTime": _iso(m.insertion_time),
            "expirationTime": _iso(m.expiration_time),
        }
        if poison:
            row["lastFailure"], row["attempts"] = failure_of(m)
        rows.append(row | {"body": body_text(m.content, config.message_encoding)})
    if as_json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        _say(empty)
    elif poison:
        for row in rows:
            attempts = row["attempts"] if row["attempts"] is not None else "?"
            _say(f"{row['id']}  attempts={attempts}  inserted={row['insertionTime']}  {row['body']}")
            _say(
                f"    last failure: {row['lastFailure']}"
                if row["lastFailure"] is not None
                else f"    last failure: not kept with the message on this backend; the worker's log line 'message moved "
                f"to the poison queue' with poison_message_id={row['id']} says why"
            )
    else:
        for row in rows:
            _say(f"{row['id']}  dequeueCount={row['dequeueCount']}  inserted={row['insertionTime']}  {row['body']}")


def _say(line: str) -> None:
    """Print one line for people, its control characters written out: queue data must not drive the terminal."""
    print(printable(line))


def cmd_queues(args: argparse.Namespace) -> int:
    config = _config(args.config)

    async def work(backend: QueueBackend) -> list[dict[str, Any]]:
        return [
            {"name": name, "approximateMessageCount": await backend.approximate_count(name)}
            for name in await backend.list_queues()
        ]

    _print_table(
        _with_backend(config, args.connection, work), {"name": "queue", "approximateMessageCount": "messages"}, args.json
    )
    return 0


def cmd_poison(args: argparse.Namespace) -> int:
    config = _config(args.config)
    limits = _kind(config, args.connection).limits
    limits.check_name(args.queue)
    poison = poison_queue(args.queue)

    async def peek(backend: QueueBackend) -> tuple[list[RawMessage], str]:
        try:
            found = await backend.peek(poison, min(args.max or limits.max_batch, limits.max_batch))
        except QueueNotFound:  # made on first need: no poison queue yet means no poison
            return [], f"no poison messages of {args.queue} ({poison} was never needed)"
        return found, "" if found else await _nothing_visible(backend, poison)

    async def drain(backend: QueueBackend) -> tuple[int, int]:
        # At most what the poison queue holds now: a running host poisons a requeued message that fails again, and
        # a drain that went on while the queue answered anything would feed itself.
        policy = await looked_up_policy(backend, args.queue)
        total = await policy.count(args.queue)
        goal = total if args.max is None else min(total, args.max)
        if goal == 0:
            return 0, total
        show = _progress(goal, "requeued" if args.action == "requeue" else "purged") if goal > limits.max_batch else None
        try:
            done = await policy.drain(args.queue, requeue=args.action == "requeue", limit=goal, progress=show)
        except QueueNotFound:  # deleted meanwhile
            return 0, total
        return done, total

    async def work(backend: QueueBackend) -> tuple[str, Any]:
        if (dead := await _dead_letters(backend, args.queue, args.action)) is not None:
            return "dead letters", dead
        return ("list", await peek(backend)) if args.action == "list" else ("drained", await drain(backend))

    kind, result = _with_backend(config, args.connection, work)
    if kind == "dead letters":
        _print_dead_letters(args, result)
    elif kind == "list":
        messages, empty = result
        _print_messages(messages, config, args.json, empty, poison=True)
    else:
        done, total = result
        _print_drained(args, poison, done, total)
    return 0


def _print_dead_letters(args: argparse.Namespace, count: int) -> None:
    """What ``worker poison`` says of a service's dead-letter queue, which it can count and purge but not show."""
    if args.json:
        print(json.dumps({"action": args.action, "queue": args.queue, "deadLetterQueue": True, "messages": count}))
    elif args.action == "list":
        _say(
            f"{count} messages in the dead-letter queue of {args.queue} (the service's API counts them but "
            "cannot show them; look with the OCI Console)"
        )
    else:
        _say(f"{count} messages purged from the dead-letter queue of {args.queue}")


def _print_drained(args: argparse.Namespace, poison: str, done: int, total: int) -> None:
    """What ``worker poison requeue`` or ``purge`` says it did: ``done`` of the ``total`` the poison queue held."""
    verb = "moved back to " + poison[: -len("-poison")] if args.action == "requeue" else "purged from " + poison
    if args.json:
        print(json.dumps({"action": args.action, "queue": poison, "messages": done, "before": total}))
    else:
        _say(f"{done} messages {verb}")


def _progress(goal: int, verb: str) -> Callable[[int], None]:
    """A one-line progress bar on stderr, for runs long enough to need one."""

    def show(done: int) -> None:
        filled = int(30 * min(done, goal) / goal)
        end = "\n" if done >= goal else ""
        print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{goal} {verb}", end=end, file=sys.stderr, flush=True)

    return show


async def _dead_letters(backend: QueueBackend, queue: str, action: str) -> int | None:
    """Where poison is the service's dead-letter queue: list counts it, purge empties it; None elsewhere.

    OCI Queue's API has no call that reads a dead-letter queue, so its messages cannot be requeued from here.
    """
    policy = await looked_up_policy(backend, queue)
    if (why := policy.unreadable(queue)) is None:
        return None
    if action == "requeue":
        raise UsageError(why)
    if action == "purge":
        return await policy.purge(queue, limit=0)
    return await policy.count(queue)


def cmd_stats(args: argparse.Namespace) -> int:
    config = _config(args.config)

    async def work(backend: QueueBackend) -> list[dict[str, Any]]:
        names = set(await backend.list_queues())
        sources = sorted({source_queue(name) for name in names})
        return [
            {
                "queue": source,
                "messages": await backend.approximate_count(source) if source in names else 0,
                "poison": await backend.approximate_count(poison_queue(source)) if poison_queue(source) in names else 0,
            }
            for source in sources
        ]

    _print_table(
        _with_backend(config, args.connection, work),
        {"queue": "queue", "messages": "messages", "poison": "poison"},
        args.json,
    )
    return 0


def _print_table(rows: list[dict[str, Any]], titles: dict[str, str], as_json: bool) -> None:
    """``rows`` as JSON, or as a table with the first column left-aligned and the others right-aligned."""
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    cells = [{key: printable(str(row[key])) for key in titles} for row in rows]  # escaped first: widths as shown
    widths = {key: max([len(title), *(len(row[key]) for row in cells)]) for key, title in titles.items()}
    first = next(iter(titles))

    def line(cells: dict[str, str]) -> str:
        return "  ".join(
            f"{cells[key]:<{widths[key]}}" if key == first else f"{cells[key]:>{widths[key]}}" for key in titles
        )

    for row in [titles, *cells]:
        _say(line(row))


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text!r}")
    return value


def _spark_host(text: str) -> str:
    """An address of this machine that Spark's servers bind and put in their URLs: not 0.0.0.0 or ::, which a URL
    cannot point at."""
    host = _host(text)
    try:
        if ipaddress.ip_address(host).is_unspecified:
            raise argparse.ArgumentTypeError(
                f"expected an address of this machine that clients reach it at (it goes "
                f"into the spark:// or sc:// URL), got {text!r}"
            )
    except ValueError:  # a host name
        pass
    return host


def _memory(text: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[mMgGtT]", text):
        raise argparse.ArgumentTypeError(f"expected an amount such as 512m or 4g, got {text!r}")
    return text


def _startup_timeout(text: str) -> float:
    return _duration_within(text, 1, 3600, f"a duration from 1s to 1h, {DURATIONS}")


def _spark_state(args: argparse.Namespace) -> Path:
    """``--state``, else ``.worker/spark`` beside the settings file every command finds (else in the current folder),
    so that ``worker spark stop`` from any folder of the project finds what ``start-cluster`` started."""
    if args.state is not None:
        return Path(args.state).resolve()
    found = find_config()
    return (found.parent if found else Path.cwd()) / ".worker" / "spark"


def cmd_spark(args: argparse.Namespace) -> int:
    state = _spark_state(args)
    if args.action == "start-cluster":
        master, worker = spark_cluster.start_cluster(
            state, host=args.host, port=args.port or 0, cores=args.cores, memory=args.memory, timeout=args.timeout
        )
        _tell(f"master {master.url} (pid {master.pid}, web UI {master.web_ui}, log {master.log})")
        _tell(f"worker registered (pid {worker.pid}, log {worker.log})")
        _started(master.url)
    elif args.action == "start-connect":
        server = spark_cluster.start_connect(
            state, host=args.host, port=args.port or 0, master=args.master, timeout=args.timeout
        )
        _tell(
            f"Spark Connect server {server.url} on {args.master} (pid {server.pid}, web UI {server.web_ui} for "
            f"spark.webUi, log {server.log})"
        )
        _started(server.url)
    elif args.action == "status":
        servers = spark_cluster.running(state)
        if not servers:
            _say(f"no Spark servers started from {state} are running")
        for server in servers:
            _say(f"{server.kind:<8} {server.url}  pid {server.pid}  log {server.log}")
    else:
        stopped = spark_cluster.stop(state, timeout=args.timeout)
        if not stopped:
            _say(f"nothing to stop: no Spark servers started from {state} are running")
        for server in stopped:
            _say(f"stopped the {server.kind} (pid {server.pid})")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    try:
        scaffold.init(folder)
    except scaffold.FolderNotEmpty as exc:
        raise UsageError(str(exc)) from None
    go = "" if folder.resolve() == Path.cwd() else f"cd {shlex.quote(args.folder)} && "
    print(
        f"made an app in {folder}: function_app.py, host.json, local.settings.json, .gitignore\n"
        f"try it: {go}worker send {scaffold.QUEUE} world && worker run --burst"
    )
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    try:
        written = completion.script(_parser(), args.shell)
    except completion.CompletionUnavailable as exc:
        raise UsageError(str(exc)) from None
    print(written, end="")
    return 0


def _tell(line: str) -> None:
    """A line for people on stderr: stdout of ``start-*`` is the URL alone, for scripts."""
    print(redact(printable(line)), file=sys.stderr)


def _started(url: str) -> None:
    _tell(f"use spark.master: {url} in host.yaml (or python -m functions.demo --master {url}); worker spark stop stops it")
    print(url, flush=True)


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), but a bad argument is one line, what is wrong, not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, redact(f"{self.prog}: error: {message} (see {self.prog} --help)\n"))


def _version() -> str:
    """The installed distribution's version, so that pyproject.toml is the one place it is written."""
    try:
        return metadata.version("queueworker")
    except metadata.PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
        return "(not installed)"


def _size(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB" if size % (1024 * 1024) == 0 else f"{size // 1024} KiB"


def limits_text() -> str:
    """Each backend's message size and batch limits, from the backends' own ``Limits``, for ``worker send --help``."""
    parts = [
        f"{kind.name}: messages up to {_size(kind.limits.max_message_bytes)}, {kind.limits.max_batch} a receive (batchSize)"
        for kind in KINDS
    ]
    return (
        "Limits of each backend: " + "; ".join(parts) + ". OCI Queue's size is its default (maxMessageBytes= in "
        "the connection); Amazon SQS counts message attributes (a producer's trace context) in the size."
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="worker", description="Queue-trigger worker host.", epilog=MAIN_EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(handler=handler)
        sub.add_argument(
            "--config",
            help=f"settings file to read (default: {' else '.join(SETTINGS_FILES)}, in the "
            "app's folder, then in the current folder or the nearest one above it, up to "
            f"the project's root, which holds {' or '.join(PROJECT_ROOT_MARKERS)})",
        )
        return sub

    # First in the help: a newcomer's first command.
    init = commands.add_parser(
        "init",
        help="make a folder holding an app that runs at once: function_app.py, "
        "host.json, local.settings.json (the embedded queue), .gitignore",
        description="make a folder holding an app that runs at once: function_app.py, "
        "host.json, local.settings.json (the embedded queue), .gitignore",
    )
    init.set_defaults(handler=cmd_init)
    init.add_argument(
        "folder",
        nargs="?",
        default=".",
        metavar="FOLDER",
        help="where to make it (default: the current folder); made if missing, and no file is overwritten",
    )
    run = command("run", "run the app's queue-triggered functions until SIGTERM or SIGINT", cmd_run)
    run.epilog = RUN_EPILOG
    run.add_argument(
        "--app",
        default=None,
        metavar="MODULE[:ATTR]|FOLDER",
        help="the app's module and object, or a Functions app's folder (v2: its function_app.py; "
        "v1: function folders with function.json) (default: function_app.py in the current folder, "
        "or the file PYTHON_SCRIPT_FILE_NAME names, and its app, else the current folder's v1 app, "
        "as Functions finds them)",
    )
    run.add_argument("--burst", action="store_true", help="stop once the trigger queues are empty")
    run.add_argument(
        "--processes",
        type=_positive,
        default=None,
        metavar="N",
        help="run N worker processes under a supervisor (default: worker.processes, 1)",
    )
    run.add_argument(
        "--no-supervisor",
        action="store_true",
        help="run the host in this process, without a supervisor (what the supervisor runs); a sync "
        f"handler past functionTimeout then ends it with exit code {RECYCLED}, and its message "
        "comes back when its lease ends",
    )
    run.add_argument(
        "--http-port",
        type=_port,
        default=None,
        metavar="N",
        help="serve the web console at http://ADDRESS:N/, with /healthz, /readyz, /metrics and /leases "
        "(default: worker.httpPort; none when unset)",
    )
    run.add_argument(
        "--http-host",
        type=_host,
        default=None,
        metavar="ADDRESS",
        help="address the endpoints listen on (default: worker.httpHost, 0.0.0.0: every interface)",
    )
    run.add_argument(
        "--log-level",
        default=None,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="one level for every line (default: host.json's logging.logLevel by category, else INFO)",
    )
    run.add_argument(
        "--log-format",
        default=None,
        choices=LOG_FORMATS,
        help="compact: one line per invocation, a message's traceback once with the app's frames only, routine "
        "start and stop lines left out; plain: every line with all its fields, as text; json: one JSON object "
        f"a line (default: {LOG_FORMAT_ENV}, else auto: compact on a terminal, json elsewhere)",
    )

    for name, help, handler in (
        ("send", "put messages on a queue (created if missing), encoded under messageEncoding", cmd_send),
        ("peek", "show visible messages without taking them", cmd_peek),
        ("queues", "list queues with approximate message counts", cmd_queues),
        ("poison", "list, requeue or purge the poison messages of QUEUE", cmd_poison),
        ("stats", "queue and poison queue lengths", cmd_stats),
    ):
        _add_queue_arguments(command(name, help, handler), name)

    spark = commands.add_parser(
        "spark",
        help="start, look at and stop Spark servers on this machine, from the installed pyspark",
        description="start, look at and stop Spark servers on this machine, from the installed pyspark",
    )
    _add_spark_actions(spark)
    shells = commands.add_parser(
        "completion",
        help="print a shell completion script for worker: source <(worker completion bash)",
        description="print a shell completion script for worker: source <(worker completion bash)",
    )
    shells.set_defaults(handler=cmd_completion)
    shells.add_argument("shell", choices=completion.SHELLS)
    return parser


def _add_queue_arguments(sub: argparse.ArgumentParser, name: str) -> None:
    """The arguments of the queue command ``name`` (send, peek, queues, poison or stats)."""
    sub.add_argument(
        "--connection",
        default=None,
        help=f"name of the connection setting, resolved as Functions does (AzureWebJobs<NAME>, then <NAME>); "
        f"default: {DEFAULT_CONNECTION} when it is set, else the embedded queue",
    )
    if name == "poison":
        sub.add_argument("action", choices=["list", "requeue", "purge"])
    if name not in ("queues", "stats"):
        sub.add_argument("queue")
    if name == "send":
        sub.add_argument(
            "bodies",
            nargs="+",
            metavar="BODY",
            help="each at most the backend's message size as stored, after messageEncoding (so "
            "48 KiB under base64 where 64 KiB are stored); each backend's is below",
        )
        sub.epilog = limits_text()
        sub.add_argument(
            "--delay",
            type=_delay,
            default=0.0,
            help=f"invisible for this long first: 0s to {MAX_DELAY / 86400:g}d ({DURATIONS}); "
            "shorter than --ttl; not on OCI Queue",
        )
        sub.add_argument(
            "--ttl",
            type=_ttl,
            default=None,
            help=f"time to live: 1s or more ({DURATIONS}), or -1 never expires; default "
            f"{DEFAULT_TTL_SECONDS / 86400:g}d; not on OCI Queue",
        )
    if name == "peek":
        sub.add_argument(
            "--max",
            type=_positive,
            default=None,
            metavar="N",
            help="at most N messages: 1 to what one receive of the backend returns (32 on Azure "
            "Storage and the embedded queue), which is the default",
        )
    if name == "poison":
        sub.add_argument(
            "--max",
            type=_positive,
            default=None,
            metavar="N",
            help="requeue or purge at most N messages, N at least 1 (default: all); list shows at "
            "most one receive's worth (32 on Azure Storage and the embedded queue)",
        )
    if name != "send":
        sub.add_argument("--json", action="store_true", help="print JSON")


def _add_spark_actions(spark: argparse.ArgumentParser) -> None:
    """The actions of ``worker spark`` (start-cluster, start-connect, status, stop) and their arguments."""
    actions = spark.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, help in (
        ("start-cluster", "start a standalone master and one worker, detached; print the spark:// URL once ready"),
        ("start-connect", "start a Spark Connect server, detached; print the sc:// URL once ready"),
        ("status", "say which servers started here run"),
        ("stop", "stop the servers started here (SIGTERM, then SIGKILL after --timeout)"),
    ):
        sub = actions.add_parser(action, help=help, description=help)
        sub.set_defaults(handler=cmd_spark)
        sub.add_argument(
            "--state",
            default=None,
            metavar="FOLDER",
            help="where the servers' pids, logs and work folders are kept (default: .worker/spark beside "
            "the settings file every command finds, else in the current folder)",
        )
        if action.startswith("start-"):
            sub.add_argument(
                "--host",
                type=_spark_host,
                default="127.0.0.1",
                metavar="ADDRESS",
                help="address to listen on and to put in the URL (default 127.0.0.1: this machine only)",
            )
            sub.add_argument(
                "--port", type=_port, default=None, help="port of the master or the Connect server (default: a free one)"
            )
        if action == "start-cluster":
            sub.add_argument(
                "--cores", type=_positive, default=None, metavar="N", help="cores the worker offers (default: every core)"
            )
            sub.add_argument(
                "--memory",
                type=_memory,
                default=None,
                metavar="AMOUNT",
                help="memory the worker offers executors, such as 4g (default: the machine's less 1g)",
            )
        if action == "start-connect":
            sub.add_argument(
                "--master",
                default="local[*]",
                help="where the server runs its jobs: local[*] (default), or the spark:// URL of a "
                "cluster (start-cluster's)",
            )
        sub.add_argument(
            "--timeout",
            type=_startup_timeout,
            default=120.0 if action.startswith("start-") else 20.0,
            help="how long a server may take to be ready (start-*: default 2m), or to stop after "
            "SIGTERM before it is killed (stop: default 20s)",
        )


def _redacted_traceback(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    """``sys.excepthook``: an exception no command expected, its traceback written as Python would, less its secrets
    (an SDK's error that quotes the connection string it was given)."""
    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


def _redacted_thread_traceback(unhandled: threading.ExceptHookArgs) -> None:
    """``threading.excepthook``: as Python's own (a thread's SystemExit is silent), redacted."""
    if issubclass(unhandled.exc_type, SystemExit):
        return
    sys.stderr.write(f"Exception in thread {unhandled.thread.name if unhandled.thread else '?'}:\n")
    _redacted_traceback(unhandled.exc_type, unhandled.exc_value or unhandled.exc_type(), unhandled.exc_traceback)


def main(argv: Sequence[str] | None = None) -> int:
    # Every message of the command passes the log's redaction: the secrets of the environment are known from the
    # start, and what no command expected (a traceback) is redacted too.
    remember_environment(os.environ)
    if argv is None:  # the process is the command's (a test calling main() keeps its own hooks)
        sys.excepthook = _redacted_traceback
        threading.excepthook = _redacted_thread_traceback
    args = _parser().parse_args(argv)
    if args.command != "run":
        # Without this, a storage retry's warning would be printed by structlog's default set-up on stdout, in the
        # middle of --json output; the command's own error line says what finally went wrong.
        configure_logging("ERROR")
    try:
        if args.command == "run" and args.app is None:
            args.app = discover(Path.cwd(), os.environ)
        # The app's local.settings.json (found as host.yaml is) becomes environment settings first, as Core Tools
        # makes them: connections, %NAME% settings and WORKER__ overrides alike then see them.
        app = getattr(args, "app", None)
        found = find((local_settings.FILE,), app)
        folder = found.parent if found else (app_directory(app) if app else None) or Path.cwd()
        args.local_settings = local_settings.apply(folder, os.environ)
        remember_environment(os.environ)  # local.settings.json's Values are environment settings now
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except (
        UsageError,
        AppLoadError,
        ConfigError,
        InvalidArgument,
        MessageTooLarge,
        UnusableFile,
        StartupRefused,
        LocalSettingsError,
    ) as exc:
        print(redact(f"worker {args.command}: error: {exc}"), file=sys.stderr)
        if args.command == "run" and f"connection string '{DEFAULT_CONNECTION}' does not exist" in str(exc):
            print(MISSING_STORAGE_HINT, file=sys.stderr)
        return 2
    except (QueueError, SparkServerError) as exc:
        print(redact(f"worker {args.command}: error: {exc}"), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

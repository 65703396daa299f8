"""The host's structured log: one stream of lines, JSON off a terminal, with no secret in any of them.

Compact lines on a terminal (:mod:`.compact`), JSON elsewhere, or what ``--log-format`` forces.
``logging`` records pass the same renderer and redaction.
A line the stream refuses is dropped and counted (:class:`LogSink`), never raised into the host.
``worker run`` writes to its own copy of stderr (:func:`private_stderr`).
So a handler that closes descriptor 2 cannot close or redirect the host's log.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, TextIO, cast

import structlog
from structlog.typing import EventDict

from worker.observability.compact import CompactRenderer
from worker.observability.redaction import redact, redact_value, remember_environment

__all__ = ["redact"]  # where the log's redaction has always been found; it lives in .redaction


def _redact_event(_logger: object, _method: str, event: EventDict) -> EventDict:
    """A structlog processor: no log line carries a secret, whichever library put it in the message."""
    return {key: redact_value(value) for key, value in event.items()}


#: The function and invocation id every line logged in an invocation's task names (and in its handler's thread, which
#: copies the task's context): one ContextVar set once per invocation, where structlog's ``bind_contextvars`` sets one
#: per key and builds a token for each.
_invocation: ContextVar[tuple[str, str] | None] = ContextVar("worker_invocation", default=None)


def bind_invocation(function: str, invocation_id: str) -> None:
    """Name ``function`` and ``invocation_id`` on every line logged from now on in the current context."""
    _invocation.set((function, invocation_id))


def _merge_invocation(_logger: object, _method: str, event: EventDict) -> EventDict:
    """A structlog processor: the invocation's function and id, on a line that does not name its own."""
    named = _invocation.get()
    if named is not None:
        event.setdefault("function", named[0])
        event.setdefault("invocation_id", named[1])
    return event


def _context_function() -> str | None:
    """The function the current context logs for: bound with structlog's ``bind_contextvars``, or the invocation's."""
    function = structlog.contextvars.get_contextvars().get("function")
    if function is None and (named := _invocation.get()) is not None:
        function = named[0]
    return function


class BindOnUse:
    """A structlog logger bound to ``fields`` when it is first used, then that bound logger.

    Every message's invocation has a logger bound to its function, queue and ids, and most never write a line
    (a success logs only at INFO): binding on use spares them the bind (bench/README.md).
    """

    __slots__ = ("_logger", "_fields", "_bound")

    def __init__(self, logger: Any, **fields: Any) -> None:
        self._logger = logger
        self._fields = fields
        self._bound: Any = None

    def __getattr__(self, name: str) -> Any:
        bound = self._bound
        if bound is None:  # two threads may both bind: the same logger either way
            bound = self._bound = self._logger.bind(**self._fields)
        return getattr(bound, name)


def info_enabled() -> bool:
    """Whether INFO lines are written at all (``worker run --log-level``): lines that would be dropped need not be built.

    ``configure_logging`` sets the root logger's level, so the answer is read there rather than kept in a global.
    """
    return logging.root.isEnabledFor(logging.INFO)


def debug_enabled() -> bool:
    """Whether DEBUG lines are written at all (see :func:`info_enabled`)."""
    return logging.root.isEnabledFor(logging.DEBUG)


#: Functions' level names (host.json ``logging.logLevel``) and the levels of ``logging`` they stand for: Trace is the
#: host's most verbose level (DEBUG), None a level above every line's (nothing of the category is written).
FUNCTIONS_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "information": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "none": logging.CRITICAL + 10,
}
#: structlog's method names and their levels.
_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


class Categories:
    """Functions' log categories and their levels (host.json ``logging.logLevel``), applied to every line.

    A line's category, as Functions names them: the host's own lines (loggers
    under ``worker``) are ``Function.<name>`` when they are about an invocation
    of that function, else ``Host.General``; a handler's own lines (any other
    logger, while its invocation runs) are ``Function.<name>.User``; other
    libraries' lines are their logger's name. The most specific category
    given that the line's category starts with (at a dot, in any case) sets its
    level, else ``default``, else ``fallback``.
    """

    def __init__(self, levels: Mapping[str, str], fallback: int = logging.INFO) -> None:
        self._levels = {category.lower(): FUNCTIONS_LEVELS[level.lower()] for category, level in levels.items()}
        self.default = self._levels.get("default", fallback)
        self.lowest = min([self.default, *self._levels.values()])

    def level(self, category: str) -> int:
        parts = category.lower().split(".")
        for end in range(len(parts), 0, -1):
            found = self._levels.get(".".join(parts[:end]))
            if found is not None:
                return found
        return self.default

    @staticmethod
    def category(logger: str, function: object) -> str:
        host = logger == "worker" or logger.startswith("worker.")
        if function:
            return f"Function.{function}" if host else f"Function.{function}.User"
        return "Host.General" if host else (logger or "default")

    def drop_below(self, logger: Any, method: str, event: EventDict) -> EventDict:
        """A structlog processor: drop a line under its category's level."""
        category = self.category(getattr(logger, "name", ""), event.get("function"))
        if _METHOD_LEVELS.get(method, logging.INFO) < self.level(category):
            raise structlog.DropEvent
        return event

    def filter(self, record: logging.LogRecord) -> bool:
        """A ``logging`` filter: keep a record at or over its category's level."""
        function = _context_function()
        return record.levelno >= self.level(self.category(record.name, function))


class LogSink:
    """The stream every log line goes to, one write per line, which never raises.

    Why: a log line is written from the completion of a message, the renewal of its lease and the handling of a stop
    signal; a stream that fails there (a handler closed the descriptor, the log collector's pipe is gone, the disk is
    full) must not fail them. The line is dropped and counted (:attr:`dropped`) and the host goes on. One write per
    line, under a lock: the processes of ``--processes N`` share one stderr, and two lines must never interleave.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        #: Lines the stream refused.
        self.dropped = 0
        self._write = stream.write
        self._flush = stream.flush
        self._lock = threading.Lock()

    def isatty(self) -> bool:
        try:
            return self.stream.isatty()
        except (OSError, ValueError):
            return False

    def line(self, text: str) -> None:
        """Write ``text`` (one line and its newline), or count it as dropped."""
        with self._lock:
            try:
                self._write(text)
                self._flush()
            except (OSError, ValueError):  # ValueError: a stream object closed in the process
                self.dropped += 1


class _DescriptorWriter(io.TextIOBase):
    """Text written straight to a file descriptor, one system call per write, nothing buffered.

    Why not a buffered file: one that fails keeps the refused text and writes it with a later line, so a line
    counted as dropped could still come out, torn, once the stream works again.
    """

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "backslashreplace")
        written = os.write(self._fd, data)
        if written < len(data):  # a pipe may take part of a long line when a signal interrupts the write
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(self._fd, view) :]
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""


def private_stderr() -> TextIO:
    """The stream ``worker run`` logs to: its own duplicate of stderr, made now, and ``sys.stderr`` rebound to another.

    Why: a handler (daemonising code, some libraries) may close descriptor 2. Written to 2, the host's lines would
    then fail, and once any later ``open()`` or socket took 2, they would go into that file or connection. The host's
    duplicates keep pointing at the stderr the process started with, whatever happens to 2, and are not inherited by
    the processes a handler starts (which get 2 as it is then). ``sys.stderr`` gets a duplicate of its own, so that
    Python's own writes (tracebacks, ``print(file=sys.stderr)``) survive a closed 2 too, and code closing
    ``sys.stderr`` does not close the log. A stderr already replaced (a test capturing it) is returned as it is.
    """
    stream = sys.stderr
    if sys.stderr is not sys.__stderr__:  # compared as sys.stderr: mypy would narrow ``stream`` to __stderr__'s type
        return stream
    try:
        fd = stream.fileno()
        stream.flush()
    except (OSError, ValueError, AttributeError):
        return stream
    sys.stderr = io.TextIOWrapper(
        open(os.dup(fd), "wb"),  # noqa: SIM115
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=True,
    )
    # typing.TextIO is an ABC of its own, which io's classes do not subclass: the writer is one all the same.
    return cast(TextIO, _DescriptorWriter(os.dup(fd)))


class _SinkLogger:
    """structlog's logger for the host: each rendered line to the :class:`LogSink`, under the name it was asked for
    (``worker.runtime.host``) for :class:`Categories`."""

    __slots__ = ("name", "_line")

    def __init__(self, sink: LogSink, name: str) -> None:
        self.name = name
        self._line = sink.line

    def msg(self, message: str) -> None:
        self._line(message + "\n")

    log = debug = info = warn = warning = fatal = failure = err = error = critical = exception = msg


class _SinkLoggerFactory:
    """Makes a :class:`_SinkLogger` per logger name, all writing to one sink."""

    def __init__(self, sink: LogSink) -> None:
        self.sink = sink

    def __call__(self, *args: Any) -> _SinkLogger:
        return _SinkLogger(self.sink, str(args[0]) if args else "")


class _SinkHandler(logging.Handler):
    """The standard ``logging`` module's lines, formatted as structlog's, to the same :class:`LogSink`."""

    def __init__(self, sink: LogSink) -> None:
        super().__init__()
        self._line = sink.line

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except structlog.DropEvent:  # a line the compact renderer does not show
            return
        except Exception:
            self.handleError(record)
            return
        self._line(text + "\n")


def dropped_lines() -> int:
    """How many log lines this process's sink has dropped since logging was configured (0 before)."""
    factory = structlog.get_config()["logger_factory"]
    return factory.sink.dropped if isinstance(factory, _SinkLoggerFactory) else 0


def always(logger: str, event: str, **fields: Any) -> None:
    """Write one INFO line whatever the levels say (host.json's ``logLevel``, ``--log-level``).

    Why: a host that started must say so once, for the operator and the platform watching its output, even where
    host.json keeps the host's own lines at Warning; it is the one line every run shows. The line goes through the
    configured processors (so it is JSON or text as the others are, with secrets redacted), less the level filter.
    """
    config = structlog.get_config()
    processors = [p for p in config["processors"] if not isinstance(getattr(p, "__self__", None), Categories)]
    line = structlog.wrap_logger(
        config["logger_factory"](logger), processors=processors, wrapper_class=structlog.BoundLogger
    )
    line.info(event, **fields)


#: What ``worker run --log-format`` takes: ``auto`` is compact on a terminal, JSON lines elsewhere.
LOG_FORMATS = ("auto", "compact", "plain", "json")
#: The environment variable that sets the log format where ``--log-format`` is not given; ``worker run`` sets it for
#: the processes it starts.
LOG_FORMAT_ENV = "WORKER_LOG_FORMAT"


def configure_logging(
    level: str | None = "INFO",
    json_lines: bool | None = None,
    stream: TextIO | None = None,
    categories: Mapping[str, str] | None = None,
    *,
    log_format: str = "auto",
    max_dequeue_count: int | None = None,
) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr), in ``log_format`` (:data:`LOG_FORMATS`).

    ``level`` (``--log-level``) sets one level for every line; without it, ``categories`` (host.json's
    ``logging.logLevel``) set each category's, INFO where none applies. ``json_lines``, when given, fixes the form
    whatever ``log_format`` says: JSON, or (False) plain text. ``max_dequeue_count`` is what the compact lines count
    attempts against.
    """
    remember_environment(os.environ)  # the AWS variables and the endpoint token, hidden by value wherever they appear
    sink = LogSink(sys.stderr if stream is None else stream)
    if json_lines is not None:
        log_format = "json" if json_lines else "plain"
    elif log_format == "auto":
        log_format = "compact" if sink.isatty() else "json"
    # The compact renderer formats a traceback itself (the app's frames only) and redacts the whole line it makes.
    rendering: list[structlog.types.Processor] = (
        [CompactRenderer(max_dequeue_count)]
        if log_format == "compact"
        else [
            structlog.processors.format_exc_info,
            _redact_event,
            structlog.processors.JSONRenderer() if log_format == "json" else structlog.dev.ConsoleRenderer(colors=False),
        ]
    )
    by_category = Categories(categories) if level is None and categories else None
    numeric = by_category.lowest if by_category else logging.getLevelName((level or "INFO").upper())
    # structlog's filtering loggers exist for its own levels only: past CRITICAL (every category None) the
    # categories' processor drops what is left.
    numeric = min(numeric, logging.CRITICAL)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        _merge_invocation,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # Category levels are decided once the line's function is known (merged from the contexts), before any work.
    dropping = [by_category.drop_below] if by_category else []
    structlog.configure(
        processors=[*shared[:2], *dropping, *shared[2:], *rendering],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line (print() writes the text and its newline apart): the processes of `--processes N`
        # share one stderr, and two lines must never interleave into one that is not JSON.
        logger_factory=_SinkLoggerFactory(sink),
        cache_logger_on_first_use=True,
    )
    # Lines from the standard logging module (handlers' own logging.info, libraries) go out in the same
    # form, so that the stream stays one JSON object per line.
    handler = _SinkHandler(sink)
    if by_category:
        handler.addFilter(by_category.filter)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            # A record's extra= fields are kept, as Functions keeps them (App Insights' customDimensions).
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder()],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
        )
    )
    # Python warnings (pyspark's UserWarnings, pandas' FutureWarnings) become log lines too, not raw stderr text.
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)  # handlers' own logging.info lines show, as in Functions
    # The SDKs log every request (headers, signatures, session tokens) at DEBUG or INFO: noise, and the place secrets
    # would leak from first. Held at WARNING, whatever --log-level says, unless the settings name them.
    named = {category.lower() for category in categories or ()}
    for sdk in QUIET_SDKS:
        logging.getLogger(sdk).setLevel(logging.NOTSET if _named(sdk, named) else max(numeric, logging.WARNING))
    # azure-identity logs each failed sign-in at WARNING as a page of text; the host's own line names the
    # connection and the cause once per failed call instead.
    logging.getLogger("azure.identity").setLevel(
        logging.NOTSET if "azure.identity" in named else max(numeric, logging.ERROR)
    )


#: The SDKs whose loggers are held at WARNING unless host.json's ``logging.logLevel`` names them (or a logger of
#: theirs): their DEBUG lines carry request headers, signatures and tokens (redacted all the same when named).
QUIET_SDKS = ("azure", "botocore", "boto3", "s3transfer", "urllib3", "oci", "py4j")


def _named(sdk: str, named: set[str]) -> bool:
    """Whether the settings name ``sdk``'s logger or one of its children (``botocore.endpoint``)."""
    return any(category == sdk or category.startswith(sdk + ".") for category in named)

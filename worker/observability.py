"""Structured logs and the host's counters.

Logs go to stderr: readable lines on a terminal, JSON lines elsewhere (a
container's log collector). Counters are kept per function so that the run
summary, and later a metrics endpoint, read the same numbers.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections import Counter
from typing import TextIO

import structlog

#: Counter names, in the order the run summary prints them.
COUNTERS = (
    "received",
    "succeeded",
    "failed",
    "retried",
    "poisoned",
    "released",
    "lease_renewals",
    "leases_lost",
    "completions_skipped",
    "storage_errors",
    "storage_retries",
)


class Metrics:
    """Thread-safe counters keyed by (name, function)."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def inc(self, name: str, function: str = "", amount: int = 1) -> None:
        with self._lock:
            self._counts[(name, function)] += amount

    def get(self, name: str, function: str | None = None) -> int:
        """One function's count, or the total over all functions when ``function`` is None."""
        with self._lock:
            if function is not None:
                return self._counts[(name, function)]
            return sum(n for (key, _), n in self._counts.items() if key == name)

    def by_function(self) -> dict[str, dict[str, int]]:
        """``{function: {counter: n}}`` for every function that counted anything."""
        with self._lock:
            table: dict[str, dict[str, int]] = {}
            for (name, function), n in self._counts.items():
                table.setdefault(function, dict.fromkeys(COUNTERS, 0))[name] = n
            return table


def format_summary(metrics: Metrics, elapsed: float) -> str:
    """The table ``worker run`` prints when it stops."""
    table = metrics.by_function()
    columns = [c for c in COUNTERS if any(row.get(c) for row in table.values())] or ["received"]
    names = sorted(f for f in table if f) or ["(none)"]
    width = max(len("function"), *(len(n) for n in names))
    lines = [f"{'function':<{width}}  " + "  ".join(f"{c:>{max(len(c), 6)}}" for c in columns)]
    for name in names:
        row = table.get(name, {})
        lines.append(f"{name:<{width}}  " + "  ".join(f"{row.get(c, 0):>{max(len(c), 6)}}" for c in columns))
    lines.append(f"ran {elapsed:.1f}s")
    return "\n".join(lines)


#: Secrets as they appear in connection strings and URLs: account keys, SAS signatures and tokens.
_SECRET = re.compile(
    r"(?P<key>AccountKey|SharedAccessSignature|sig|SharedAccessKey)\s*=\s*(?P<value>[^;&\s\"']+)", re.IGNORECASE
)


def redact(text: str) -> str:
    """``text`` with every account key, SAS token and signature replaced by ``***``."""
    return _SECRET.sub(lambda m: f"{m.group('key')}=***", text)


def _redact_value(value: object) -> object:
    """``value`` without secrets: strings redacted, containers walked, other objects by the repr renderers show."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact_value(v) for v in value)
    shown = repr(value)  # what both renderers print for an object that is not JSON
    redacted = redact(shown)
    return value if redacted == shown else redacted


def _redact_event(_logger: object, _method: str, event: dict[str, object]) -> dict[str, object]:
    """A structlog processor: no log line carries a secret, whichever library put it in the message."""
    return {key: _redact_value(value) for key, value in event.items()}


def configure_logging(level: str = "INFO", json_lines: bool | None = None, stream: TextIO | None = None) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr); JSON unless it is a terminal."""
    stream = sys.stderr if stream is None else stream
    if json_lines is None:
        json_lines = not stream.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, _redact_event, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    # Lines from the standard logging module (handlers' own logging.info, libraries) go out in the same
    # form, so that the stream stays one JSON object per line.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _redact_event,
            renderer,
        ],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)  # handlers' own logging.info lines show, as in Functions
    # The Azure SDK logs every request at INFO: noise, and the place secrets would leak from first.
    logging.getLogger("azure").setLevel(max(numeric, logging.WARNING))

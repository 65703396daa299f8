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
from collections.abc import Callable
from typing import TextIO

import structlog
from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

#: Counter names, in the order the run summary prints them.
COUNTERS = (
    "received",
    "succeeded",
    "failed",
    "retried",
    "poisoned",
    "poison_requested",
    "released",
    "lease_renewals",
    "leases_lost",
    "completions_skipped",
    "storage_errors",
    "storage_retries",
)


#: What each counter counts, for the Prometheus exposition.
COUNTER_HELP = {
    "received": "Messages received from storage",
    "succeeded": "Messages whose handler succeeded and that were deleted",
    "failed": "Handler failures (exception or functionTimeout)",
    "retried": "Failed messages released for another attempt",
    "poisoned": "Messages moved to the poison queue",
    "poison_requested": "Messages the handler sent to the poison queue itself (worker.Poison, fail(poison=True))",
    "released": "Messages given back unfinished (shutdown, cancellation)",
    "lease_renewals": "Lease renewals",
    "leases_lost": "Leases found taken by another receiver or gone",
    "completions_skipped": "Completions skipped because the lease was lost",
    "storage_errors": "Storage calls that failed after their retries",
    "storage_retries": "Storage calls retried after a transient failure",
}
Gauge = tuple[str, str, Callable[[], dict[str, float]]]


class Metrics:
    """Thread-safe counters keyed by (name, function), and the Prometheus registry that exposes them.

    The run summary and ``/metrics`` read the same numbers. Gauges are read
    when scraped from callables the host registers (in-flight messages, queue
    lengths), so nothing has to keep them up to date.
    """

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._retry_kinds: Counter[str] = Counter()
        self._gauges: dict[str, Gauge] = {}
        self._lock = threading.Lock()
        self.registry = CollectorRegistry()
        self.handler_seconds = Histogram(
            "worker_handler_duration_seconds", "Time from handler start to its return", ["function"],
            registry=self.registry, buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600),
        )
        self.receive_seconds = Histogram(
            "worker_receive_duration_seconds", "Time one receive call to storage took (poll latency)", ["function"],
            registry=self.registry, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15),
        )
        self.registry.register(_Exposition(self))
        ProcessCollector(registry=self.registry)  # process_* : CPU, resident memory, open file descriptors

    def retried_storage_call(self, kind: str) -> None:
        """A storage call failed transiently and is being retried; ``kind`` is the HTTP status or error type."""
        with self._lock:
            self._retry_kinds[kind] += 1
            self._counts[("storage_retries", "")] += 1

    def gauge(self, name: str, help: str, label: str, read: Callable[[], dict[str, float]]) -> None:
        """Expose ``read()`` (label value -> number) as gauge ``name`` at each scrape."""
        self._gauges[name] = (help, label, read)

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


class _Exposition:
    """Turns the counters and gauges into Prometheus metric families at each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        m = self.metrics
        with m._lock:
            counts = dict(m._counts)
            kinds = dict(m._retry_kinds)
        families: list[Metric] = []
        for name in COUNTERS:
            if name == "storage_retries":
                family = CounterMetricFamily(f"worker_{name}", COUNTER_HELP[name], labels=["kind"])
                for kind, n in sorted(kinds.items()):
                    family.add_metric([kind], n)
            else:
                family = CounterMetricFamily(f"worker_{name}", COUNTER_HELP[name], labels=["function"])
                for (key, function), n in sorted(counts.items()):
                    if key == name and function:
                        family.add_metric([function], n)
            families.append(family)
        for name, (help, label, read) in m._gauges.items():
            gauge = GaugeMetricFamily(name, help, labels=[label])
            for value, number in sorted(read().items()):
                gauge.add_metric([value], number)
            families.append(gauge)
        return families


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


#: Whether INFO lines are written (``configure_logging``'s level); lines that would be dropped need not be built.
_info_lines = True


def info_enabled() -> bool:
    """Whether INFO lines are written at all (``worker run --log-level``)."""
    return _info_lines


def configure_logging(level: str = "INFO", json_lines: bool | None = None, stream: TextIO | None = None) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr); JSON unless it is a terminal."""
    stream = sys.stderr if stream is None else stream
    if json_lines is None:
        json_lines = not stream.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric = logging.getLevelName(level.upper())
    global _info_lines
    _info_lines = numeric <= logging.INFO
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
    # Python warnings (pyspark's UserWarnings, pandas' FutureWarnings) become log lines too, not raw stderr text.
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)  # handlers' own logging.info lines show, as in Functions
    # The Azure SDK logs every request at INFO: noise, and the place secrets would leak from first.
    logging.getLogger("azure").setLevel(max(numeric, logging.WARNING))
    # azure-identity logs each failed sign-in at WARNING as a page of text; the host's own line names the
    # connection and the cause once per failed call instead.
    logging.getLogger("azure.identity").setLevel(max(numeric, logging.ERROR))

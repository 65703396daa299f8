"""The host's counters and gauges: kept per function, so that the run summary and ``/metrics`` read the same numbers."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from itertools import accumulate

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from worker.observability import logs

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
    "checkpoints",
    "leases_lost",
    "completions_skipped",
    "storage_errors",
    "storage_retries",
    "recycles",
    "filtered",
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
    "checkpoints": "Message contents replaced by a handler's checkpoint (msg.checkpoint), each extending its lease",
    "leases_lost": "Leases found taken by another receiver or gone",
    "completions_skipped": "Completions skipped because the lease was lost",
    "storage_errors": "Storage calls that failed after their retries",
    "storage_retries": "Storage calls retried after a transient failure",
    "recycles": "Processes recycled because a sync handler ran past functionTimeout (counted by the process that "
    "settled its message)",
    "filtered": "Messages deleted unhandled because the function's filters matched none of them (a Lambda event's "
    "FilterCriteria)",
}
Gauge = tuple[str, str, Callable[[], dict[str, float]]]


class PerFunction:
    """A histogram labelled by function, observed once per message and read when ``/metrics`` is scraped.

    Kept here rather than in prometheus_client's ``Histogram``, whose ``observe`` takes a lock for the sum and
    walks the buckets one by one, a measurable part of the host's own CPU per message (bench/README.md); the
    exposition is the same histogram family (``_bucket``, ``_count``, ``_sum`` by function).
    """

    def __init__(self, name: str, help: str, buckets: tuple[float, ...]) -> None:  # noqa: A002 -- Prometheus' word
        self.name = name
        self.help = help
        self.bounds = buckets
        #: Per function: the count in each bucket (the last is +Inf), not cumulative, and the sum.
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}
        self._lock = threading.Lock()

    def observe(self, function: str, value: float) -> None:
        with self._lock:
            counts = self._counts.get(function)
            if counts is None:
                counts = self._counts[function] = [0] * (len(self.bounds) + 1)
                self._sums[function] = 0.0
            counts[bisect_left(self.bounds, value)] += 1  # the first bucket whose bound is >= value ("le")
            self._sums[function] += value

    def family(self) -> HistogramMetricFamily:
        with self._lock:
            taken = {function: (list(counts), self._sums[function]) for function, counts in self._counts.items()}
        family = HistogramMetricFamily(self.name, self.help, labels=["function"])
        for function, (counts, total) in sorted(taken.items()):
            cumulative = list(accumulate(counts))
            # prometheus_client.utils has no annotations.
            buckets = [
                (floatToGoString(bound), n)  # type: ignore[no-untyped-call]
                for bound, n in zip(self.bounds, cumulative, strict=False)
            ]
            family.add_metric([function], [*buckets, ("+Inf", cumulative[-1])], sum_value=total)
        return family


class Metrics:
    """Thread-safe counters keyed by (name, function), and the Prometheus registry that exposes them.

    The run summary and ``/metrics`` read the same numbers. Gauges are read
    when scraped from callables the host registers (in-flight messages, queue
    lengths), so nothing has to keep them up to date.
    """

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._retry_kinds: Counter[str] = Counter()
        self._middleware_failures: Counter[str] = Counter()
        self._gauges: dict[str, Gauge] = {}
        self._lock = threading.Lock()
        self.registry = CollectorRegistry()
        self.handler_seconds = PerFunction(
            "worker_handler_duration_seconds",
            "Time from handler start to its return",
            (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600),
        )
        self.receive_seconds = PerFunction(
            "worker_receive_duration_seconds",
            "Time one receive call to storage took (poll latency)",
            (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15),
        )
        self.registry.register(_Exposition(self))
        ProcessCollector(registry=self.registry)  # process_* : CPU, resident memory, open file descriptors

    def retried_storage_call(self, kind: str) -> None:
        """A storage call failed transiently and is being retried; ``kind`` is the HTTP status or error type."""
        with self._lock:
            self._retry_kinds[kind] += 1
            self._counts[("storage_retries", "")] += 1

    def middleware_failed(self, middleware: str) -> None:
        """A hook of ``middleware`` raised (the host went on without it)."""
        with self._lock:
            self._middleware_failures[middleware] += 1

    def middleware_failures(self, middleware: str) -> int:
        with self._lock:
            return self._middleware_failures[middleware]

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
            hooks = dict(m._middleware_failures)
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
        family = CounterMetricFamily(
            "worker_middleware_errors", "Middleware hooks that raised (the host went on without them)", labels=["middleware"]
        )
        for middleware, n in sorted(hooks.items()):
            family.add_metric([middleware], n)
        families.append(family)
        for name, (help, label, read) in m._gauges.items():
            gauge = GaugeMetricFamily(name, help, labels=[label])
            for value, number in sorted(read().items()):
                gauge.add_metric([value], number)
            families.append(gauge)
        families += [m.handler_seconds.family(), m.receive_seconds.family()]
        # The process's, not a function's: its log stream refused them (stderr closed, a broken pipe, a full disk).
        families.append(
            CounterMetricFamily(
                "worker_log_lines_dropped",
                "Log lines dropped because the log stream refused them (closed, broken pipe, disk full)",
                value=logs.dropped_lines(),
            )
        )
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
    if dropped := logs.dropped_lines():  # on stdout, which may still work when the log's stream did not
        lines.append(f"log lines dropped: {dropped} (the log stream refused them)")
    lines.append(f"ran {elapsed:.1f}s")
    return "\n".join(lines)

"""What the console needs that the counters do not keep: recent handler times and recent failures, both bounded."""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from worker.invocation import Invocation
from worker.middleware import Middleware
from worker.model import Fate, Finished, Outcome, Result

#: Handler times kept per function for its percentiles: the latest ones.
RECENT_TIMES = 512
#: Handler times kept per function and sample window for the latency chart (a uniform sample of the window's).
WINDOW_TIMES = 256
#: Failures kept, newest first, over all functions.
RECENT_FAILURES = 100
#: Longest reason kept for a failure, in characters.
REASON_CHARS = 1000
#: The completions that follow a failed attempt.
FAILED = {Fate.RETRIED: "retried", Fate.LEFT: "left", Fate.POISONED: "poisoned"}


def percentile(ordered: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ``ordered`` (sorted); None when empty."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


@dataclass
class HandlerTimes:
    """One function's handler times: the latest (for percentiles) and a fixed-size sample of the current window."""

    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_TIMES))
    window: list[float] = field(default_factory=list)
    seen: int = 0

    def add(self, seconds: float) -> None:
        self.recent.append(seconds)
        self.seen += 1
        if len(self.window) < WINDOW_TIMES:
            self.window.append(seconds)
        elif (slot := random.randrange(self.seen)) < WINDOW_TIMES:  # reservoir sampling: each time equally likely
            self.window[slot] = seconds

    def take_window(self) -> list[float]:
        """The window's sample, sorted; a new window begins."""
        window, self.window, self.seen = sorted(self.window), [], 0
        return window


class ConsoleRecorder(Middleware):
    """Keeps, per function, its latest handler times, and the latest failures with their reasons and ids.

    Every hook runs on the event loop, as the console's reads do: nothing here needs a lock.
    """

    def __init__(self) -> None:
        self.times: dict[str, HandlerTimes] = {}
        self.failures: deque[dict[str, Any]] = deque(maxlen=RECENT_FAILURES)

    def after_invocation(self, invocation: Invocation, result: Result) -> None:
        if invocation.handler_seconds is not None:
            self.times_of(invocation.function.name).add(invocation.handler_seconds)

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        if done not in FAILED or result.outcome not in (Outcome.FAILED, Outcome.POISON):
            return
        self.failures.appendleft(
            {
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "function": item.function,
                "queue": item.queue,
                "messageId": item.raw.id,
                "invocationId": item.invocation_id,
                "dequeueCount": item.raw.dequeue_count,
                "outcome": FAILED[done],
                "reason": result.reason[:REASON_CHARS],
            }
        )

    def times_of(self, function: str) -> HandlerTimes:
        found = self.times.get(function)
        if found is None:
            found = self.times[function] = HandlerTimes()
        return found

    def percentiles(self, function: str) -> dict[str, float | None]:
        """p50, p95, p99 and max of the function's latest handler times, in milliseconds."""
        ordered = sorted(self.times_of(function).recent)
        found = {name: percentile(ordered, fraction) for name, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
        found["max"] = ordered[-1] if ordered else None
        return {name: None if value is None else round(value * 1000, 1) for name, value in found.items()}

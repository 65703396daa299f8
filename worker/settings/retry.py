"""Retry policies: how long a failed message stays invisible before its next attempt.

host.json's ``retry`` shape (``fixedDelay``, ``exponentialBackoff``), or ``@app.retry(...)`` in code.
Functions ignores it for queue triggers; here it sets the release's visibility timeout.
The wait then holds no worker, and survives a restart.
Attempts stay ``maxDequeueCount``'s, so ``maxRetryCount`` is accepted and has no effect.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Each delay is jittered by up to this fraction either way, so that a burst of failures does not come back at once.
JITTER = 0.2

_STRATEGIES = {"fixeddelay": "fixedDelay", "exponentialbackoff": "exponentialBackoff"}
_KEYS = {
    "fixedDelay": {"strategy", "delayInterval", "maxRetryCount"},
    "exponentialBackoff": {"strategy", "minimumInterval", "maximumInterval", "maxRetryCount"},
}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A retry strategy; ``delay(n)`` is the wait after the n-th failed attempt, in seconds."""

    strategy: str
    #: fixedDelay's interval, or exponentialBackoff's first one.
    minimum: float
    #: exponentialBackoff's ceiling (equal to ``minimum`` for fixedDelay).
    maximum: float

    def delay(self, attempt: int, jitter: Callable[[float, float], float] = random.uniform) -> float:
        """``minimum`` for fixedDelay; ``min(maximum, minimum * 2^(attempt-1))`` for exponentialBackoff; +-20 %."""
        base = self.minimum
        if self.strategy == "exponentialBackoff":
            base = min(self.maximum, self.minimum * 2 ** min(max(attempt, 1) - 1, 60))
        return max(0.0, base * jitter(1 - JITTER, 1 + JITTER))

    def describe(self) -> str:
        if self.strategy == "fixedDelay":
            return f"fixedDelay {self.minimum:g}s"
        return f"exponentialBackoff {self.minimum:g}s..{self.maximum:g}s"


def parse_retry(value: Any, parse_duration: Callable[[Any], float]) -> RetryPolicy:
    """A RetryPolicy from host.json's ``retry`` mapping (also ``@app.retry``'s snake_case names and strategies).

    Raises ValueError saying what is wrong, for ConfigError to wrap.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping with strategy and its intervals, got {value!r}")
    fields = {_camel(str(k)): v for k, v in value.items() if v is not None}
    raw_strategy = str(fields.get("strategy", ""))
    strategy = _STRATEGIES.get(raw_strategy.replace("_", "").lower())
    if strategy is None:
        raise ValueError(f"strategy must be fixedDelay or exponentialBackoff, got {raw_strategy!r}")
    unknown = sorted(set(fields) - _KEYS[strategy])
    if unknown:
        raise ValueError(
            f"{strategy} takes {', '.join(sorted(_KEYS[strategy] - {'strategy'}))}; unknown: {', '.join(unknown)}"
        )

    def interval(key: str) -> float:
        if key not in fields:
            raise ValueError(f"{strategy} needs {key}")
        seconds = parse_duration(fields[key])
        if seconds < 0:
            raise ValueError(f"{key} must not be negative, got {fields[key]!r}")
        return seconds

    if strategy == "fixedDelay":
        delay = interval("delayInterval")
        return RetryPolicy(strategy, delay, delay)
    low, high = interval("minimumInterval"), interval("maximumInterval")
    if high < low:
        raise ValueError(f"maximumInterval ({high:g}s) is shorter than minimumInterval ({low:g}s)")
    return RetryPolicy(strategy, low, high)


def _camel(name: str) -> str:
    """``delay_interval`` -> ``delayInterval``; camelCase names are kept."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)

"""The last hour of each function, in a fixed ring of ten-second samples: what the console's charts draw.

A sample is a row of numbers in one preallocated ``array`` per function.
So the footprint is ``SLOTS * (1 + len(FIELDS)) * 8`` bytes per function, whatever the traffic.
Counters are cumulative: a rate over any span is two reads, and a missed sample loses nothing.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

#: Seconds between samples; samples fall on multiples of it (wall clock), so processes' samples line up.
INTERVAL = 10.0
#: Samples kept: an hour.
SLOTS = 360
#: What each sample holds, after its time.
FIELDS = ("depth", "inFlight", "received", "succeeded", "failed", "poisoned", "p50", "p95")
#: The counters among them (cumulative).
COUNTERS = ("received", "succeeded", "failed", "poisoned")
#: The span the console's rates are taken over, in seconds.
RATE_SPAN = 60.0


class Ring:
    """One function's samples, oldest overwritten first."""

    __slots__ = ("_rows", "_next", "_count")

    def __init__(self) -> None:
        self._rows = array("d", [math.nan]) * (SLOTS * (1 + len(FIELDS)))
        self._next = 0
        self._count = 0

    def add(self, at: float, values: dict[str, float | None]) -> None:
        width = 1 + len(FIELDS)
        start = self._next * width
        self._rows[start] = at
        for offset, name in enumerate(FIELDS, 1):
            value = values.get(name)
            self._rows[start + offset] = math.nan if value is None else float(value)
        self._next = (self._next + 1) % SLOTS
        self._count = min(self._count + 1, SLOTS)

    def rows(self) -> list[tuple[float, ...]]:
        """Every sample, oldest first: (time, *FIELDS)."""
        width = 1 + len(FIELDS)
        first = (self._next - self._count) % SLOTS
        return [
            tuple(self._rows[(first + i) % SLOTS * width : ((first + i) % SLOTS + 1) * width]) for i in range(self._count)
        ]

    def at_or_before(self, moment: float) -> tuple[float, ...] | None:
        """The newest sample taken at or before ``moment``, else the oldest; None before the first."""
        rows = self.rows()
        earlier = [row for row in rows if row[0] <= moment]
        return earlier[-1] if earlier else (rows[0] if rows else None)

    @property
    def nbytes(self) -> int:
        return self._rows.itemsize * len(self._rows)


class History:
    """The rings of every function."""

    def __init__(self, functions: list[str]) -> None:
        self.rings = {name: Ring() for name in functions}

    def add(self, function: str, at: float, values: dict[str, float | None]) -> None:
        self.rings[function].add(at, values)

    def rates(self, function: str, now: float, counts: dict[str, int]) -> dict[str, float]:
        """Per second over the last :data:`RATE_SPAN` seconds (over what there is, early on), from ``counts`` now."""
        base = self.rings[function].at_or_before(now - RATE_SPAN)
        if base is None or now - base[0] <= 0:
            return dict.fromkeys(COUNTERS, 0.0)
        span = now - base[0]
        return {name: round(max(0.0, counts[name] - base[1 + FIELDS.index(name)]) / span, 3) for name in COUNTERS}

    def series(self) -> dict[str, Any]:
        """The charts' data: per function, times and each field (counters as per-second rates between samples)."""
        out: dict[str, Any] = {}
        for function, ring in self.rings.items():
            rows = ring.rows()
            series: dict[str, list[float | None]] = {"t": [row[0] for row in rows]}
            for offset, name in enumerate(FIELDS, 1):
                if name in COUNTERS:
                    series[name] = [
                        None,
                        *(
                            _clean((b[offset] - a[offset]) / (b[0] - a[0]) if b[0] > a[0] else None)
                            for a, b in zip(rows, rows[1:], strict=False)
                        ),
                    ]
                else:
                    series[name] = [_clean(row[offset]) for row in rows]
            out[function] = series
        return {"interval": INTERVAL, "functions": out}

    @property
    def nbytes(self) -> int:
        """The rings' storage, in bytes: fixed once made."""
        return sum(ring.nbytes for ring in self.rings.values())


def _clean(value: float | None) -> float | None:
    """JSON has no NaN: an unknown value is null."""
    return None if value is None or math.isnan(value) else round(value, 3)

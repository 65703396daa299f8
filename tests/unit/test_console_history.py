"""The console's history ring: a fixed footprint however long the host runs, rates from cumulative counters, the
processes' samples lined up by time; and its handler-time percentiles."""

from __future__ import annotations

from worker.runtime.console.history import FIELDS, INTERVAL, RATE_SPAN, SLOTS, History
from worker.runtime.console.merge import merge_history
from worker.runtime.console.recorder import percentile


def sample(received: int, depth: float | None = 0) -> dict[str, float | None]:
    return {
        "depth": depth,
        "inFlight": 1,
        "received": received,
        "succeeded": received,
        "failed": 0,
        "poisoned": 0,
        "p50": 5.0,
        "p95": 9.0,
    }


def test_the_ring_keeps_the_last_hour_in_the_memory_it_started_with() -> None:
    history = History(["f"])
    before = history.nbytes
    assert before == SLOTS * (1 + len(FIELDS)) * 8
    for n in range(3 * SLOTS):
        history.add("f", n * INTERVAL, sample(n))
    assert history.nbytes == before
    rows = history.rings["f"].rows()
    assert len(rows) == SLOTS
    assert [row[0] for row in rows] == [n * INTERVAL for n in range(2 * SLOTS, 3 * SLOTS)]
    series = history.series()["functions"]["f"]
    assert series["received"][1:] == [1 / INTERVAL] * (SLOTS - 1)  # cumulative counters drawn as rates
    assert series["received"][0] is None


def test_rates_are_taken_over_the_last_minute_or_what_there_is() -> None:
    history = History(["f"])
    history.add("f", 0.0, sample(0))
    assert history.rates("f", 5.0, {"received": 10, "succeeded": 10, "failed": 0, "poisoned": 0})["received"] == 2.0
    for n in range(1, 13):
        history.add("f", n * INTERVAL, sample(n * 100))
    now = 12 * INTERVAL + 5
    rates = history.rates("f", now, {"received": 1300, "succeeded": 1300, "failed": 0, "poisoned": 0})
    base = (now - RATE_SPAN) // INTERVAL * INTERVAL  # the newest sample at least a minute old
    assert rates["received"] == round((1300 - base / INTERVAL * 100) / (now - base), 3)


def test_processes_samples_line_up_by_time_counters_add_and_depth_does_not() -> None:
    one, two = History(["f"]), History(["f"])
    for n in range(3):
        one.add("f", n * INTERVAL, sample(n * 10, depth=4))
        two.add("f", (n + 1) * INTERVAL, sample(n * 20, depth=4))
    merged = merge_history([one.series(), two.series()])["functions"]["f"]
    assert merged["t"] == [0.0, 10.0, 20.0, 30.0]
    assert merged["received"] == [None, 1.0, 1.0 + 2.0, 2.0]
    assert merged["depth"] == [4.0, 4.0, 4.0, 4.0]
    assert merged["inFlight"] == [1.0, 2.0, 2.0, 1.0]


def test_percentiles_are_nearest_rank() -> None:
    ordered = [float(n) for n in range(1, 7)]
    assert [percentile(ordered, f) for f in (0.5, 0.95, 0.99)] == [3.0, 6.0, 6.0]
    assert percentile(list(range(1, 101)), 0.95) == 95
    assert percentile([], 0.5) is None

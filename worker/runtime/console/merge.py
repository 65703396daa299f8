"""The console's views of several worker processes as one, for the supervisor of ``worker run --processes N``.

Leases, failures and poison actions are listed together, each marked with its process.
Counters, rates and messages held add up.
Queue depth and poison are the same storage seen by each: the first answer is taken.
Handler-time percentiles do not add: the slowest process's are shown.
"""

from __future__ import annotations

from typing import Any

from worker.runtime.console.history import COUNTERS
from worker.runtime.console.recorder import RECENT_FAILURES
from worker.runtime.console.state import LEASES_SHOWN

#: History fields that add up over processes; the others are the same queue seen by each (depth) or do not add
#: (latency: the slowest is kept).
ADDED = ("inFlight", *COUNTERS)


def merge_state(states: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """One ``/console/api/state`` from each answering process, as (process index, state)."""
    if not states:
        return {
            "functions": [],
            "leases": {"total": 0, "limit": LEASES_SHOWN, "shown": []},
            "failures": [],
            "poison": [],
            "poisonActions": [],
            "facts": {},
            "lookedAt": None,
        }
    first = states[0][1]
    functions: dict[str, dict[str, Any]] = {}
    for _, state in states:
        for f in state["functions"]:
            if f["name"] not in functions:
                functions[f["name"]] = {
                    **f,
                    "rates": dict(f["rates"]),
                    "totals": dict(f["totals"]),
                    "concurrency": dict(f["concurrency"]),
                    "times": dict(f["times"]),
                }
                continue
            into = functions[f["name"]]
            into["held"] += f["held"]
            into["concurrency"]["inUse"] += f["concurrency"]["inUse"]
            into["concurrency"]["limit"] += f["concurrency"]["limit"]
            for key in into["rates"]:
                into["rates"][key] = round(into["rates"][key] + f["rates"][key], 3)
            for key in into["totals"]:
                into["totals"][key] += f["totals"][key]
            for key, value in f["times"].items():
                if value is not None and (into["times"][key] is None or value > into["times"][key]):
                    into["times"][key] = value
    leases = [{**lease, "process": index} for index, state in states for lease in state["leases"]["shown"]]
    leases.sort(key=lambda lease: -lease["ageSeconds"])
    failures = [{**failure, "process": index} for index, state in states for failure in state["failures"]]
    failures.sort(key=lambda failure: failure["at"], reverse=True)
    facts = dict(first["facts"])
    facts["processes"] = len(states)
    facts["pid"] = [state["facts"]["pid"] for _, state in states]
    facts["problems"] = [f"process {index}: {problem}" for index, state in states for problem in state["facts"]["problems"]]
    facts["ready"] = not facts["problems"]
    limit = first["leases"]["limit"]
    return {
        "functions": list(functions.values()),
        "leases": {"total": sum(state["leases"]["total"] for _, state in states), "limit": limit, "shown": leases[:limit]},
        "failures": failures[:RECENT_FAILURES],
        "poison": first["poison"],
        "poisonActions": [
            {**action, "process": index} for index, state in states for action in state.get("poisonActions", [])
        ],
        "facts": facts,
        "lookedAt": first.get("lookedAt"),
    }


def merge_history(histories: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``/console/api/history`` from each answering process: samples lined up by their time (they fall on the
    same multiples of the interval)."""
    if not histories:
        return {"interval": None, "functions": {}}
    out: dict[str, Any] = {}
    for history in histories:
        for function, series in history["functions"].items():
            by_time = out.setdefault(function, {})
            for i, at in enumerate(series["t"]):
                row = by_time.setdefault(at, {})
                for name, values in series.items():
                    if name == "t" or values[i] is None:
                        continue
                    if name in ADDED:
                        row[name] = row.get(name, 0) + values[i]
                    else:  # the same queue's depth, or a latency: the largest seen
                        row[name] = max(row.get(name, values[i]), values[i])
    functions = {}
    for function, by_time in out.items():
        times = sorted(by_time)
        names = {name for row in by_time.values() for name in row}
        functions[function] = {"t": times, **{name: [by_time[at].get(name) for at in times] for name in sorted(names)}}
    return {"interval": histories[0]["interval"], "functions": functions}

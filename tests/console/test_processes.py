"""The console of ``worker run --processes 2``: the supervisor serves it, each view the two processes' as one."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.support import APP, ConsoleHost
from tests.host.processes import WorkerProcess, worker_environment, write_host_yaml
from tests.support import free_port, poll

pytestmark = pytest.mark.subprocess


@pytest.fixture
def host(tmp_path: Path) -> Iterator[ConsoleHost]:
    """Two worker processes under one supervisor, with no token set (so the console is read-only), on loopback
    (where the console's data answers without one)."""
    port = free_port()
    config = write_host_yaml(
        tmp_path,
        queues={"batchSize": 1},
        worker={"httpPort": port, "httpHost": "127.0.0.1", "leaseDuration": "2s", "drainTimeout": "2s"},
    )
    worker = WorkerProcess(config, worker_environment(CONSOLE_DIR=str(tmp_path)), app=APP, args=("--processes", "2"))
    worker.start()
    try:
        worker.wait_for_events("host started", 2, 60)
        yield ConsoleHost(worker, port, tmp_path, None)
    finally:
        worker.stop()


def test_the_supervisor_serves_the_console_of_both_processes_as_one(host: ConsoleHost) -> None:
    with urllib.request.urlopen(host.url, timeout=10) as page:
        assert (page.status, page.headers.get_content_type()) == (200, "text/html")
        assert b'<script src="/console/console.js"' in page.read()
    pids = sorted(int(line["pid"]) for line in host.worker.lines() if line.get("event") == "host started")
    state = poll(lambda: (s := host.state())["facts"].get("processes") == 2 and s, 15, what="both processes' state")
    assert sorted(state["facts"]["pid"]) == pids
    # The settings shown are those the console is reached by, not a process's own loopback port.
    shown = state["facts"]["settings"]
    assert (shown["worker.httpPort"], shown["worker.httpHost"], shown["worker.processes"]) == (
        str(host.port),
        "127.0.0.1",
        "2",
    ), shown

    for number in range(8):
        host.send("console-quick", f"m{number}")
    held = [host.send("console-slow", "30"), host.send("console-slow", "30")]

    def counted() -> dict[str, Any] | None:
        s = host.state()
        quick = next(f for f in s["functions"] if f["name"] == "quick")
        return s if quick["totals"]["succeeded"] == 8 and s["leases"]["total"] == 2 else None

    state = poll(counted, 30, what="8 quick messages counted and 2 slow ones held, over both processes")
    handled = {line.split()[1] for line in host.handled() if line.startswith("quick ")}
    assert handled == {f"m{n}" for n in range(8)}
    quick = next(f for f in state["functions"] if f["name"] == "quick")
    assert quick["concurrency"]["limit"] == 2 * 64  # each process's maxInFlight
    assert sorted(lease["messageId"] for lease in state["leases"]["shown"]) == sorted(held)
    assert {lease["process"] for lease in state["leases"]["shown"]} <= {0, 1}
    slow = next(f for f in state["functions"] if f["name"] == "slow")
    assert (slow["held"], slow["concurrency"]["inUse"]) == (2, 2)

    status, history = host.request("/console/api/history")
    assert status == 200 and set(history["functions"]) == {"quick", "slow", "fragile"}
    assert history["functions"]["quick"]["t"] == sorted(history["functions"]["quick"]["t"])

    # No token set: the poison actions are refused by the processes, and the supervisor says so.
    host.send("console-fragile", "poisoned")
    poll(
        lambda: [p["count"] for p in host.state()["poison"] if p["function"] == "fragile"] == [1],
        20,
        what="the fragile message in the poison view",
    )
    for action in ("requeue-all", "purge"):
        status, answer = host.request(f"/console/api/poison/fragile/{action}", method="POST")
        assert status == 403 and "token" in answer["error"]
    assert [p["count"] for p in host.state()["poison"] if p["function"] == "fragile"] == [1]

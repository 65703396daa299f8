"""A 30-second storage outage under a running worker process: it stays up, says so, and finishes every message.

Azurite keeps its data on disk, so the messages survive its restart on the same
port. Messages are in flight when it stops: handlers finish during the outage
and their deletions fail; the worker must keep their leases and complete them
once storage is back, not leave them for their leases to end (which would run
them twice). ``/readyz`` must report the outage and the recovery; ``/healthz``
stays 200 throughout, so an orchestrator does not restart a worker that is only
waiting for storage.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.azurite import Azurite
from tests.host.processes import WorkerProcess, attempts, write_host_yaml
from tests.support import apoll, free_port, get, poll
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

QUEUE = "outage"
MESSAGES = 300
OUTAGE_SECONDS = 30
LEASE_SECONDS = 120

#: The scenario's own waits have deadlines (what each step may take); the suite's per-test limit of
#: 120 s, a guard against hangs, cut it short on a loaded machine where it needed more than the 63 s it takes alone.
pytestmark = pytest.mark.timeout(400)


async def test_worker_rides_out_a_30_second_outage_and_completes_every_message_once(tmp_path: Path) -> None:
    azurite = Azurite(location=tmp_path / "azurite").start()
    revived: Azurite | None = None
    port = free_port()
    record_db = tmp_path / "attempts.sqlite3"
    sender = open_backend(azurite.connection_string, tmp_path)
    await sender.create_queue(QUEUE)
    await asyncio.gather(*(sender.put(QUEUE, encode(f"m{i}", "base64")) for i in range(MESSAGES)))
    # A receive under way as storage stops may have hidden its messages with no answer reaching the worker; they
    # come back when that lease ends. A 2-minute lease brings them back within the wait below, and still outlasts
    # the outage for the messages the worker holds (renewed at half their lease, so 60 s are always left).
    config = write_host_yaml(
        tmp_path, worker={"httpPort": port, "handlerThreads": 8, "drainTimeout": "5s", "leaseDuration": f"{LEASE_SECONDS}s"}
    )
    # Each handler takes 0.3 s, so that messages are in flight and more are waiting when storage goes away.
    env = {
        "RECORD_DB": str(record_db),
        "HANDLER_MODE": "hold",
        "HOLD_SECONDS": "0.3",
        "TRIGGER_QUEUE": QUEUE,
        "AzureWebJobsStorage": azurite.connection_string,
    }
    worker = WorkerProcess(config, env).start()
    try:
        worker.wait_for_log("host started")
        assert get(port, "/readyz")[0] == 200
        poll(lambda: len(done(record_db)) >= 50, 60, what="50 messages handled before the outage")

        azurite.stop()
        went_down = time.monotonic()
        # Its storage check is cached for a few seconds: the first 503 may name only the receives held back.
        poll(
            lambda: (
                (r := get(port, "/readyz"))[0] == 503
                and any("storage unreachable" in p for p in json.loads(r[1])["problems"])
            ),
            20,
            what="/readyz to report the storage unreachable",
        )
        # Through the rest of the outage the process stays up and healthy (checked once a second, not slept).
        while (left := OUTAGE_SECONDS - (time.monotonic() - went_down)) > 0:
            assert worker.proc is not None and worker.proc.poll() is None, worker.log_path.read_text()
            assert get(port, "/healthz")[0] == 200
            time.sleep(min(1.0, left))
        handled_during_outage = len(done(record_db))

        revived = Azurite(location=tmp_path / "azurite", port=azurite.port).start()
        poll(lambda: get(port, "/readyz")[0] == 200, 30, what="/readyz to report the recovery")
        poll(lambda: len(done(record_db)) >= MESSAGES, LEASE_SECONDS + 30, what="every message to be handled")

        async def emptied() -> bool:
            return await sender.approximate_count(QUEUE) == 0

        await apoll(emptied, 60, what="every message to be deleted")
        assert worker.stop(signal.SIGTERM) == 0
        totals = worker.totals()
    finally:
        worker.kill()
        await sender.close()
        azurite.stop()
        if revived is not None:
            revived.stop()

    handled = Counter(row["body"] for row in attempts(record_db) if row["event"] == "done")
    duplicated = sum(n - 1 for n in handled.values())
    lost = MESSAGES - len(handled)
    print(
        f"\nstorage outage of {OUTAGE_SECONDS} s: sent {MESSAGES}, handled {len(handled)}, "
        f"duplicated {duplicated} (leases lost {totals.get('leases_lost', 0)}), lost {lost}; "
        f"handled before storage returned {handled_during_outage}, storage errors {totals.get('storage_errors', 0)}, "
        f"retried calls {totals.get('storage_retries', 0)}"
    )
    assert set(handled) == {f"m{i}" for i in range(MESSAGES)}
    assert duplicated == totals.get("leases_lost", 0) == 0, "a message ran twice though no lease was lost"
    assert totals["succeeded"] == MESSAGES
    assert totals.get("storage_errors", 0) > 0, "the outage went unnoticed"
    events = [line.get("event") for line in worker.lines()]
    assert "storage reachable again" in events


def done(record_db: Path) -> set[str]:
    """Bodies of the messages whose handler has finished."""
    return {row["body"] for row in attempts(record_db) if row["event"] == "done"}

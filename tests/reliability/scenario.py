"""Messages through a real ``worker run`` while a fault proxy breaks a share of its storage calls; what came of them.

Shared by ``tests/reliability/test_faults.py`` (1,000 messages) and ``bench/faults.py`` (20,000 by
default), so that both measure the same thing:

1. an Azurite of its own, on disk (in memory, its extent store is swept every minute by a pass
   that blocks the emulator for seconds once thousands of messages have gone through; see
   bench/throughput.py), and a :class:`FaultProxy` in front of it;
2. the messages are sent straight to Azurite (not through the proxy: set-up is not under test);
3. one ``worker run`` subprocess with ``tests.apps.unique`` talks to storage only through the
   proxy; its handler records each success under UNIQUE (message id, outcome), so a second
   success of a message lands in a ``duplicates`` table;
4. once every message is recorded and the queue is empty, the worker is stopped with SIGTERM and
   its final ``host stopped`` line (every counter) and its log are read.

:func:`account` then explains every duplicate by what the worker logged about that very delivery
(message id and dequeue count are on both sides): a lease it lost (a renewal or a delete found the
pop receipt stale or the message gone), or a deletion that failed for good. A duplicate with
neither is one the worker did not notice.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.azurite import Azurite
from tests.host.processes import WorkerProcess, write_host_yaml
from tests.reliability.faultproxy import FaultProxy, FaultRates, ProxyStats
from tests.support import apoll
from worker.backends.queues import QueueBackend, QueueNotFound
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

QUEUE = "faults"
POISON = f"{QUEUE}-poison"
APP = "tests.apps.unique:app"

#: Log events by which the worker says a delivery's lease is no longer its own (counted in leases_lost).
LEASE_LOST_EVENTS = frozenset(
    {
        "lease lost; the message now belongs to another receiver",  # a renewal found the receipt stale or the message gone
        "message changed hands before completion",  # the delete (or release) did
    }
)
#: The worker gave up completing a handled message (an error that is not transient; transient ones are retried while the
#: lease is kept): the message comes back when the lease ends.
DELETE_GAVE_UP_EVENT = "completion failed; the message returns when its lease ends"
SKIPPED_EVENT = "completion skipped: the lease was lost"
#: A completion's storage call failed after all its retries; the completion is tried again while the lease is kept.
COMPLETION_RETRIED_EVENT = "completion failed; keeping the lease and retrying until storage answers"
POISONED_EVENT = "message moved to the poison queue"


@dataclass(frozen=True)
class Settings:
    """One run. The host.yaml is made fast: a short lease, so that messages whose receive answer was lost come back
    soon and slow messages are renewed (every 0.5 s) while they work; 200 ms polling; batches of 32; and a
    maxDequeueCount that no plausible streak of faults reaches."""

    messages: int = 2000
    fault_rate: float = 0.2
    seed: int = 1
    lease: str = "2s"
    #: Every n-th message works ``slow_seconds`` in its handler, so that its lease is renewed (0: none is slow).
    slow_every: int = 20
    slow_seconds: float = 1.2
    batch_size: int = 32
    max_dequeue_count: int = 20
    #: Seconds the worker gets to handle every message, from its start.
    timeout: float = 60.0
    #: Puts in flight at once while filling the queue.
    send_concurrency: int = 32


@dataclass
class FaultRun:
    """Everything a run left behind, read after the worker stopped."""

    settings: Settings
    #: Message id -> body, for every message sent.
    sent: dict[str, str]
    #: First successes (one per message) and later ones, as the handler recorded them.
    handled: list[dict[str, Any]]
    duplicates: list[dict[str, Any]]
    #: The counters of the worker's final "host stopped" line.
    totals: dict[str, Any]
    log: list[dict[str, Any]]
    proxy: ProxyStats
    exit_code: int
    left_in_queue: int
    poisoned: list[str] = field(default_factory=list)
    #: Seconds from starting the worker until every message was recorded and the queue was empty.
    handling_seconds: float = 0.0
    #: Seconds for the whole run, Azurite's start to the worker's exit.
    elapsed: float = 0.0
    #: Seconds it took to put the messages (straight into Azurite, while the worker starts and begins).
    send_seconds: float = 0.0

    def __repr__(self) -> str:  # pytest shows the fixture's value in failures: the figures, not 2,000 rows
        return f"FaultRun({len(self.sent)} sent, {len(self.handled)} handled, {len(self.duplicates)} duplicates)"

    def events(self, *names: str) -> list[dict[str, Any]]:
        return [line for line in self.log if line.get("event") in names]


@dataclass
class Accounting:
    """Every success of every message, sorted by why it happened more than once (see :func:`account`)."""

    #: Messages sent and never recorded as handled.
    lost: set[str]
    #: Successes beyond the first of each message.
    duplicates: int
    #: Duplicates whose delivery the worker logged a lost lease for: what a duplicate should be.
    with_lease_lost: int
    #: Duplicates whose delivery the worker handled but then failed to delete for good (an error that is not transient).
    with_delete_given_up: int
    #: Duplicates the worker's log does not explain: more than one success of a message without a reason.
    unexplained_duplicates: int
    #: The messages behind ``unexplained_duplicates``, with the dequeue counts of their successful deliveries.
    unexplained: dict[str, list[int]]


def account(run: FaultRun) -> Accounting:
    """Match every success to what the worker logged about the same delivery (message id and dequeue count).

    Each message is deleted by exactly one delivery, whose success the worker saw through. Every
    other successful delivery of it must have a reason in the log: a lost lease (its deletion was
    skipped or refused, and the message came back), or a deletion the worker gave up on. A message
    with more than one success without a reason is an unexplained duplicate. (One with none
    without a reason is a lease counted lost that was not: see :func:`false_lease_losses`.)
    """
    lost_leases = {(line["message_id"], line["dequeue_count"]) for line in run.events(*LEASE_LOST_EVENTS)}
    given_up = {(line["message_id"], line["dequeue_count"]) for line in run.events(DELETE_GAVE_UP_EVENT)} - lost_leases
    successes: dict[str, list[int]] = {}
    for row in [*run.handled, *run.duplicates]:
        successes.setdefault(row["message_id"], []).append(row["dequeue_count"])
    with_lease_lost = with_given_up = unexplained_duplicates = 0
    unexplained: dict[str, list[int]] = {}
    for message_id, deliveries in successes.items():
        extra = len(deliveries) - 1
        lease = sum((message_id, d) in lost_leases for d in deliveries)
        gave_up = sum((message_id, d) in given_up for d in deliveries)
        with_lease_lost += min(lease, extra)
        with_given_up += min(gave_up, extra - min(lease, extra))
        clean = len(deliveries) - lease - gave_up
        if clean > 1:
            unexplained_duplicates += clean - 1
            unexplained[message_id] = sorted(deliveries)
    return Accounting(
        lost=set(run.sent) - set(successes),
        duplicates=len(run.duplicates),
        with_lease_lost=with_lease_lost,
        with_delete_given_up=with_given_up,
        unexplained_duplicates=unexplained_duplicates,
        unexplained=unexplained,
    )


def _rows(db_path: Path, table: str) -> list[dict[str, Any]]:
    with sqlite3.connect(db_path, timeout=30) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY at")]


def _handled_count(db_path: Path) -> int:
    if not db_path.exists():
        return 0
    with sqlite3.connect(db_path, timeout=30) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM handled").fetchone()[0])
        except sqlite3.OperationalError:  # the app has not made its tables yet
            return 0


async def _send(backend: QueueBackend, count: int, concurrency: int) -> dict[str, str]:
    """``count`` messages with distinct bodies, ``concurrency`` puts at a time; id -> body."""
    sent: dict[str, str] = {}
    bodies = iter(range(count))

    async def sender() -> None:
        for i in bodies:
            body = f"message-{i:06d}"
            sent[(await backend.put(QUEUE, encode(body, "base64"))).id] = body

    await asyncio.gather(*(sender() for _ in range(concurrency)))
    return sent


async def _poison_bodies(backend: QueueBackend) -> list[str]:
    try:
        if await backend.approximate_count(POISON) == 0:
            return []
        return [m.content for m in await backend.peek(POISON, 32)]
    except QueueNotFound:
        return []


async def run_scenario(settings: Settings, workdir: Path) -> FaultRun:
    """Run ``settings.messages`` messages through a worker behind a proxy faulting ``settings.fault_rate`` of calls."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    record_db = workdir / "handled.sqlite3"
    emulator = Azurite(location=workdir / "azurite").start()
    proxy = FaultProxy(emulator.port, FaultRates.spread(settings.fault_rate), seed=settings.seed).start()
    direct = open_backend(emulator.connection_string, workdir)
    worker: WorkerProcess | None = None
    try:
        await direct.create_queue(QUEUE)
        config = write_host_yaml(
            workdir,
            queues={
                "batchSize": settings.batch_size,
                "maxDequeueCount": settings.max_dequeue_count,
                "visibilityTimeout": "0s",
            },
            worker={"leaseDuration": settings.lease, "drainTimeout": "10s"},
        )
        env = {
            "AzureWebJobsStorage": proxy.connection_string,
            "RECORD_DB": str(record_db),
            "TRIGGER_QUEUE": QUEUE,
            "SLOW_EVERY": str(settings.slow_every),
            "SLOW_SECONDS": str(settings.slow_seconds),
        }
        worker_started = time.monotonic()
        # It starts (imports, ~1 s) while the queue fills.
        worker = WorkerProcess(config, env, name="worker", app=APP).start()
        sent = await _send(direct, settings.messages, settings.send_concurrency)
        send_seconds = time.monotonic() - worker_started

        async def all_handled() -> bool:
            if worker is not None and worker.proc is not None and worker.proc.poll() is not None:
                raise AssertionError(f"the worker exited with {worker.proc.returncode}: see {worker.log_path}")
            handled = await asyncio.to_thread(_handled_count, record_db)
            return handled >= settings.messages and await direct.approximate_count(QUEUE) == 0

        remaining = settings.timeout - (time.monotonic() - worker_started)
        await apoll(
            all_handled,
            max(remaining, 1),
            interval=0.25,
            what=f"{settings.messages} messages to be handled and the queue to empty",
        )
        handling = time.monotonic() - worker_started
        exit_code = worker.stop(signal.SIGTERM, timeout=30)
        return FaultRun(
            settings=settings,
            sent=sent,
            handled=_rows(record_db, "handled"),
            duplicates=_rows(record_db, "duplicates"),
            totals=worker.totals(),
            log=worker.lines(),
            proxy=proxy.stats(),
            exit_code=exit_code,
            left_in_queue=await direct.approximate_count(QUEUE),
            poisoned=await _poison_bodies(direct),
            handling_seconds=handling,
            send_seconds=send_seconds,
            elapsed=time.monotonic() - started,
        )
    finally:
        if worker is not None:
            worker.kill()
        await direct.close()
        proxy.stop()
        if emulator.proc is not None:
            # Its files are thrown away; a SIGTERM would wait 5 s for Azurite's idle keep-alive timers.
            emulator.proc.kill()
        emulator.stop()


def figures(run: FaultRun) -> dict[str, Any]:
    """The run's figures, as the notes quote them."""
    acc = account(run)
    totals = run.totals
    return {
        "messages sent": len(run.sent),
        "handled (distinct messages)": len({row["message_id"] for row in run.handled}),
        "successes in all": len(run.handled) + len(run.duplicates),
        "duplicated": acc.duplicates,
        "duplicated with lease lost": acc.with_lease_lost,
        "duplicated after a delete gave up": acc.with_delete_given_up,
        "duplicated, unexplained": acc.unexplained_duplicates,
        "lost": len(acc.lost),
        "leases counted lost that were not": len(false_lease_losses(run)),
        "lost leases counted after the lease ran out": len(lost_past_the_lease(run)),
        "poisoned": len(run.poisoned),
        "storage requests (proxy)": run.proxy.requests,
        "forwarded to Azurite": run.proxy.forwarded,
        "faults by kind": dict(sorted(run.proxy.faults.items())),
        "after-forwarding faults on renewals/deletes": {
            op: sum(n for (kind, o), n in run.proxy.by_operation.items() if o == op and kind.endswith("_after"))
            for op in ("receive", "update", "delete")
        },
        "failed calls injected": run.proxy.failed,
        "retries counted by the worker": totals.get("storage_retries", 0),
        "worker counters": {k: v for k, v in totals.items() if isinstance(v, int) and k != "seconds"},
        "sending seconds": round(run.send_seconds, 1),
        "handling seconds": round(run.handling_seconds, 1),
        "elapsed seconds": round(run.elapsed, 1),
    }


def format_figures(run: FaultRun) -> str:
    lines = [
        f"{len(run.sent)} messages, {run.settings.fault_rate:.0%} of storage calls faulted, "
        f"lease {run.settings.lease}, seed {run.settings.seed}"
    ]
    for name, value in figures(run).items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        lines.append(f"  {name + ':':<46} {value}")
    return "\n".join(lines)


def _last_deliveries_logged_lost(run: FaultRun) -> list[tuple[str, int]]:
    """Deliveries (message id, dequeue count) the worker logged a lost lease for, although nobody ever had the message
    again: no later delivery of it succeeded. A lease that was really lost brings the message back."""
    latest: dict[str, int] = {}
    for row in [*run.handled, *run.duplicates]:
        latest[row["message_id"]] = max(latest.get(row["message_id"], 0), row["dequeue_count"])
    lost = {(line["message_id"], line["dequeue_count"]) for line in run.events(*LEASE_LOST_EVENTS)}
    return sorted((m, d) for m, d in lost if latest.get(m, 0) <= d)


def lost_past_the_lease(run: FaultRun) -> list[tuple[str, int]]:
    """Of those, the ones the worker could not tell from a real loss, by its documented rule.

    Their deletion failed after all its retries, and by the time the completion tried again the lease
    had run out (the run's leases are 2 s; a failed call takes longer). Past its lease a message found
    gone may have been deleted by another worker, so the worker counts a lost lease (worker/runtime/lease.py
    ``Lease.holds``). With the default 10-minute lease this does not happen.
    """
    retried = {(line["message_id"], line["dequeue_count"]) for line in run.events(COMPLETION_RETRIED_EVENT)}
    return [delivery for delivery in _last_deliveries_logged_lost(run) if delivery in retried]


def false_lease_losses(run: FaultRun) -> list[tuple[str, int]]:
    """Deliveries counted as a lost lease that was not lost, beyond the documented case of :func:`lost_past_the_lease`."""
    past = set(lost_past_the_lease(run))
    return [delivery for delivery in _last_deliveries_logged_lost(run) if delivery not in past]


def counters(run: FaultRun) -> tuple[dict[str, int], dict[str, int]]:
    """The worker's counters, and what they must be given what the handler recorded and what the worker logged.

    One worker deletes each message exactly once, so ``succeeded`` is the number sent, less the deletions it
    counted as lost leases because they were found done only after the lease ran out. Every delivery it
    received either ran the handler to success (a recorded row), or lost its lease before the handler
    ran. ``leases_lost`` and ``completions_skipped`` are the log lines that say so; the handler never
    fails, so nothing is retried, failed or poisoned.
    """
    successes = {(row["message_id"], row["dequeue_count"]) for row in [*run.handled, *run.duplicates]}
    lost = [(line["message_id"], line["dequeue_count"]) for line in run.events(*LEASE_LOST_EVENTS)]
    never_ran = set(lost) - successes
    names = ("received", "succeeded", "failed", "retried", "poisoned", "leases_lost", "completions_skipped")
    actual = {name: int(run.totals.get(name, 0)) for name in names}
    expected = {
        "received": len(successes) + len(never_ran) + actual["poisoned"] + int(run.totals.get("released", 0)),
        "succeeded": len(run.sent) - len(lost_past_the_lease(run)),
        "failed": 0,
        "retried": 0,
        "poisoned": 0,
        "leases_lost": len(lost),
        "completions_skipped": len(run.events(SKIPPED_EVENT)),
    }
    return actual, expected


def problems(run: FaultRun) -> list[str]:
    """Everything in the run that a correct worker would not have done; empty when all is well."""
    acc = account(run)
    found = []
    if run.exit_code != 0:
        found.append(f"the worker exited with {run.exit_code}")
    if acc.lost or run.left_in_queue:
        found.append(f"{len(acc.lost)} messages lost, {run.left_in_queue} left in the queue")
    if run.poisoned:
        reasons = Counter(line.get("reason") for line in run.events(POISONED_EVENT))
        found.append(f"{len(run.poisoned)} messages poisoned; reasons logged: {dict(reasons)}")
    if acc.unexplained_duplicates:
        found.append(f"{acc.unexplained_duplicates} duplicate successes without a lease lost or a delete given up")
    if false := false_lease_losses(run):
        found.append(f"{len(false)} leases counted lost although the message never came back, e.g. {false[:3]}")
    actual, expected = counters(run)
    if actual != expected:
        wrong = {k: f"{actual[k]} (expected {expected[k]})" for k in actual if actual[k] != expected[k]}
        found.append(f"worker counters do not match the outcomes: {wrong}")
    if run.totals.get("storage_retries", 0) != run.proxy.failed:
        found.append(
            f"the worker counted {run.totals.get('storage_retries', 0)} retried storage failures; "
            f"the proxy failed {run.proxy.failed} calls"
        )
    return found

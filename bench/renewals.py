"""Lease renewal at scale on the embedded SQLite queue: the host's one scheduler beside a task per message.

N received messages (``--messages``, default 10,000) are held under leases of
``--lease`` seconds (default 2) for ``--seconds`` (default 60), each lease
renewed at half its length (the host's leaseRenewalFraction). Renewing every
lease on time takes N / (lease x 0.5) renewals a second, 10,000/s with the
defaults, each one SQLite update (the backend commits waiting writes in groups). A late renewal stretches that
lease's cycle (the next one is due half a lease after it), so fewer renewals a
second can hold N as long as none is more than lease x 0.5 late.

Two designs run one after the other, each on its own fresh queue file, and are
printed side by side:

``scheduler``
    ``worker.runtime.lease.LeaseScheduler``, as the host uses it: one task and one
    heap of due times for every lease, at most 64 renewals in flight.
``naive``
    One sleeping asyncio task per message, renewing its own lease (the WebJobs
    SDK's timer per message, which the host avoids).

Before any timing, all N messages are received (32 at a time, hidden for 10
minutes). Their leases are then handed to the design in an even stream over one
renewal interval (lease x 0.5), so that due times are spread as in a steady
flow of messages; from its first renewal on, each message is hidden for one
lease length only. The hold period starts once all N are held. (Receiving with
the short lease and holding at once, as the listener does, is no fair start:
the naive design's renewals then flood the backend's one SQLite thread and its
own receives starve behind them for minutes.) Figures:

- renewals/s over the hold period, beside the rate needed;
- CPU per renewal: the whole process's CPU time (event loop thread, SQLite
  thread and all) over the hold period divided by the renewals in it, and the
  event loop thread's share of it;
- max lateness: how long after its due time (half-way through the lease) a
  renewal completed; past ``lease x 0.5`` seconds of lateness the lease had
  already expired. Counted from the first lease held to the end;
- leases lapsed: leases renewed after they had expired, lost at renewal
  (someone else took the message), or whose message a second receiver (another
  backend on the same file: one receive of up to 32 a second during the
  hold) could take: distinct messages, so 0 means every lease held for the whole run;
- peak asyncio tasks alive at once (counted exactly by a task factory; the
  benchmark's own main and checker tasks included).

The last column is naive / scheduler. When the scheduler lets leases lapse at
N, a search follows (unless ``--no-limit-search``): shorter holds
(``--limit-seconds``) at smaller N, bisecting towards the largest N held
without a lapse, starting from the N the measured renewal rate predicts.

Run: ``.venv/bin/python bench/renewals.py [--messages 10000] [--seconds 60] [--lease 2]``
(or ``make bench``). It takes about twice ``--seconds`` plus filling, and the
search a few minutes more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import statistics
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from worker.backends.embedded.queues import SqliteBackend  # noqa: E402
from worker.backends.queues import LeaseGone, Receipt  # noqa: E402
from worker.model import Lease  # noqa: E402
from worker.observability.logs import configure_logging  # noqa: E402
from worker.observability.metrics import Metrics  # noqa: E402
from worker.runtime.lease import LeaseScheduler  # noqa: E402

QUEUE = "leases"
#: When a lease is renewed, as a fraction of its length (the host's default leaseRenewalFraction).
FRACTION = 0.5
#: How long a second receiver keeps what it takes: long enough that a stolen message stays stolen.
CHECK_VISIBILITY = 600
#: Visibility of the messages between their receive and the moment their lease is held (before any timing).
TAKE_VISIBILITY = 600
#: Slices of the stream in which the leases are handed to the design.
SPREAD_STEPS = 100
#: Puts in flight while filling the queue (they queue up on the backend's one SQLite thread).
FILL_CHUNK = 256


@dataclass
class Watch:
    """What happened to the leases of one run, fed by :class:`WatchedBackend` and the checker."""

    lease_seconds: float
    leases: dict[str, Lease] = field(default_factory=dict)
    renewals: int = 0
    max_lateness: float = 0.0
    #: Renewed after expiry, lost at renewal, or taken by the second receiver.
    lapsed: set[str] = field(default_factory=set)
    stolen: int = 0

    def renewed(self, message_id: str, expires_at: float, done: float) -> None:
        """The lease on ``message_id``, to end at ``expires_at``, was renewed at ``done``."""
        due = expires_at - self.lease_seconds * (1 - FRACTION)
        self.max_lateness = max(self.max_lateness, done - due)
        self.renewals += 1
        if done > expires_at:
            self.lapsed.add(message_id)


class WatchedBackend(SqliteBackend):
    """The holder's embedded queue, noting when each renewal completes against when it was due."""

    def __init__(self, path: Path, watch: Watch) -> None:
        super().__init__(path)
        self.watch = watch

    async def update(
        self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float, content: str | None = None
    ) -> Receipt:
        expires_at = self.watch.leases[message_id].expires_at
        try:
            receipt = await super().update(queue, message_id, pop_receipt, visibility_timeout, content)
        except LeaseGone:
            self.watch.lapsed.add(message_id)
            raise
        self.watch.renewed(message_id, expires_at, time.monotonic())
        return receipt


class TaskCount:
    """A task factory counting the tasks alive at once, and the peak."""

    def __init__(self, alive: int) -> None:
        self.alive = alive
        self.peak = alive

    def factory(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], context: contextvars.Context | None = None
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context)
        self.alive += 1
        self.peak = max(self.peak, self.alive)
        task.add_done_callback(self._done)
        return task

    def _done(self, _: asyncio.Task[Any]) -> None:
        self.alive -= 1


class Design(Protocol):
    name: str

    def start(self) -> None:
        """Begin renewing (on the running loop)."""

    def hold(self, lease: Lease) -> None:
        """Renew ``lease``, just received, until stopped."""

    async def stop(self) -> int:
        """Stop renewing; the number of renewers that failed with an unexpected error."""


class SchedulerDesign:
    """The host's design: one :class:`LeaseScheduler` for every lease."""

    name = "scheduler"

    def __init__(self, lease_seconds: float) -> None:
        self.scheduler = LeaseScheduler(lease_seconds, FRACTION, Metrics())
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.scheduler.run(), name="lease-scheduler")

    def hold(self, lease: Lease) -> None:
        self.scheduler.hold(lease)

    async def stop(self) -> int:
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        return 0


class NaiveDesign:
    """One task per message that sleeps until its lease is due and renews it, until the message is lost."""

    name = "naive"

    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        return None

    def hold(self, lease: Lease) -> None:
        lease.expires_at = time.monotonic() + self.lease_seconds
        self.tasks.add(asyncio.create_task(self._renew(lease)))

    async def _renew(self, lease: Lease) -> None:
        assert lease.backend is not None and lease.pop_receipt is not None
        while True:
            due = lease.expires_at - self.lease_seconds * (1 - FRACTION)
            await asyncio.sleep(due - time.monotonic())
            try:
                receipt = await lease.backend.update(lease.queue, lease.message_id, lease.pop_receipt, self.lease_seconds)
            except LeaseGone:
                return
            lease.pop_receipt = receipt.pop_receipt
            lease.expires_at = time.monotonic() + self.lease_seconds
            lease.renewals += 1

    async def stop(self) -> int:
        for task in self.tasks:
            task.cancel()
        results = await asyncio.gather(*self.tasks, return_exceptions=True)
        return sum(isinstance(r, Exception) for r in results)


@dataclass(frozen=True)
class Result:
    design: str
    messages: int
    hold_seconds: float
    renewals: int
    cpu_seconds: float
    loop_cpu_seconds: float
    max_lateness: float
    lapsed: int
    stolen: int
    peak_tasks: int
    failed_renewers: int

    @property
    def renewals_per_second(self) -> float:
        return self.renewals / self.hold_seconds

    def cpu_per_renewal(self, seconds: float) -> float:
        return seconds / self.renewals if self.renewals else float("nan")


async def fill(path: Path, messages: int) -> None:
    """A fresh queue file holding ``messages`` messages."""
    backend = SqliteBackend(path)
    try:
        await backend.create_queue(QUEUE)
        for start in range(0, messages, FILL_CHUNK):
            await asyncio.gather(*(backend.put(QUEUE, str(i)) for i in range(start, min(messages, start + FILL_CHUNK))))
    finally:
        await backend.close()


async def check(path: Path, watch: Watch, stop: asyncio.Event) -> None:
    """Once a second, one receive by a second receiver: each message it gets is a lease that lapsed.

    One receive (up to 32 messages), not a drain: a sample, which leaves the
    holder with most of its leases when many lapse, so its renewal rate stays measurable.
    """
    thief = SqliteBackend(path)
    try:
        while not stop.is_set():
            taken = await thief.receive(QUEUE, thief.limits.max_batch, CHECK_VISIBILITY)
            watch.stolen += len(taken)
            watch.lapsed.update(m.id for m in taken)
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass
    finally:
        await thief.close()


async def take(backend: SqliteBackend, messages: int, watch: Watch) -> list[Lease]:
    """Receive every message, hidden for :data:`TAKE_VISIBILITY`; a lease (not yet held) for each."""
    leases: list[Lease] = []
    while len(leases) < messages:
        batch = await backend.receive(QUEUE, min(backend.limits.max_batch, messages - len(leases)), TAKE_VISIBILITY)
        if not batch:
            raise RuntimeError(f"the queue ran dry after {len(leases)} of {messages} messages")
        for message in batch:
            lease = watch.leases[message.id] = Lease(backend, QUEUE, message.id, message.pop_receipt)
            leases.append(lease)
    return leases


async def spread(design: Design, leases: list[Lease], seconds: float) -> None:
    """Hold ``leases`` in an even stream over ``seconds``, so that their due times are spread as in a steady flow."""
    started = time.monotonic()
    for step in range(SPREAD_STEPS):
        for lease in leases[step * len(leases) // SPREAD_STEPS : (step + 1) * len(leases) // SPREAD_STEPS]:
            design.hold(lease)
        await asyncio.sleep(started + (step + 1) * seconds / SPREAD_STEPS - time.monotonic())


async def run(design: Design, path: Path, messages: int, seconds: float, lease_seconds: float) -> Result:
    """Hold ``messages`` leases for ``seconds`` with ``design``, and report what happened."""
    await fill(path, messages)
    loop = asyncio.get_running_loop()
    tasks = TaskCount(len(asyncio.all_tasks()))
    loop.set_task_factory(tasks.factory)
    watch = Watch(lease_seconds)
    backend = WatchedBackend(path, watch)
    try:
        leases = await take(backend, messages, watch)
        design.start()
        await spread(design, leases, lease_seconds * FRACTION)
        stop = asyncio.Event()
        checker = asyncio.create_task(check(path, watch, stop), name="checker")
        renewals, cpu, loop_cpu, began = watch.renewals, time.process_time(), time.thread_time(), time.monotonic()
        await asyncio.sleep(seconds)
        renewals, cpu, loop_cpu, held = (
            watch.renewals - renewals,
            time.process_time() - cpu,
            time.thread_time() - loop_cpu,
            time.monotonic() - began,
        )
        stop.set()
        await checker
        failed = await design.stop()
    finally:
        await backend.close()
        loop.set_task_factory(None)
    return Result(
        design=design.name,
        messages=messages,
        hold_seconds=held,
        renewals=renewals,
        cpu_seconds=cpu,
        loop_cpu_seconds=loop_cpu,
        max_lateness=watch.max_lateness,
        lapsed=len(watch.lapsed),
        stolen=watch.stolen,
        peak_tasks=tasks.peak,
        failed_renewers=failed,
    )


def run_design(name: str, folder: Path, messages: int, seconds: float, lease_seconds: float) -> Result:
    """One design on a fresh queue file, on its own event loop."""
    design: Design = SchedulerDesign(lease_seconds) if name == "scheduler" else NaiveDesign(lease_seconds)
    path = folder / f"{name}-{messages}-{time.monotonic_ns()}.sqlite3"
    return asyncio.run(run(design, path, messages, seconds, lease_seconds))


def _figure(value: float) -> str:
    if isinstance(value, int):
        return f"{value:12d}"
    return f"{value:12.0f}" if abs(value) >= 100 else f"{value:12.2f}"


def table(results: list[Result], lease_seconds: float) -> str:
    scheduler, naive = results
    needed = scheduler.messages / (lease_seconds * FRACTION)
    slack = lease_seconds * (1 - FRACTION)
    rows: list[tuple[str, float, float, str]] = [
        ("renewals/s", scheduler.renewals_per_second, naive.renewals_per_second, f"each lease on time: {needed:.0f}/s"),
        (
            "CPU us/renewal (process)",
            1e6 * scheduler.cpu_per_renewal(scheduler.cpu_seconds),
            1e6 * naive.cpu_per_renewal(naive.cpu_seconds),
            "all threads",
        ),
        (
            "  of which event loop thread",
            1e6 * scheduler.cpu_per_renewal(scheduler.loop_cpu_seconds),
            1e6 * naive.cpu_per_renewal(naive.loop_cpu_seconds),
            "the rest: the SQLite thread",
        ),
        ("max lateness (s)", scheduler.max_lateness, naive.max_lateness, f"a lease lapses past {slack:g} s"),
        ("leases lapsed", scheduler.lapsed, naive.lapsed, f"of {scheduler.messages}"),
        ("  taken by a 2nd receiver", scheduler.stolen, naive.stolen, "sampled every second"),
        ("peak asyncio tasks", scheduler.peak_tasks, naive.peak_tasks, ""),
    ]
    lines = [f"{'':<29}{'scheduler':>12}{'naive':>12}{'naive/sched':>13}"]
    for label, a, b, note in rows:
        ratio = f"{b / a:.2f}" if a else ("-" if not b else "inf")
        lines.append(f"{label:<29}{_figure(a)}{_figure(b)}{ratio:>13}   {note}")
    failed = [r for r in results if r.failed_renewers]
    lines += [f"{r.design}: {r.failed_renewers} renewer tasks failed with an error" for r in failed]
    return "\n".join(lines)


def find_limit(folder: Path, first: Result, seconds: float, lease_seconds: float) -> tuple[int, int, list[Result]]:
    """Bisect below ``first.messages``: the largest N the scheduler held for ``seconds`` without a lapse, the
    smallest N it let lapse, and the probes. The first probe is the N its renewal rate at ``first`` renews on time.
    """
    clean, lapsing = 0, first.messages
    guess = int(first.renewals_per_second * lease_seconds * FRACTION)
    probes: list[Result] = []
    while lapsing - clean > max(50, lapsing // 20):
        n = guess if not probes and clean < guess < lapsing else (clean + lapsing) // 2
        result = run_design("scheduler", folder, n, seconds, lease_seconds)
        probes.append(result)
        print(
            f"  N={n:>6}: {result.renewals_per_second:6.0f} renewals/s (on time: {n / (lease_seconds * FRACTION):.0f}/s), "
            f"max lateness {result.max_lateness:.2f} s, {result.lapsed} lapsed",
            flush=True,
        )
        if result.lapsed:
            lapsing = n
        else:
            clean = n
    return clean, lapsing, probes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Lease renewal on the embedded SQLite queue: LeaseScheduler beside one task per message.",
        epilog="See the module docstring (bench/renewals.py) for what each figure means.",
    )
    parser.add_argument("--messages", type=int, default=10_000, help="leases held at once (default 10000)")
    parser.add_argument("--seconds", type=float, default=60, help="how long they are held (default 60)")
    parser.add_argument("--lease", type=float, default=2, help="lease length in seconds, renewed at half (default 2)")
    parser.add_argument(
        "--limit-seconds", type=float, default=15, help="hold time of each probe of the limit search (default 15)"
    )
    parser.add_argument(
        "--no-limit-search", action="store_true", help="do not search for the largest N the scheduler holds without a lapse"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging("ERROR", json_lines=False)  # a lapse logs a warning per lease
    with tempfile.TemporaryDirectory(prefix="bench-renewals-") as folder:
        results = []
        for name in ("scheduler", "naive"):
            print(f"{name}: {args.messages} leases of {args.lease:g} s held {args.seconds:g} s ...", flush=True)
            results.append(run_design(name, Path(folder), args.messages, args.seconds, args.lease))
        print(
            f"\n{args.messages} leases of {args.lease:g} s, renewed at {FRACTION:g}, held {args.seconds:g} s "
            f"on the embedded SQLite queue (writes committed in groups)"
        )
        print(table(results, args.lease))
        scheduler = results[0]
        if scheduler.lapsed and not args.no_limit_search:
            print(f"\nthe scheduler let leases lapse; searching the largest N it holds ({args.limit_seconds:g} s holds):")
            limit, lapsing, probes = find_limit(Path(folder), scheduler, args.limit_seconds, args.lease)
            rates = [p.renewals_per_second for p in probes]
            print(
                f"limit: {limit} leases of {args.lease:g} s held {args.limit_seconds:g} s without a lapse "
                f"({lapsing} lapsed). "
                f"Renewing each on time would take {limit / (args.lease * FRACTION):.0f}/s; the scheduler "
                f"sustained {statistics.median(rates):.0f}/s (median of the probes), renewing late but before expiry."
            )


if __name__ == "__main__":
    main()

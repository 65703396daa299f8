"""The console at 10,000 leases in flight: how long ``/`` and its data endpoints take, what polling costs storage,
and the memory its history and records hold.

The state is built in-process from the host's real parts: an embedded SQLite queue holding N messages
(``--leases``, default 10,000), all received and held by the real :class:`~worker.runtime.lease.LeaseScheduler`
(the leases are ten minutes long, so that renewals do not blur the timing; ``--lease`` shortens them), a
function's recorder full (its 512 latest handler times and 100 failures with 1,000-character reasons) and an
hour of history (360 samples). The endpoints server (the real aiohttp app, token guard included) serves it on
loopback from its own thread; the benchmark asks from the main thread with urllib, one request at a time, for
``--seconds`` per path (default 10), so each figure is a whole HTTP round trip. Storage calls made by the backend
during the state polls are counted: the look at storage is cached for :data:`~worker.runtime.console.state.LOOK_TTL`
seconds whoever asks.

Figures: median, p95 and max milliseconds per path (``/leases`` beside them, as it is today: every lease);
the size of one ``/console/api/state`` and ``/console/api/history`` answer; storage calls per 100 state polls;
the history ring's bytes per function (fixed when made) and the Python memory (tracemalloc) of the whole console
after an hour of samples against after three hours: the same.

Run: ``.venv/bin/python bench/console.py [--leases 10000] [--seconds 10]``. It takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from worker.app import WorkerApp  # noqa: E402
from worker.backends.embedded.queues import SqliteBackend  # noqa: E402
from worker.backends.queues import MessageCounts, QueueBackend, RawMessage  # noqa: E402
from worker.model import Lease  # noqa: E402
from worker.observability.logs import configure_logging  # noqa: E402
from worker.observability.metrics import Metrics  # noqa: E402
from worker.runtime.console.history import INTERVAL, SLOTS  # noqa: E402
from worker.runtime.console.recorder import RECENT_FAILURES, RECENT_TIMES, ConsoleRecorder  # noqa: E402
from worker.runtime.console.state import Console, HostParts, StartFacts, Watched  # noqa: E402
from worker.runtime.endpoints import Endpoints  # noqa: E402
from worker.runtime.guard import Access  # noqa: E402
from worker.runtime.lease import LeaseScheduler  # noqa: E402
from worker.settings.config import HostConfig  # noqa: E402
from worker.settings.http_token import BearerToken  # noqa: E402

QUEUE = "console-bench"
TOKEN = "bench-console-token-0123"
FILL_CHUNK = 256
TAKE_VISIBILITY = 600.0


class CountingBackend(SqliteBackend):
    """The embedded queue, counting the calls the console's look makes (counts and peeks)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: Counter[str] = Counter()

    async def approximate_count(self, queue: str) -> int:
        self.calls["approximate_count"] += 1
        return await super().approximate_count(queue)

    async def message_counts(self, queue: str) -> MessageCounts:
        self.calls["message_counts"] += 1
        return await super().message_counts(queue)

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        self.calls["peek"] += 1
        return await super().peek(queue, max_messages)


def app() -> WorkerApp:
    worker = WorkerApp()

    @worker.queue_trigger(arg_name="msg", queue_name=QUEUE)
    def bench(msg: Any) -> None:
        """Never called: the benchmark holds the messages itself."""

    return worker


async def hold(backend: QueueBackend, scheduler: LeaseScheduler, count: int) -> None:
    """Put ``count`` messages and hold every one under a lease of the scheduler's."""
    for start in range(0, count, FILL_CHUNK):
        await asyncio.gather(*(backend.put(QUEUE, str(i)) for i in range(start, min(count, start + FILL_CHUNK))))
    held = 0
    while held < count:
        batch = await backend.receive(QUEUE, backend.limits.max_batch, TAKE_VISIBILITY)
        for raw in batch:
            scheduler.hold(
                Lease(
                    backend,
                    QUEUE,
                    raw.id,
                    raw.pop_receipt,
                    function="bench",
                    dequeue_count=raw.dequeue_count,
                    invocation_id=f"invocation-{held}",
                )
            )
            held += 1


def fill_records(console: Console, recorder: ConsoleRecorder, hours: int) -> None:
    """An hour (or more) of samples and a full recorder, as a busy host has after that long."""
    times = recorder.times_of("bench")
    for n in range(RECENT_TIMES * 4):
        times.add(0.001 * (n % 97))
    for n in range(RECENT_FAILURES * 2):
        recorder.failures.appendleft(
            {
                "at": "2026-01-01T00:00:00+00:00",
                "function": "bench",
                "queue": QUEUE,
                "messageId": f"m{n}",
                "invocationId": f"i{n}",
                "dequeueCount": 5,
                "outcome": "poisoned",
                "reason": "x" * 1000,
            }
        )
    start = time.time() - hours * 3600
    for n in range(int(hours * 3600 / INTERVAL)):
        for _ in range(3):
            times.add(0.01)
        console.sample(start + n * INTERVAL)


class Served:
    """The console's host parts on an event loop in a thread of their own, serving on loopback."""

    def __init__(self, folder: Path, leases: int, lease: float) -> None:
        self.folder = folder
        self.leases = leases
        self.lease = lease
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as exc:  # said by the main thread
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        config = HostConfig(lease_duration=self.lease, base_dir=self.folder)
        metrics = Metrics()
        self.backend = backend = CountingBackend(self.folder / "queues.sqlite3")
        await backend.create_queue(QUEUE)
        scheduler = LeaseScheduler(self.lease, config.lease_renewal_fraction, metrics)
        renewing = asyncio.create_task(scheduler.run())
        began = time.perf_counter()
        await hold(backend, scheduler, self.leases)
        self.fill_seconds = time.perf_counter() - began
        function = app().functions[0]
        options = config.for_function(function.name)

        async def ready() -> list[str]:
            await backend.approximate_count(QUEUE)
            return []

        parts = HostParts(metrics, scheduler, config, lambda: {"bench": (self.leases, self.leases)}, ready, dict)
        self.recorder = ConsoleRecorder()
        self.console = Console(
            [Watched(function, options, backend, "embedded queue (bench)")],
            parts,
            self.recorder,
            StartFacts("bench:app"),
            actions=True,
        )
        fill_records(self.console, self.recorder, hours=1)
        endpoints = Endpoints(metrics, scheduler, ready, ["bench"], draining=lambda: False, stuck=lambda: None)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        await endpoints.start(self.port, Access(BearerToken(TOKEN, "bench"), "127.0.0.1"), self.console)
        self.stop = asyncio.Event()
        self.ready.set()
        await self.stop.wait()
        await endpoints.stop()
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)
        await backend.close()


def timed(port: int, path: str, seconds: float) -> tuple[list[float], int]:
    """Ask ``path`` one request at a time for ``seconds``: each round trip in ms, and the last answer's size."""
    took: list[float] = []
    size = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {TOKEN}"})
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read()
        took.append((time.perf_counter() - began) * 1000)
        size = len(body)
    return took, size


def memory(hours: int) -> int:
    """Python memory (bytes) the console's records hold after ``hours`` of samples, measured by tracemalloc.

    The console is made on no storage (its look is never taken here): only what it keeps is measured.
    """
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    recorder = ConsoleRecorder()
    function = app().functions[0]
    config = HostConfig()
    parts = HostParts(Metrics(), LeaseScheduler(60, 0.5, Metrics()), config, lambda: {"bench": (3, 3)}, _no_problems, dict)
    no_storage: Any = None
    console = Console(
        [Watched(function, config.for_function("bench"), no_storage, "none")], parts, recorder, StartFacts(), actions=False
    )
    fill_records(console, recorder, hours)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


async def _no_problems() -> list[str]:
    return []


def summary(took: list[float]) -> str:
    ordered = sorted(took)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{statistics.median(ordered):8.1f} {p95:8.1f} {ordered[-1]:8.1f} {len(ordered):9d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each path is asked")
    parser.add_argument("--lease", type=float, default=600.0, help="lease length in seconds")
    args = parser.parse_args()
    configure_logging("warning")
    with tempfile.TemporaryDirectory(prefix="console-bench-") as folder:
        served = Served(Path(folder), args.leases, args.lease)
        thread = threading.Thread(target=served.run, name="console-host")
        thread.start()
        served.ready.wait()
        if served.error is not None:
            raise served.error
        print(
            f"{args.leases} leases held by the lease scheduler on the embedded queue "
            f"(filled in {served.fill_seconds:.1f}s); each path asked for {args.seconds:g}s, one request at a time"
        )
        print(f"{'path':<24} {'median':>8} {'p95':>8} {'max':>8} {'requests':>9}  (ms)  answer")
        for path in ("/", "/console/api/state", "/console/api/history", "/leases"):
            calls_before = sum(served.backend.calls.values())
            took, size = timed(served.port, path, args.seconds)
            calls = sum(served.backend.calls.values()) - calls_before
            print(f"{path:<24} {summary(took)}        {size / 1024:7.1f} KiB")
            if path == "/console/api/state":
                state_calls = (calls, len(took))
        calls, polls = state_calls
        print(
            f"storage calls during the state polls: {calls} for {polls} polls ({100 * calls / polls:.1f} per 100 "
            f"polls; one look = a count, a poison count, a peek and the readiness count, at most every few seconds)"
        )
        state = json.loads(
            urllib.request.urlopen(
                urllib.request.Request(
                    f"http://127.0.0.1:{served.port}/console/api/state", headers={"Authorization": f"Bearer {TOKEN}"}
                ),
                timeout=30,
            ).read()
        )
        print(f"state lists {len(state['leases']['shown'])} of {state['leases']['total']} leases (the oldest)")
        served.loop.call_soon_threadsafe(served.stop.set)
        thread.join()
    ring = served.console.history.nbytes
    print(
        f"history ring: {ring} bytes per function ({SLOTS} samples x {len(served.console.history.rings)} function),"
        " allocated once"
    )
    one, three = memory(1), memory(3)
    print(
        f"console records after 1 h of samples: {one / 1024:.1f} KiB; after 3 h: {three / 1024:.1f} KiB "
        f"(tracemalloc; ring, {RECENT_TIMES} handler times, {RECENT_FAILURES} failures)"
    )


if __name__ == "__main__":
    main()

"""Throughput of the worker on Azure Storage Queues (Azurite), beside a raw-SDK ceiling and a naive loop.

One Azurite (as the tests start it: on free loopback ports, without telemetry
or access log, storing in a temporary folder) serves the whole run. Not in
memory: its in-memory extent store is swept every minute by a mark-and-sweep
that blocks the emulator, and once a few thousand messages have passed through
it a sweep takes up to a minute (57 s
for 5,243 extents, measured here), which would land in some contenders' runs
and not in others'. Each contender drains its own fresh queue, filled
beforehand with the same N messages by a concurrent put loop that is not timed:

``ceiling K=k``
    The best a plain asyncio azure-storage-queue loop does: k coroutines, each
    receiving one page of 32 messages (one request, visibility 600 s) and then
    deleting those 32 concurrently, until the queue is empty. The worker below
    holds up to maxInFlight messages, i.e. about maxInFlight/32 received
    batches (4 with the defaults), with one receive in flight at a time; k is
    tried at values around that (``--ceiling-k``, default 2,4,8) and the
    ceiling is the k with the best median, so the ceiling is not handicapped
    by copying the worker's setting.
``naive``
    What most users write first: ``receive_message()``, process, ``delete_message()``,
    one message at a time, on the same asyncio SDK and HTTP stack.
``worker``
    ``worker.runtime.host.Host`` in-process in burst mode, one function with an async
    handler that does nothing: batchSize 32, ``--max-in-flight``,
    ``--new-batch-threshold``, messageEncoding none, logging configured as
    ``worker run`` does but at WARNING to stderr (the success path logs nothing
    at INFO either). Its time runs from the call to ``Host.run()`` (which opens
    its own storage client and creates the queue) to the moment the N-th
    delete has returned, read from the host's own ``succeeded`` counter: the
    burst-mode stop check (every 0.25 s, one ``approximate_count``) is *not*
    counted. The full ``run()`` time, stop included, is printed beside it.

Before the first round every contender drains 64 messages once, untimed: what
a long-running process pays once (imports made on first use, such as the
worker's storage backend and its retry library, the SDK's response classes,
first-use caches) would otherwise land in whichever runs first. Without it, the
worker's CPU ratio to the raw loops (below) was 1.22-1.43 in the first round of
five runs out of seven at 10 ms of latency, against a median of 0.99 over all
their later rounds.
Then start-up's objects are frozen (``gc.freeze()``), for every contender
alike, as ``worker run`` freezes them before its host starts: else each full
collection walks every module loaded, for 30-85 ms at a time, and where one
falls decides more of a contender's CPU than its own work per message.

Every contender's time includes opening its storage client. The raw loops'
SDK clients retry a failed request at once instead of the SDK's default 15 s
back-off (the worker's own policy waits at most 0.2 s at first), and every
retried request is counted and printed. Contenders run in a different order
each round (``--rounds``); figures are medians over rounds.

Reading the output: per contender, msgs/s (median, then each round in
brackets), the benchmark process's CPU per message ("py ms/msg": SDK, HTTP
and, for the worker, the host's own work), the part of it the
garbage collector took ("gc"), and Azurite's CPU per message (from /proc; NaN
where there is none). Where Python and Azurite share a few cores, wall-clock
rates are bounded by CPU, so "py ms/msg" shows the worker's per-message
overhead over the raw SDK directly, and it is steadier than msgs/s on a busy
machine. Then the ratios worker/ceiling and worker/naive; the issue's targets
at 1,000 messages are >= 0.9 and >= 5. ceiling/naive is printed too: what
concurrency and batching buy at all against this emulator on this machine.
Last, worker py/ceiling py: the worker's CPU per message over the raw loops'
(target <= 1.05 at 10 ms of latency), as the median of each round's ratio to
that round's ceilings. A round's CPU per message moves by several per cent with
what the other core runs, the same way for every contender of the round, so
paired rounds show a difference of a few per cent that medians taken apart blur.
On a shared two-core machine it also moves from one run to the next, by up to
a third (the same worker, eight runs of 1,000 messages in a row: 679 to 1,085
us per message), which three rounds do not outvote: ``make bench`` runs this
case for 9 rounds, the naive loop (some 30 times as long as a worker run, and
far from its target) in the first 3 of them (``--naive-rounds``).

``--latency-ms D`` puts a proxy process (the test suite's fault proxy, delaying
every request by D ms and injecting nothing else) between every contender and
Azurite. On loopback Azurite answers with no network time at all, and being one
Node.js thread on a two-core machine it saturates first, which caps what any
concurrent client gains over the naive loop (ceiling/naive) at 3-4x here. A
real storage account is some milliseconds away, which the naive loop pays twice
per message while concurrent clients overlap it; ``--latency-ms 5`` or ``10``
shows that case.

``--otel`` adds ``worker+otel``: the same worker with OpenTelemetry traces on
(the ``otel`` extra), exporting over OTLP/HTTP with the SDK's batch processor
at its default schedule to the tests' receiver (tests/tracing/receiver.py),
which runs in a process of its own so that decoding the spans is not charged
to the worker. Per message that is a CONSUMER span and a delete span, plus a
span per receive. It prints worker+otel/worker and how many spans arrived.

``--console`` adds ``worker+console``: the same worker with ``worker.httpPort``
set and a token, so that the endpoints server and the web console run, while
``--console-pages`` open console pages (default 10) refresh it as the page's
script does (the state view every 3 s, the history every 10 s, each page's
first poll at once and the pages staggered), from a process of its own so that
only the serving is charged to the worker. It prints worker+console/worker and
how many console requests were answered.

``--public-path`` adds ``worker sdk``: the same worker on the SDK's public
``receive_messages`` and ``delete_message``, which the Azure backend uses where
its fast path fails its self-check at start (a changed SDK), and prints its CPU
per message over the raw loops' beside the worker's (target <= 1.15).

Run: ``.venv/bin/python bench/throughput.py [--messages 1000] [--rounds 3] [--naive-rounds N] [--latency-ms 0]
[--otel] [--console] [--public-path]``
(or ``make bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The endpoint token of ``worker+console`` (the console's data is guarded, as in production).
CONSOLE_TOKEN = "bench-console-token-0123"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from azure.core.exceptions import ResourceNotFoundError  # noqa: E402
from azure.storage.queue import QueueMessage as SdkMessage  # noqa: E402
from azure.storage.queue.aio import QueueClient  # noqa: E402

from tests.azurite import Azurite  # noqa: E402
from tests.support import free_port  # noqa: E402
from worker import QueueMessage, WorkerApp  # noqa: E402
from worker.backends.azure.queues import FAST_PATH_ENV  # noqa: E402
from worker.observability.logs import configure_logging  # noqa: E402
from worker.observability.metrics import Metrics  # noqa: E402
from worker.runtime.host import Host  # noqa: E402
from worker.settings.config import HostConfig  # noqa: E402

#: Messages per receive, for the ceiling and the worker (Azure's maximum).
BATCH = 32
#: Lease taken at receive by the ceiling: the worker's leaseDuration (10 minutes, as in Functions).
LEASE_SECONDS = 600
#: Messages each contender drains once, untimed, before the first round.
WARM_UP = 64
#: Concurrent senders filling a queue (not timed).
FILL_CONCURRENCY = 64
#: The connection setting the worker's function names.
CONNECTION = "AzureWebJobsStorage"


class RetryCount:
    """A ``retry_hook`` for SDK calls: counts the requests the SDK retried."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, **_: Any) -> None:
        self.count += 1


def queue_client(connection_string: str, queue: str) -> QueueClient:
    """An asyncio SDK client that retries at once (the SDK's default back-off starts at 15 s).

    Environment settings are off, as in the worker when no proxy is configured: with them on,
    aiohttp looks for ~/.netrc on every request.
    """
    return QueueClient.from_connection_string(
        connection_string,
        queue,
        initial_backoff=0,
        increment_base=0,
        random_jitter_range=0,
        use_env_settings=False,
    )


class AzuriteCpu:
    """CPU seconds used so far by the Azurite process, from /proc (NaN where there is no /proc)."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/stat")
        self.tick = os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float:
        try:
            fields = self.path.read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime


class GcTime:
    """A ``gc.callbacks`` entry adding up the seconds the garbage collector runs."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


@dataclass(frozen=True)
class Measurement:
    seconds: float
    retries: int
    #: The worker's: until ``run()`` returned, its burst-mode stop included (``seconds`` ends at the last delete).
    returned_after: float | None = None


@dataclass(frozen=True)
class WorkerSettings:
    max_in_flight: int
    new_batch_threshold: int


async def fill(connection_string: str, queue: str, messages: int) -> None:
    """Create ``queue`` and put ``messages`` small messages into it with concurrent senders."""
    async with queue_client(connection_string, queue) as client:
        await client.create_queue()
        numbers = iter(range(messages))

        async def sender() -> None:
            for i in numbers:
                await client.send_message(f'{{"n": {i}}}')

        await asyncio.gather(*(sender() for _ in range(FILL_CONCURRENCY)))


async def remaining(connection_string: str, queue: str) -> int:
    """Messages left in ``queue`` (visible or not); the queue is then deleted."""
    async with queue_client(connection_string, queue) as client:
        count = (await client.get_queue_properties()).approximate_message_count or 0
        await client.delete_queue()
        return count


async def delete(client: QueueClient, message: SdkMessage, retries: RetryCount) -> None:
    """Delete ``message``; a retried delete that finds it gone means the first attempt deleted it."""
    try:
        await client.delete_message(message, retry_hook=retries)
    except ResourceNotFoundError:
        if not retries.count:
            raise


async def run_ceiling(connection_string: str, queue: str, _messages: int, receivers: int) -> Measurement:
    """``receivers`` raw-SDK loops (receive a page of 32, delete them concurrently) drain ``queue``."""
    retries = RetryCount()
    started = time.perf_counter()
    async with queue_client(connection_string, queue) as client:

        async def receiver() -> None:
            while True:
                batch: list[SdkMessage] = []
                pages = client.receive_messages(
                    messages_per_page=BATCH, max_messages=BATCH, visibility_timeout=LEASE_SECONDS, retry_hook=retries
                ).by_page()
                async for page in pages:  # the first page only: one request
                    batch = [m async for m in page]
                    break
                if not batch:
                    return
                await asyncio.gather(*(delete(client, m, retries) for m in batch))

        await asyncio.gather(*(receiver() for _ in range(receivers)))
    return Measurement(time.perf_counter() - started, retries.count)


async def run_naive(connection_string: str, queue: str, _messages: int) -> Measurement:
    """One loop of receive_message(), process (nothing), delete_message() drains ``queue``."""
    retries = RetryCount()
    started = time.perf_counter()
    async with queue_client(connection_string, queue) as client:
        while (message := await client.receive_message(retry_hook=retries)) is not None:
            await delete(client, message, retries)
    return Measurement(time.perf_counter() - started, retries.count)


class SuccessClock(Metrics):
    """The host's counters, noting when the ``target``-th message has been deleted."""

    def __init__(self, target: int) -> None:
        super().__init__()
        self.target = target
        self.succeeded = 0
        self.reached_at: float | None = None

    def inc(self, name: str, function: str = "", amount: int = 1) -> None:
        super().inc(name, function, amount)
        if name == "succeeded":
            self.succeeded += amount
            if self.succeeded == self.target:
                self.reached_at = time.perf_counter()


async def run_worker(
    connection_string: str, queue: str, messages: int, settings: WorkerSettings, http_port: int | None = None
) -> Measurement:
    """The host drains ``queue`` of its ``messages``: the time to the last delete, and until burst-mode ``run()``
    returned. With ``http_port``, its endpoints and console are served there."""
    app = WorkerApp()

    async def noop(msg: QueueMessage) -> None:
        return None

    app.queue_trigger(arg_name="msg", queue_name=queue, connection=CONNECTION)(noop)
    config = HostConfig(
        batch_size=BATCH,
        new_batch_threshold=settings.new_batch_threshold,
        max_in_flight=settings.max_in_flight,
        message_encoding="none",
        connections={CONNECTION: connection_string},
        http_port=http_port,
    )
    host = Host(app, config, burst=True)
    clock = host.metrics = SuccessClock(messages)
    started = time.perf_counter()
    await host.run()
    stopped = time.perf_counter() - started
    if clock.reached_at is None:
        raise RuntimeError(f"the worker deleted {clock.succeeded} of {messages} messages")
    return Measurement(clock.reached_at - started, clock.get("storage_retries"), stopped)


@dataclass
class Contender:
    """One way of draining a queue, with what each round measured."""

    name: str
    #: Drains a queue (connection string, queue) of the given number of messages.
    run: Callable[[str, str, int], Awaitable[Measurement]]
    seconds: list[float] = field(default_factory=list)
    python_cpu: list[float] = field(default_factory=list)
    gc_seconds: list[float] = field(default_factory=list)
    azurite_cpu: list[float] = field(default_factory=list)
    returned_after: list[float] = field(default_factory=list)
    retries: int = 0

    def rates(self, messages: int) -> list[float]:
        return [messages / s for s in self.seconds]

    def median_rate(self, messages: int) -> float:
        return statistics.median(self.rates(messages))

    def line(self, messages: int) -> str:
        def per_message(seconds: list[float]) -> str:
            return f"{1000 * statistics.median(seconds) / messages:5.2f}"

        rounds = ", ".join(f"{r:.0f}" for r in self.rates(messages))
        retried = f", {self.retries} retried requests" if self.retries else ""
        return (
            f"{self.name:<13} {self.median_rate(messages):5.0f}  {per_message(self.python_cpu)}  "
            f"{per_message(self.gc_seconds)}  {per_message(self.azurite_cpu):>7}  [{rounds}{retried}]"
        )


def slug(contender: Contender) -> str:
    """The contender's name as part of a queue name ("ceiling K=4": "ceiling-k4")."""
    return contender.name.lower().replace(" k=", "-k").replace(" ", "-").replace("+", "-")


async def measure(
    contender: Contender, connection_string: str, queue: str, messages: int, azurite: AzuriteCpu, collector: GcTime
) -> None:
    """Fill ``queue``, let ``contender`` drain it, check that nothing is left, note the figures."""
    await fill(connection_string, queue, messages)
    cpu, collected, server = time.process_time(), collector.seconds, azurite.seconds()
    result = await contender.run(connection_string, queue, messages)
    contender.python_cpu.append(time.process_time() - cpu)
    contender.gc_seconds.append(collector.seconds - collected)
    contender.azurite_cpu.append(azurite.seconds() - server)
    contender.seconds.append(result.seconds)
    contender.retries += result.retries
    if result.returned_after is not None:
        contender.returned_after.append(result.returned_after)
    left = await remaining(connection_string, queue)
    if left:
        raise RuntimeError(f"{contender.name} left {left} of {messages} messages in {queue}")


def otel_environment(endpoint: str) -> dict[str, str]:
    """What asks the worker for traces: the standard variables, the batch processor left at its defaults."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "bench-worker"}


class SideProcess:
    """A process of the benchmark's own beside the worker, so that its work is not charged to the worker: it prints one
    line once started, then a count each time it is asked on stdin."""

    def __init__(self, script: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.first_line = self.proc.stdout.readline().strip()

    def count(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class ReceiverProcess(SideProcess):
    """The tests' OTLP/HTTP receiver; its count is the spans it received."""

    SCRIPT = (
        "import sys\nfrom tests.tracing.receiver import Receiver\nr = Receiver().start()\n"
        "print(r.endpoint, flush=True)\nfor _ in sys.stdin:\n    print(len(r.received()), flush=True)\n"
    )

    def __init__(self) -> None:
        super().__init__(self.SCRIPT)
        self.endpoint = self.first_line
        if not self.endpoint.startswith("http://"):
            self.stop()
            raise RuntimeError(f"the OTLP receiver did not start: {self.endpoint!r}")


class ConsolePages(SideProcess):
    """Open console pages, polling as the page's script does; their count is the requests answered."""

    #: The page's own schedule (worker/runtime/console/static/console.js): the state every 3 s, the history every 10 s.
    SCRIPT = """
import sys, threading, time, urllib.request
port, token, pages = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
answered = 0
lock = threading.Lock()

def get(path):
    global answered
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
    except OSError:
        return  # the worker is between runs
    with lock:
        answered += 1

def page(offset):
    time.sleep(offset)
    next_state = next_history = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_state:
            get("/console/api/state")
            next_state = now + 3.0
        if now >= next_history:
            get("/console/api/history")
            next_history = now + 10.0
        time.sleep(max(0.0, min(next_state, next_history) - time.monotonic()))

for index in range(pages):
    threading.Thread(target=page, args=(3.0 * index / pages,), daemon=True).start()
print("polling", flush=True)
for _ in sys.stdin:
    with lock:
        print(answered, flush=True)
"""

    def __init__(self, port: int, token: str, pages: int) -> None:
        super().__init__(self.SCRIPT, str(port), token, str(pages))
        if self.first_line != "polling":
            self.stop()
            raise RuntimeError("the console pages did not start")


#: Drains a queue (connection string, queue) of the given number of messages.
Run = Callable[[str, str, int], Awaitable[Measurement]]


@dataclass
class Contenders:
    """A run's contenders: the raw ceilings, the naive loop, the worker, and the worker's variants asked for."""

    ceilings: list[Contender]
    naive: Contender
    host: Contender
    #: With traces exported (--otel).
    traced: Contender | None
    #: On the SDK's public receive and delete (--public-path).
    public: Contender | None
    #: With its console served and watched (--console).
    watched: Contender | None

    def all(self) -> list[Contender]:
        """Every contender, in the order they are listed."""
        variants = (self.traced, self.public, self.watched)
        return [*self.ceilings, self.naive, self.host, *(c for c in variants if c is not None)]


async def bench(
    args: argparse.Namespace,
    azurite: Azurite,
    connection_string: str,
    receiver: ReceiverProcess | None = None,
    pages: ConsolePages | None = None,
    console_port: int | None = None,
) -> None:
    """Every contender drains its queues through ``connection_string``: Azurite itself, or the latency proxy."""
    assert azurite.proc is not None
    server = AzuriteCpu(azurite.proc.pid)
    collector = GcTime()
    gc.callbacks.append(collector)
    settings = WorkerSettings(args.max_in_flight, args.new_batch_threshold)
    if args.default_settings:  # the host's own defaults: maxInFlight 64, newBatchThreshold batchSize/2 x processors
        settings = WorkerSettings(HostConfig().max_in_flight, BATCH // 2 * (os.cpu_count() or 1))
    contenders = Contenders(
        ceilings=[Contender(f"ceiling K={k}", ceiling_run(k)) for k in args.ceiling_k],
        naive=Contender("naive", run_naive),
        host=Contender("worker", worker_run(settings)),
        traced=Contender("worker+otel", traced_worker_run(settings, receiver)) if receiver is not None else None,
        public=Contender("worker sdk", public_worker_run(settings)) if args.public_path else None,
        watched=Contender("worker+console", watched_worker_run(settings, console_port)) if pages is not None else None,
    )
    await warm_up(contenders.all(), connection_string)
    gc.freeze()  # as worker run does once its app is loaded; for every contender alike (see the docstring)
    await run_rounds(args, contenders, connection_string, server, collector)
    report(args, settings, contenders, receiver, pages)


def ceiling_run(k: int) -> Run:
    """The raw SDK loop with ``k`` receivers."""
    return lambda connection_string, queue, messages: run_ceiling(connection_string, queue, messages, k)


def worker_run(settings: WorkerSettings) -> Run:
    """The worker as it runs by default."""

    async def worker(connection_string: str, queue: str, messages: int) -> Measurement:
        return await run_worker(connection_string, queue, messages, settings)

    return worker


def traced_worker_run(settings: WorkerSettings, receiver: ReceiverProcess) -> Run:
    """The worker exporting its traces to ``receiver``."""

    async def worker_traced(connection_string: str, queue: str, messages: int) -> Measurement:
        os.environ.update(otel_environment(receiver.endpoint))
        try:
            result = await run_worker(connection_string, queue, messages, settings)
        finally:
            for name in otel_environment(receiver.endpoint):
                os.environ.pop(name, None)
        return result

    return worker_traced


def public_worker_run(settings: WorkerSettings) -> Run:
    """The worker on the SDK's public receive and delete, its fast path switched off."""

    async def worker_public(connection_string: str, queue: str, messages: int) -> Measurement:
        os.environ[FAST_PATH_ENV] = "0"
        try:
            return await run_worker(connection_string, queue, messages, settings)
        finally:
            os.environ.pop(FAST_PATH_ENV, None)

    return worker_public


def watched_worker_run(settings: WorkerSettings, console_port: int | None) -> Run:
    """The worker serving its console on ``console_port``, where the console pages refresh it."""

    async def worker_watched(connection_string: str, queue: str, messages: int) -> Measurement:
        os.environ["WORKER_HTTP_TOKEN"] = CONSOLE_TOKEN
        try:
            result = await run_worker(connection_string, queue, messages, settings, http_port=console_port)
        finally:
            os.environ.pop("WORKER_HTTP_TOKEN", None)
        return result

    return worker_watched


async def warm_up(contenders: list[Contender], connection_string: str) -> None:
    """Each contender drains a few messages once, untimed: what a long-running process does once (see the
    docstring)."""
    for contender in contenders:
        queue = f"bench-warm-{slug(contender)}"
        await fill(connection_string, queue, WARM_UP)
        await contender.run(connection_string, queue, WARM_UP)
        await remaining(connection_string, queue)


async def run_rounds(
    args: argparse.Namespace, contenders: Contenders, connection_string: str, server: AzuriteCpu, collector: GcTime
) -> None:
    """The timed rounds: every contender drains its own queue of ``--messages`` once a round (the naive loop only in
    the first ``--naive-rounds``)."""
    n = args.messages
    everyone = contenders.all()
    for round_ in range(args.rounds):
        # Rotate the order each round and reverse every other one, so that no contender always runs first or last.
        shift = round_ % len(everyone)
        order = everyone[shift:] + everyone[:shift]
        if round_ % 2:
            order.reverse()
        for contender in order:
            if contender is contenders.naive and round_ >= args.naive_rounds:
                continue
            queue = f"bench-{round_}-{slug(contender)}"
            await measure(contender, connection_string, queue, n, server, collector)
            print(f"  round {round_ + 1}: {contender.name:<13} {n / contender.seconds[-1]:5.0f} msgs/s", flush=True)


def report(
    args: argparse.Namespace,
    settings: WorkerSettings,
    contenders: Contenders,
    receiver: ReceiverProcess | None,
    pages: ConsolePages | None,
) -> None:
    """The figures of every contender, then the ratios the targets are set in."""
    n = args.messages
    host, naive = contenders.host, contenders.naive
    best = max(contenders.ceilings, key=lambda c: c.median_rate(n))
    print(
        f"\n{n} messages per contender, median of {args.rounds} rounds (each round in brackets"
        + (f"; the naive loop in the first {args.naive_rounds}" if args.naive_rounds < args.rounds else "")
        + ")"
        + (f", every request delayed {args.latency_ms:g} ms" if args.latency_ms else "")
    )
    print(
        f"worker: batchSize {BATCH}, maxInFlight {settings.max_in_flight}, "
        f"newBatchThreshold {settings.new_batch_threshold}, messageEncoding none"
    )
    print("  (py, gc, azurite: CPU ms per message in this process, in its garbage collector, in Azurite)")
    print(f"  {'':<13} {'msg/s':>5}  {'py':>5}  {'gc':>5}  {'azurite':>7}  [msg/s each round]")
    for contender in contenders.all():
        print(f"  {contender.line(n)}{'   <- the ceiling' if contender is best else ''}")
    stop = statistics.median(host.returned_after)
    print(f"  worker run() returned after {stop:.2f} s (median; burst-mode stop check included): {n / stop:.0f} msgs/s")
    worker_rate, best_rate, naive_rate = host.median_rate(n), best.median_rate(n), naive.median_rate(n)
    print(f"\nworker/ceiling = {worker_rate / best_rate:.2f}   (target >= 0.9; the ceiling is {best.name})")
    print(f"worker/naive   = {worker_rate / naive_rate:.2f}   (target >= 5)")
    print(f"ceiling/naive  = {best_rate / naive_rate:.2f}   (the most any client could gain over the naive loop here)")
    report_variants(args, contenders, receiver, pages)


def report_variants(
    args: argparse.Namespace, contenders: Contenders, receiver: ReceiverProcess | None, pages: ConsolePages | None
) -> None:
    """The worker's CPU per message over the raw loops', and each variant asked for against the worker."""
    n = args.messages
    host = contenders.host
    worker_rate = host.median_rate(n)

    # CPU per message against the raw loops': each round's worker against that round's ceilings (their median), so
    # that what drifts between rounds (the other core's load, caches) drifts in both sides of a ratio.
    def paired(contender: Contender) -> list[float]:
        return [
            cpu / statistics.median(c.python_cpu[round_] for c in contenders.ceilings)
            for round_, cpu in enumerate(contender.python_cpu)
        ]

    ratios = paired(host)
    print(
        f"worker py/ceiling py = {statistics.median(ratios):.3f}   (CPU per message, target <= 1.05: the median of the "
        f"rounds' ratios to the ceilings' median, each round {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    if (public := contenders.public) is not None:
        ratios = paired(public)
        print(
            f"worker sdk py/ceiling py = {statistics.median(ratios):.3f}   (the same on the SDK's public receive and "
            f"delete, target <= 1.15; each round {', '.join(f'{r:.3f}' for r in ratios)})"
        )
    if (traced := contenders.traced) is not None and receiver is not None:
        print(
            f"worker+otel/worker = {traced.median_rate(n) / worker_rate:.2f}   (msgs/s with traces over without; "
            f"py ms/msg {1000 * statistics.median(traced.python_cpu) / n:.2f} against "
            f"{1000 * statistics.median(host.python_cpu) / n:.2f}; {receiver.count()} spans received)"
        )
    if (watched := contenders.watched) is not None and pages is not None:
        print(
            f"worker+console/worker = {watched.median_rate(n) / worker_rate:.2f}   (msgs/s with {args.console_pages} "
            f"console pages refreshing over without; py ms/msg {1000 * statistics.median(watched.python_cpu) / n:.2f}"
            f" against {1000 * statistics.median(host.python_cpu) / n:.2f}; {pages.count()} console requests "
            "answered)"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Throughput of the worker on Azurite beside a raw-SDK ceiling and a naive loop, as ratios.",
        epilog="See the module docstring (bench/throughput.py) for what is timed and how to read the output.",
    )
    parser.add_argument("--messages", type=int, default=1000, help="messages per contender (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the figures are medians (default 3)")
    parser.add_argument(
        "--naive-rounds",
        type=int,
        default=None,
        help="rounds the naive loop runs in, the first ones (default: all); it takes 30 times as long",
    )
    parser.add_argument("--max-in-flight", type=int, default=128, help="the worker's maxInFlight (default 128)")
    parser.add_argument(
        "--new-batch-threshold",
        type=int,
        default=96,
        help="the worker's newBatchThreshold (default 96: receive again once 32 places are free)",
    )
    parser.add_argument(
        "--ceiling-k",
        type=lambda s: [int(k) for k in s.split(",")],
        default=[2, 4, 8],
        metavar="K,K,...",
        help="receivers tried for the ceiling (default 2,4,8)",
    )
    parser.add_argument(
        "--default-settings",
        action="store_true",
        help="run the worker at the host's defaults (maxInFlight, newBatchThreshold) but batchSize",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0,
        help="add this round-trip delay to every request, through a proxy process (default 0: none)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="add the worker with OpenTelemetry traces exported over OTLP/HTTP (needs the otel extra)",
    )
    parser.add_argument(
        "--public-path",
        action="store_true",
        help="also run the worker on the SDK's public receive and delete (its fallback)",
    )
    parser.add_argument(
        "--console",
        action="store_true",
        help="add the worker with its endpoints and web console on, and console pages refreshing it",
    )
    parser.add_argument(
        "--console-pages", type=int, default=10, help="how many open console pages refresh it with --console (default 10)"
    )
    args = parser.parse_args(argv)
    if args.naive_rounds is None or args.naive_rounds > args.rounds:
        args.naive_rounds = args.rounds
    if args.naive_rounds < 1:
        parser.error("--naive-rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging("WARNING", json_lines=False)
    with tempfile.TemporaryDirectory(prefix="bench-azurite-") as folder:
        azurite = Azurite(location=Path(folder)).start()
        proxy: subprocess.Popen[str] | None = None
        receiver = ReceiverProcess() if args.otel else None
        console_port = free_port() if args.console else None
        pages = ConsolePages(console_port, CONSOLE_TOKEN, args.console_pages) if console_port else None
        try:
            connection_string = azurite.connection_string
            if args.latency_ms:
                proxy, port = start_latency_proxy(azurite.port, args.latency_ms)
                connection_string = connection_string.replace(f":{azurite.port}/", f":{port}/")
            asyncio.run(bench(args, azurite, connection_string, receiver, pages, console_port))
        finally:
            if proxy is not None:
                proxy.terminate()
                proxy.wait(10)
            if receiver is not None:
                receiver.stop()
            if pages is not None:
                pages.stop()
            azurite.stop()


def start_latency_proxy(upstream_port: int, latency_ms: float) -> tuple[subprocess.Popen[str], int]:
    """The test suite's fault proxy (tests/reliability/faultproxy.py) in its own process, delaying every request.

    Azurite on loopback answers in well under a millisecond of network time, where a real storage account is
    a few to tens of milliseconds away: a sequential loop pays that delay twice per message, a concurrent
    client hides it. The proxy runs apart so that its CPU is not charged to the contenders.
    """
    proxy = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.faultproxy", str(upstream_port), "--latency-ms", str(latency_ms)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout is not None
    line = proxy.stdout.readline()
    if not line.startswith("listening "):
        proxy.kill()
        raise RuntimeError(f"the latency proxy did not start: {line!r}")
    return proxy, int(line.split()[1])


if __name__ == "__main__":
    main()

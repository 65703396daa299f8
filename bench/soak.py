"""Soak: a real ``worker run`` under a steady load for minutes, watched for growth of memory, descriptors and tasks.

A leak that costs a few kilobytes or one file descriptor per thousand messages
passes every functional test and stops a worker after days. This runs the host
as operators do, a ``worker run`` subprocess, for ``--minutes`` (default 10) on
the embedded queue (or ``--backend azurite``: an Azurite from node_modules,
storing on disk in a temporary folder, as bench/throughput.py starts it), and a
producer in this process puts ``--rate`` messages a second, split evenly
between two functions of the app below:

``soak-sync``
    a plain ``def`` handler: runs on one of ``worker.handlerThreads`` threads;
``soak-async``
    an ``async def`` handler: runs on the event loop.

Each handler works ``--work-ms`` (a sleep, as for a call to a service) and
fails a small part of its messages (``--fail-fraction``): half of those fail on
the first attempt only (retried, then deleted), half every time (poisoned after
``maxDequeueCount`` = 3 attempts), so that retry and poison paths run all along.

Every ``--sample`` seconds (default 15) it reads, for the worker process:
throughput over the interval (messages completed, i.e. deleted or poisoned,
from ``/metrics``), the backlog (both trigger queues, counted from this
process), messages in flight (``/metrics``) and leases held (``/leases``), CPU,
RSS (``VmRSS`` in /proc/PID/status), open file descriptors (/proc/PID/fd),
OS threads (``Threads`` in /proc/PID/status), handler threads ("hthr": busy /
abandoned, i.e. running a sync handler / still held by one the host gave up on,
``worker_handler_threads`` on ``/metrics``) and asyncio tasks
(``worker_event_loop_tasks``, the host loop's ``asyncio.all_tasks`` at scrape
time). /proc is read rather than the ``process_*`` gauges: exact, and
independent of the worker's own reporting.

The task count at one instant follows the messages in flight (an invocation
task and a handler task each), so each sample scrapes it ``TASK_SCRAPES`` times
``TASK_SCRAPE_GAP`` s apart ("tasks" is min-max) and the verdict uses the
minimum: the baseline that leaked tasks would raise, with little of the noise
of whichever batch happened to be in flight.

The verdict compares the samples from the end of ``--warmup`` (default a quarter
of the run, at most 60 s) to the last: first -> last delta, and the slope of a
least-squares line per minute, over that window and over its second half.
Growth counts only when it is sustained, in both: memory settling after
warm-up, and pools filling on demand (handler threads up to handlerThreads, the
loop's default executor), level off and are not leaks. Then the drain: the producer stops, the queues
empty, the worker gets SIGTERM, and its final "host stopped" log line gives
the counters: sent = succeeded + poisoned, nothing left, nothing lost.

Run: ``.venv/bin/python bench/soak.py [--minutes 10] [--rate 50] [--backend sqlite|azurite]``.
It exits 1 when a message is lost or the worker dies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from worker import QueueMessage, WorkerApp  # noqa: E402
from worker.backends.queues import QueueBackend  # noqa: E402

# -- the app the worker runs (imported by ``worker run --app soak:app``) -------------------------------------------

SYNC_QUEUE = "soak-sync"
ASYNC_QUEUE = "soak-async"
QUEUES = (SYNC_QUEUE, ASYNC_QUEUE)
MAX_DEQUEUE = 3
#: Puts the producer keeps in flight at most (Azurite answers a put in milliseconds, not microseconds).
PRODUCER_CONCURRENCY = 32
#: Scrapes of ``worker_event_loop_tasks`` per sample, and the seconds between them: the minimum is the baseline.
TASK_SCRAPES = 5
TASK_SCRAPE_GAP = 0.2

app = WorkerApp()


def _fails(job: dict[str, Any], dequeue_count: int) -> bool:
    """``flaky`` fails its first attempt only; ``poison`` fails every one."""
    return job["fate"] == "poison" or (job["fate"] == "flaky" and dequeue_count == 1)


@app.function_name("soak_sync")
@app.queue_trigger(arg_name="msg", queue_name=SYNC_QUEUE)
def soak_sync(msg: QueueMessage) -> None:
    job = msg.get_json()
    time.sleep(job["ms"] / 1000)
    if _fails(job, msg.dequeue_count):
        raise RuntimeError(f"soak: {job['fate']} message {job['n']} fails (attempt {msg.dequeue_count})")


@app.function_name("soak_async")
@app.queue_trigger(arg_name="msg", queue_name=ASYNC_QUEUE)
async def soak_async(msg: QueueMessage) -> None:
    job = msg.get_json()
    await asyncio.sleep(job["ms"] / 1000)
    if _fails(job, msg.dequeue_count):
        raise RuntimeError(f"soak: {job['fate']} message {job['n']} fails (attempt {msg.dequeue_count})")


# -- the bench ------------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status(pid: int) -> dict[str, str]:
    """/proc/PID/status as a mapping (VmRSS, Threads, ...)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        found[key] = value.strip()
    return found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http_get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.read().decode()


def scrape(port: int) -> dict[str, float]:
    """``/metrics`` by name summed over labels, and by labelled sample as written there.

    ``{"worker_succeeded_total": 123.0, 'worker_handler_threads{state="busy"}': 2.0, ...}``: counters are wanted
    over all functions, but a gauge labelled by state, like handler threads, is wanted per state.
    """
    from prometheus_client.parser import text_string_to_metric_families

    totals: Counter[str] = Counter()
    for family in text_string_to_metric_families(http_get(port, "/metrics")):
        for sample in family.samples:
            totals[sample.name] += sample.value
            if sample.labels:
                labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
                totals[f"{sample.name}{{{labels}}}"] += sample.value
    return dict(totals)


async def loop_tasks(port: int, first: dict[str, float]) -> tuple[int, int]:
    """Least and most ``worker_event_loop_tasks`` over the scrape ``first`` and ``TASK_SCRAPES - 1`` more.

    One reading follows the messages in flight at that instant; the least of a few is the baseline.
    """
    counts = [first["worker_event_loop_tasks"]]
    for _ in range(TASK_SCRAPES - 1):
        await asyncio.sleep(TASK_SCRAPE_GAP)
        counts.append((await asyncio.to_thread(scrape, port))["worker_event_loop_tasks"])
    return int(min(counts)), int(max(counts))


@dataclass
class Sample:
    t: float
    sent: int
    completed: float
    rate: float
    backlog: int
    in_flight: float
    leases: int
    cpu: float
    rss_mib: float
    fds: int
    threads: int
    #: Handler threads running a sync handler, and those of them running one the host gave up on.
    busy: int
    abandoned: int
    #: Least and most asyncio tasks on the host's loop over the sample's scrapes (see loop_tasks).
    tasks: int
    tasks_max: int


@dataclass
class Producer:
    """Puts ``rate`` messages a second, alternating the two queues, with a seeded share that fails."""

    backend: QueueBackend
    rate: float
    work_ms: float
    fail_fraction: float
    rng: random.Random = field(default_factory=lambda: random.Random(20240601))
    sent: Counter[str] = field(default_factory=Counter)
    put_errors: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    async def run(self) -> None:
        """Put on a fixed schedule, several puts in flight, so that one slow put does not lower the rate."""
        started = time.monotonic()
        slots = asyncio.Semaphore(PRODUCER_CONCURRENCY)
        pending: set[asyncio.Task[None]] = set()
        n = 0
        while not self.stop.is_set():
            delay = started + n / self.rate - time.monotonic()
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            roll = self.rng.random()
            fate = "ok" if roll >= self.fail_fraction else ("flaky" if roll < self.fail_fraction / 2 else "poison")
            queue = QUEUES[n % 2]
            body = json.dumps({"n": n, "fate": fate, "ms": self.work_ms})
            await slots.acquire()
            task = asyncio.create_task(self._put(queue, fate, body, slots))
            pending.add(task)
            task.add_done_callback(pending.discard)
            n += 1
        await asyncio.gather(*pending)

    async def _put(self, queue: str, fate: str, body: str, slots: asyncio.Semaphore) -> None:
        from worker.bindings.encoding import encode

        try:
            await self.backend.put(queue, encode(body, "base64"))
        except Exception as exc:  # counted and shown: a put that fails is not a message sent
            self.put_errors += 1
            print(f"  put failed: {type(exc).__name__}: {exc}", flush=True)
        else:
            self.sent[f"{queue}:{fate}"] += 1
        finally:
            slots.release()


def host_yaml(folder: Path, port: int) -> Path:
    path = folder / "host.yaml"
    path.write_text(
        'version: "1.0"\n'
        'functionTimeout: "00:00:30"\n'
        "extensions:\n"
        "  queues:\n"
        "    batchSize: 16\n"
        "    maxPollingInterval: 500ms\n"
        "    visibilityTimeout: 0s\n"
        f"    maxDequeueCount: {MAX_DEQUEUE}\n"
        "worker:\n"
        f"  httpPort: {port}\n"
        "  drainTimeout: 10s\n",
        encoding="utf-8",
    )
    return path


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    if len(points) < 2 or len({t for t, _ in points}) < 2:
        return 0.0
    return statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope * 60


def host_stopped(log: Path) -> dict[str, Any] | None:
    found = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("event") == "host stopped":
            found = entry
    return found


async def soak(args: argparse.Namespace, folder: Path, connection: str | None) -> int:
    from worker.backends.registry import open_backend

    port = free_port()
    config = host_yaml(folder, port)
    log = folder / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER__") and k != "AzureWebJobsStorage"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "bench")])
    if connection:
        env["AzureWebJobsStorage"] = connection
    backend = open_backend(connection, folder)
    for queue in QUEUES:
        await backend.create_queue(queue)
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--app", "soak:app", "--config", str(config)],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        return await _watch(args, proc, port, backend, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await backend.close()


async def _ready(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if json.loads(await asyncio.to_thread(http_get, port, "/readyz"))["ready"]:
                return
        except Exception:  # not listening yet, or 503 while storage is opened
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker not ready after {timeout}s:\n{log.read_text()}")
        await asyncio.sleep(0.2)


async def _backlog(backend: QueueBackend) -> int:
    return sum([await backend.approximate_count(q) for q in QUEUES])


async def _watch(
    args: argparse.Namespace, proc: subprocess.Popen[bytes], port: int, backend: QueueBackend, log: Path
) -> int:
    await _ready(proc, port, log)
    producer = Producer(backend, args.rate, args.work_ms, args.fail_fraction)
    pid = proc.pid
    print(
        f"worker pid {pid}, {args.backend}, {args.rate:g} msg/s for {args.minutes:g} min, handler work "
        f"{args.work_ms:g} ms, {args.fail_fraction:.1%} failing (half flaky, half poison), sample every "
        f"{args.sample:g} s, warm-up {args.warmup:g} s",
        flush=True,
    )
    header = (
        f"{'t':>6} {'sent':>7} {'done':>7} {'msg/s':>6} {'backlog':>7} {'flight':>6} {'leases':>6} "
        f"{'cpu%':>5} {'rss MiB':>8} {'fds':>4} {'thr':>4} {'hthr':>5} {'tasks':>7}"
    )
    print(header, flush=True)
    samples: list[Sample] = []
    started = time.monotonic()
    produce = asyncio.create_task(producer.run())
    previous = (started, 0.0, cpu_seconds(pid))
    end = started + args.minutes * 60
    died = False
    while True:
        next_at = min(end, previous[0] + args.sample)
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if proc.poll() is not None:
            died = True
            break
        now = time.monotonic()
        metrics = await asyncio.to_thread(scrape, port)
        leases = len(json.loads(await asyncio.to_thread(http_get, port, "/leases")))
        completed = metrics.get("worker_succeeded_total", 0.0) + metrics.get("worker_poisoned_total", 0.0)
        status = proc_status(pid)
        cpu = cpu_seconds(pid)
        tasks, tasks_max = await loop_tasks(port, metrics)
        sample = Sample(
            t=now - started,
            sent=producer.total,
            completed=completed,
            rate=(completed - previous[1]) / (now - previous[0]),
            backlog=await _backlog(backend),
            in_flight=metrics.get("worker_messages_in_flight", 0.0),
            leases=leases,
            cpu=100 * (cpu - previous[2]) / (now - previous[0]),
            rss_mib=int(status["VmRSS"].split()[0]) / 1024,
            fds=len(os.listdir(f"/proc/{pid}/fd")),
            threads=int(status["Threads"]),
            busy=int(metrics['worker_handler_threads{state="busy"}']),
            abandoned=int(metrics['worker_handler_threads{state="abandoned"}']),
            tasks=tasks,
            tasks_max=tasks_max,
        )
        samples.append(sample)
        previous = (now, completed, cpu)
        print(
            f"{sample.t:6.0f} {sample.sent:7d} {sample.completed:7.0f} {sample.rate:6.1f} {sample.backlog:7d} "
            f"{sample.in_flight:6.0f} {sample.leases:6d} {sample.cpu:5.1f} {sample.rss_mib:8.1f} {sample.fds:4d} "
            f"{sample.threads:4d} {f'{sample.busy}/{sample.abandoned}':>5} {f'{tasks}-{tasks_max}':>7}",
            flush=True,
        )
        if now >= end:
            break

    producer.stop.set()
    await produce
    if died:
        print(f"\nthe worker DIED with exit code {proc.returncode}; last log lines:")
        print("\n".join(log.read_text(errors="replace").splitlines()[-20:]))
        return 1

    # Drain: wait for both queues to empty (a flaky or poison message needs a few more attempts), then SIGTERM.
    drain_started = time.monotonic()
    while (left := await _backlog(backend)) and time.monotonic() - drain_started < args.drain_timeout:
        await asyncio.sleep(0.5)
    drained_in = time.monotonic() - drain_started
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 120)
    totals = host_stopped(log) or {}
    poison = 0
    for queue in QUEUES:
        try:
            poison += await backend.approximate_count(f"{queue}-poison")
        except Exception:  # no poison queue: nothing was poisoned there
            pass

    return report(args, samples, producer, totals, left, drained_in, code, poison)


def report(
    args: argparse.Namespace,
    samples: list[Sample],
    producer: Producer,
    totals: dict[str, Any],
    left: int,
    drained_in: float,
    code: int,
    poison: int,
) -> int:
    """Print growth after warm-up and the final accounting; 1 when a message was lost or the worker failed."""
    steady = [s for s in samples if s.t >= args.warmup] or samples
    print(f"\ngrowth from t={steady[0].t:.0f}s (after warm-up) to t={steady[-1].t:.0f}s, {len(steady)} samples:")
    print(f"  {'':<10} {'first':>9} {'last':>9} {'delta':>9} {'slope/min':>10} {'2nd half':>9}")
    series: dict[str, list[tuple[float, float]]] = {
        "rss MiB": [(s.t, s.rss_mib) for s in steady],
        "fds": [(s.t, s.fds) for s in steady],
        "threads": [(s.t, s.threads) for s in steady],
        "tasks min": [(s.t, s.tasks) for s in steady],
        "in flight": [(s.t, s.in_flight) for s in steady],
    }
    slopes: dict[str, tuple[float, float]] = {}
    deltas: dict[str, tuple[float, float]] = {}
    for name, points in series.items():
        half = points[-max(2, (len(points) + 1) // 2) :]  # the second half, at least two samples
        slopes[name] = (slope_per_minute(points), slope_per_minute(half))
        deltas[name] = (points[-1][1] - points[0][1], half[-1][1] - half[0][1])
        print(
            f"  {name:<10} {points[0][1]:9.1f} {points[-1][1]:9.1f} {deltas[name][0]:+9.1f} "
            f"{slopes[name][0]:+10.2f} {slopes[name][1]:+9.2f}"
        )
    rates = [s.rate for s in steady]
    print(
        f"  throughput: {statistics.mean(rates):.1f} msg/s mean, {min(rates):.1f} min, {max(rates):.1f} max "
        f"(producer {args.rate:g} msg/s); backlog at the last sample {steady[-1].backlog}"
    )

    # Growth counts only when it is sustained: over the whole window and still in its second half, so that pools
    # filling up after warm-up (handler threads start on demand up to handlerThreads) do not read as a leak.
    growing = []
    rss_all, rss_half = slopes["rss MiB"]
    if rss_all > args.rss_slope_limit and rss_half > args.rss_slope_limit:
        growing.append(
            f"RSS grows {rss_all:+.2f} MiB/min, {rss_half:+.2f} in the second half (limit {args.rss_slope_limit:g})"
        )
    for name in ("fds", "threads"):
        whole, second = deltas[name]
        if whole > args.count_delta_limit and second > 0:
            growing.append(f"{name} grow {whole:+.0f}, {second:+.0f} in the second half")
    tasks_all, tasks_half = slopes["tasks min"]
    if tasks_all > args.count_delta_limit and tasks_half > args.count_delta_limit:
        growing.append(f"tasks grow {tasks_all:+.2f}/min")
    print("verdict:", "no growth" if not growing else "GROWTH: " + "; ".join(growing))

    sent = producer.total
    fates = Counter(key.split(":")[1] for key in producer.sent.elements())
    succeeded, poisoned = int(totals.get("succeeded", 0)), int(totals.get("poisoned", 0))
    lost = sent - succeeded - poison - left
    print(
        f"\nmessages: sent {sent} (ok {fates['ok']}, flaky {fates['flaky']}, poison {fates['poison']}; "
        f"{producer.put_errors} puts failed), completed {succeeded}, poisoned {poisoned} "
        f"(poison queues hold {poison}), left in queues {left}, lost {lost}"
    )
    print(
        f"  drained in {drained_in:.1f} s; worker exit code {code}; "
        + ", ".join(
            f"{k} {totals.get(k, 0)}"
            for k in (
                "received",
                "failed",
                "retried",
                "released",
                "leases_lost",
                "completions_skipped",
                "storage_errors",
                "storage_retries",
            )
        )
    )
    expected_poison = fates["poison"]
    if not totals:
        print("  the worker logged no 'host stopped' line")
    if poisoned != expected_poison or poison != expected_poison:
        print(f"  UNEXPECTED: {expected_poison} poison messages were sent")
    if succeeded + poisoned > sent:
        print(f"  DUPLICATES: {succeeded + poisoned - sent} more completions than messages")
    return 0 if lost == 0 and left == 0 and code == 0 and totals else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="A worker run subprocess under steady load, sampled for growth of RSS, fds, threads and tasks.",
        epilog="See the module docstring (bench/soak.py) for what is measured and how.",
    )
    parser.add_argument("--minutes", type=float, default=10, help="how long the producer runs (default 10)")
    parser.add_argument("--rate", type=float, default=50, help="messages put per second (default 50)")
    parser.add_argument(
        "--backend",
        choices=["sqlite", "azurite"],
        default="sqlite",
        help="the embedded queue (default) or an Azurite started from node_modules",
    )
    parser.add_argument("--sample", type=float, default=15, help="seconds between samples (default 15)")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds before growth is measured (default a quarter of the run, at most 60)",
    )
    parser.add_argument("--work-ms", type=float, default=3, help="each handler's work in ms (default 3)")
    parser.add_argument(
        "--fail-fraction",
        type=float,
        default=0.02,
        help="share of messages that fail: half once (retried), half always (poisoned); default 0.02",
    )
    parser.add_argument("--drain-timeout", type=float, default=120, help="longest wait for the queues to empty")
    parser.add_argument(
        "--rss-slope-limit",
        type=float,
        default=1.0,
        help="RSS growth per minute, in MiB, above which the verdict is growth (default 1)",
    )
    parser.add_argument(
        "--count-delta-limit",
        type=float,
        default=2,
        help="growth in fds or threads (first->last), or tasks per minute, counted as growth (default 2)",
    )
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = min(60.0, args.minutes * 60 / 4)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="soak-") as name:
        folder = Path(name)
        if args.backend == "sqlite":
            return asyncio.run(soak(args, folder, None))
        from tests.azurite import Azurite

        (folder / "azurite").mkdir()
        azurite = Azurite(location=folder / "azurite").start()
        try:
            return asyncio.run(soak(args, folder, azurite.connection_string))
        finally:
            azurite.stop()


if __name__ == "__main__":
    sys.exit(main())

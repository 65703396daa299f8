"""CPU-bound sync handlers: ``worker run --processes 1`` against ``--processes 2``, on the embedded queue.

A worker process runs Python on one core at a time (one GIL), however many
handler threads it has; a second process uses a second core. Each variant
drains the same N messages from its own queue file with ``worker run --burst``
(real processes, default settings) running tests/apps/cpu_bound.py, whose
handler is pure Python arithmetic. The time is the span from the first
handler's start to the last one's end (each handler records both), so process
start-up is in neither; ``worker run``'s whole time is printed beside it.
Variants alternate over ``--rounds``; medians reported.

``--handler-threads N`` sets ``worker.handlerThreads`` for both variants
(default: the host's own default, processors + 4). CPU-bound handlers are
best run with one thread a process, as docs/operating.md advises: more
threads only take turns at the interpreter lock, and once every core is busy
their hand-offs cost the other process's core too.

``--batch-size N`` sets ``extensions.queues.batchSize`` (newBatchThreshold follows it, as in Functions). With the
default 16, a process takes a batch and the next as soon as it is at the threshold, so 60 messages split about 32/28
between two processes from the first second, and the one with more ends last: 60/32 = 1.875x at best. With 1 (and
so a threshold of 0) a process takes a message only when it has none, so both work to the end, as
docs/operating.md advises for CPU-bound handlers.

    python bench/processes.py [--messages 60] [--rounds 3] [--work 1500000] [--handler-threads N] [--batch-size N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(processes: int, messages: int, work: int, threads: int | None, batch: int | None) -> tuple[float, float]:
    """(span of the handlers, whole ``worker run`` time) for ``--processes N`` draining ``messages`` messages."""
    with tempfile.TemporaryDirectory(prefix="bench-processes-") as folder:
        config = Path(folder) / "host.yaml"
        config.write_text("version: '1.0'\nextensions:\n  queues:\n    maxPollingInterval: 200ms\n", encoding="utf-8")
        times = Path(folder) / "times"
        times.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER__", "AzureWebJobs"))}
        env |= {"PYTHONPATH": str(REPO), "CPU_WORK": str(work), "CPU_TIMES": str(times)}
        if threads is not None:
            env["WORKER__worker__handlerThreads"] = str(threads)
        if batch is not None:
            env["WORKER__extensions__queues__batchSize"] = str(batch)
        worker = [sys.executable, "-m", "worker"]
        bodies = [f"m{i}" for i in range(messages)]
        subprocess.run(
            [*worker, "send", "cpu-bound", *bodies, "--config", str(config)],
            env=env,
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        started = time.perf_counter()
        result = subprocess.run(
            [
                *worker,
                "run",
                "--app",
                "tests.apps.cpu_bound:app",
                "--config",
                str(config),
                "--burst",
                "--processes",
                str(processes),
                "--log-level",
                "WARNING",
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        whole = time.perf_counter() - started
        if result.returncode != 0:
            raise RuntimeError(f"worker run --processes {processes} exited {result.returncode}:\n{result.stderr}")
        spans = [tuple(map(float, line.split())) for file in times.iterdir() for line in file.read_text().splitlines()]
        if len(spans) != messages:
            raise RuntimeError(f"--processes {processes} ran {len(spans)} handlers for {messages} messages")
        left = json.loads(
            subprocess.run(
                [*worker, "queues", "--json", "--config", str(config)],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        if any(queue["approximateMessageCount"] for queue in left):
            raise RuntimeError(f"messages left after --processes {processes}: {left}")
        return max(end for _, end in spans) - min(start for start, _ in spans), whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=int, default=1_500_000, help="loop iterations per message")
    parser.add_argument(
        "--handler-threads",
        type=int,
        default=None,
        help="worker.handlerThreads for both variants (default: the host's default)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="extensions.queues.batchSize for both variants (default: the host's default, 16)",
    )
    args = parser.parse_args()
    spans: dict[int, list[float]] = {1: [], 2: []}
    wholes: dict[int, list[float]] = {1: [], 2: []}
    for round_ in range(args.rounds):
        for processes in (1, 2) if round_ % 2 == 0 else (2, 1):
            span, whole = run(processes, args.messages, args.work, args.handler_threads, args.batch_size)
            spans[processes].append(span)
            wholes[processes].append(whole)
            print(
                f"  round {round_ + 1}: --processes {processes}: {span:6.2f} s of handlers, {whole:6.2f} s of worker run",
                flush=True,
            )
    one, two = statistics.median(spans[1]), statistics.median(spans[2])
    threads = "default" if args.handler_threads is None else args.handler_threads
    batch = "default" if args.batch_size is None else args.batch_size
    print(
        f"\n{args.messages} CPU-bound messages, {os.cpu_count()} cores, handlerThreads {threads}, "
        f"batchSize {batch}, median of {args.rounds} rounds"
    )
    for n, span in ((1, one), (2, two)):
        print(
            f"--processes {n} : {span:6.2f} s  {args.messages / span:6.1f} msgs/s   "
            f"(worker run, start-up and stop included: {statistics.median(wholes[n]):6.2f} s)"
        )
    print(f"ratio 2/1     : {one / two:6.2f}x   (target >= 1.85)")


if __name__ == "__main__":
    main()

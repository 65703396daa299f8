"""Idle pick-up: how long a message sent by another process waits for an idle worker, and what idling costs.

One ``worker run`` process (default settings: maxPollingInterval 1 minute;
the embedded queue, ``--oci`` for OCI Queue on the test server in tests/oci,
or ``--connection`` for another one) runs
tests/apps/pickup.py, whose handler notes the wall-clock time a message
reached it. This process waits 1, 10, 30 and 65 s of silence (``--idle``),
then puts one message and reads how long it took to reach the handler; each
idle time ``--rounds`` times. The worker's CPU over the silent periods comes
from /proc (user + system time of its process) as a share of one core.

    python bench/pickup.py [--idle 1,10,30,65] [--rounds 3] [--oci | --connection CONNECTION]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from worker.backends.registry import open_backend  # noqa: E402
from worker.bindings.encoding import encode  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_for_line(file: Path, tag: str, timeout: float) -> float:
    """The time the handler noted for the message ``tag`` (polled every 5 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if file.exists():
            for line in file.read_text().splitlines():
                name, _, at = line.partition(" ")
                if name == tag:
                    return float(at)
        time.sleep(0.005)
    raise RuntimeError(f"message {tag} did not reach the handler within {timeout}s")


async def bench(args: argparse.Namespace, folder: Path) -> None:
    config = folder / "host.yaml"
    config.write_text("version: '1.0'\n", encoding="utf-8")
    noted = folder / "noted"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER__", "AzureWebJobs"))}
    env |= {"PYTHONPATH": str(REPO), "PICKUP_FILE": str(noted)}
    if args.connection:
        env["AzureWebJobsStorage"] = args.connection
    queue = open_backend(args.connection, folder)
    await queue.create_queue("pickup")  # before the worker starts: on OCI it must exist, with a delivery limit
    if args.oci_server is not None:
        args.oci_server.set_delivery_limit("pickup", 5)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker",
            "run",
            "--app",
            "tests.apps.pickup:app",
            "--config",
            str(config),
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await asyncio.sleep(3)  # the worker is up and its listener idle
        latencies: dict[float, list[float]] = {idle: [] for idle in args.idle}
        idle_cpu = idle_wall = 0.0
        for round_ in range(args.rounds):
            for idle in args.idle:
                cpu_before, wall_before = cpu_seconds(worker.pid), time.monotonic()
                await asyncio.sleep(idle)
                idle_cpu += cpu_seconds(worker.pid) - cpu_before
                idle_wall += time.monotonic() - wall_before
                tag = f"r{round_}-{idle:g}"
                sent = time.time()
                await queue.put("pickup", encode(tag, "base64"))
                arrived = await asyncio.to_thread(wait_for_line, noted, tag, 120)
                latencies[idle].append(arrived - sent)
                print(f"  round {round_ + 1}, idle {idle:g} s: picked up after {arrived - sent:.3f} s", flush=True)
    finally:
        await queue.close()
        worker.terminate()
        worker.wait(60)
    every = sorted(value for values in latencies.values() for value in values)
    where = "OCI Queue test server" if args.oci_server else "given connection" if args.connection else "embedded queue"
    print(f"\nidle pick-up, {args.rounds} rounds per idle time ({where}, default settings)")
    for idle, values in latencies.items():
        ordered = sorted(values)
        print(f"  after {idle:>4g} s idle: p50 {statistics.median(ordered):.3f} s   max {ordered[-1]:.3f} s")
    p99 = every[min(len(every) - 1, round(0.99 * (len(every) - 1)))]
    print(f"  all: p50 {statistics.median(every):.3f} s   p99 {p99:.3f} s   max {every[-1]:.3f} s   (target: max < 0.25 s)")
    print(f"idle worker CPU: {100 * idle_cpu / idle_wall:.2f} % of one core over {idle_wall:.0f} s idle (target < 1 %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 10.0, 30.0, 65.0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connection", default=None, help="a connection string (default: the embedded queue)")
    parser.add_argument("--oci", action="store_true", help="OCI Queue, on the test server of tests/oci")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pickup-") as folder:
        args.oci_server = None
        if args.oci:
            from tests.conftest import oci_connection
            from tests.oci.fixture import OciTestServer

            args.oci_server = OciTestServer(Path(folder)).start()
            args.connection = oci_connection(args.oci_server)
        try:
            asyncio.run(bench(args, Path(folder)))
        finally:
            if args.oci_server is not None:
                args.oci_server.stop()


if __name__ == "__main__":
    main()

"""Spark started with the host: the first Spark message on a worker that started Spark before it, and on one that did not.

Two ``worker run`` processes, one after the other, run the same handler
(tests/apps/spark_first.py): declared with ``spark=True`` (the host makes and
warms the session as it starts) and without (the session is made at the first
message, as before). For each, this waits for ``/readyz`` to answer 200, then
sends one message, and reads what the handler noted: how long its first Spark
job took from the handler's start (the figure a message pays for Spark being
cold or warm), and how long from the send to the handler's end.

    python bench/spark_start.py [--master local[2]] [--conf KEY=VALUE ...] [--rounds 1]

``--master`` takes any Spark master: ``local[n]``, a standalone cluster's
``spark://host:port`` (``worker spark start-cluster``), or a Spark Connect
``sc://`` URL (``worker spark start-connect``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import free_port, get, poll  # noqa: E402
from worker.backends.registry import open_backend  # noqa: E402
from worker.bindings.encoding import encode  # noqa: E402

QUEUE = "spark-first"
VARIANTS = {"at_first_message": "Spark made at the first message", "started": "Spark started with the host"}


def ready(port: int) -> bool:
    """Whether the worker's /readyz answers 200 (False while it does not listen yet)."""
    try:
        return get(port, "/readyz", timeout=5)[0] == 200
    except OSError:
        return False


async def put(folder: Path) -> None:
    """One message on the embedded queue the worker of ``folder`` serves (its file beside host.yaml)."""
    queues = open_backend(None, folder)
    try:
        await queues.put(QUEUE, encode("first", "base64"))
    finally:
        await queues.close()


def run_variant(app: str, folder: Path, spark_section: dict[str, object]) -> dict[str, float]:
    """One worker process: seconds from its start to /readyz 200, the handler's first job, the send to its end."""
    folder.mkdir(parents=True)
    port = free_port()
    config = folder / "host.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": "1.0",
                "extensions": {"queues": {"maxPollingInterval": "100ms"}},
                "worker": {"httpPort": port, "httpHost": "127.0.0.1"},
                "spark": spark_section,
            }
        ),
        encoding="utf-8",
    )
    result = folder / "result.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER__", "AzureWebJobs"))}
    env |= {"PYTHONPATH": str(REPO), "RESULT_FILE": str(result)}
    worker = [sys.executable, "-m", "worker"]
    began = time.monotonic()
    with (folder / "worker.log").open("wb") as log:
        process = subprocess.Popen(
            [*worker, "run", "--app", f"tests.apps.spark_first:{app}", "--config", str(config)],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        poll(lambda: ready(port), 300, interval=0.02, what="/readyz to say ready")
        ready_after = time.monotonic() - began
        sent = time.time()
        asyncio.run(put(folder))
        poll(
            lambda: result.exists() and result.read_text().strip(),
            300,
            interval=0.02,
            what="the handler to note its first job",
        )
        noted = json.loads(result.read_text().splitlines()[0])
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    return {"ready": ready_after, "first_job": noted["first_job"], "send_to_done": noted["ended"] - sent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local[2]", help="Spark master: local[n], spark://..., sc://...")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark property (repeatable)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each variant, alternated")
    args = parser.parse_args()
    remote = args.master.startswith("sc://")
    conf: dict[str, str] = (
        {"spark.sql.shuffle.partitions": "2"}
        if remote
        else {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
    )
    conf |= dict(item.split("=", 1) for item in args.conf)
    section = {"master": args.master, "conf": conf}
    figures: dict[str, list[dict[str, float]]] = {app: [] for app in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="bench-spark-start-") as root:
        for n in range(args.rounds):
            for app in VARIANTS:
                figures[app].append(run_variant(app, Path(root) / f"{app}-{n}", section))
    print(f"master {args.master}, {args.rounds} round(s), medians in seconds")
    print(f"{'':34} {'start to /readyz 200':>21} {'handler to first job':>21} {'send to done':>13}")
    for app, label in VARIANTS.items():
        median = {key: statistics.median(run[key] for run in figures[app]) for key in figures[app][0]}
        print(f"{label:34} {median['ready']:21.2f} {median['first_job']:21.2f} {median['send_to_done']:13.2f}")
    cold, warm = (statistics.median(run["first_job"] for run in figures[app]) for app in VARIANTS)
    print(f"first job, made at the first message / started with the host: {cold / warm:.1f}x")


if __name__ == "__main__":
    main()

"""The main job: generate a day of landed order files, run the pipeline on the embedded queue, report.

``make run`` runs it. It writes under .worker/pipeline (landing files and the
warehouse), puts one ``ingest`` message per landed file (plus one naming a
file that does not exist, to show the poison path), runs the worker until
every queue has drained, and prints what happened. ``--master`` runs the
steps on another Spark than host.yaml's ``local[*]``: a standalone cluster's
``spark://`` URL or a Spark Connect ``sc://`` URL (``worker spark
start-cluster`` and ``start-connect`` start either on this machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import urlsplit

from functions import data
from functions.function_app import app, warehouse
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.middleware.spark_settings import from_config
from worker.observability.logs import configure_logging
from worker.observability.metrics import format_summary
from worker.observability.redaction import redact
from worker.runtime.host import Host
from worker.settings.config import HostConfig, load_config

HOME = Path(".worker/pipeline")
QUEUES = ["ingest", "aggregate", "report"]
PROGRESS_EVERY = 3.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def settings(master: str | None) -> HostConfig:
    """host.yaml, with ``master`` as spark.master when given (checked as host.yaml's would be).

    A standalone master on loopback has its executors on this machine: the
    driver then listens on loopback too (``SPARK_LOCAL_IP``), instead of on
    the machine's external address, where its executors would have to reach
    it and so could anyone else.
    """
    environ = dict(os.environ)
    if master is not None:
        environ["WORKER__spark__master"] = master
        if master.startswith("spark://") and urlsplit(master).hostname in LOOPBACK:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return load_config("host.yaml", environ=environ)


def backend(config: HostConfig) -> QueueBackend:
    return open_backend(config.connection_string(None), config.base_dir)  # as the sample app's functions resolve it


async def enqueue(config: HostConfig, files: list[str]) -> None:
    queues = backend(config)
    try:
        for name in QUEUES:
            for queue in (name, f"{name}-poison"):
                await queues.delete_queue(queue)
            await queues.create_queue(name)
        # Absolute paths: a Spark Connect server or a cluster resolves relative ones against its own folder.
        missing = HOME / "landing" / "2026-11-19" / "part-9999.csv"
        for path in [*(str(Path(f).resolve()) for f in files), str(missing.resolve())]:
            await queues.put("ingest", encode(json.dumps({"path": path}), config.message_encoding))
    finally:
        await queues.close()


async def run_with_progress(host: Host, config: HostConfig) -> None:
    """Run the host in burst mode, printing the queues' lengths while it works."""
    queues = backend(config)
    task = asyncio.create_task(host.run())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=PROGRESS_EVERY)
            if not task.done():
                counts = [f"{q} {await queues.approximate_count(q)}" for q in QUEUES]
                print(
                    f"  {host.elapsed:6.1f}s  waiting: {', '.join(counts)};  "
                    f"done {host.metrics.get('succeeded')}, failed {host.metrics.get('failed')}",
                    flush=True,
                )
        await task
    finally:
        await queues.close()


def step_seconds(root: Path) -> dict[str, float]:
    return {
        step: round(sum(json.loads(p.read_text())["seconds"] for p in (root / "_stats" / step).glob("*.json")), 1)
        for step in QUEUES
        if (root / "_stats" / step).is_dir()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=2.0, help="size of the generated data set (1 to 1000)")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument(
        "--master",
        default=None,
        help="spark.master for the pipeline (default: host.yaml's, local[*]): spark://host:port (a "
        "standalone cluster) or sc://host:port (Spark Connect)",
    )
    args = parser.parse_args()

    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    os.environ.setdefault("PIPELINE_WAREHOUSE", str(HOME / "warehouse"))
    log_path = HOME / "worker.log"
    log_file = log_path.open("w", encoding="utf-8")
    configure_logging("INFO", json_lines=True, stream=log_file)
    config = settings(args.master)

    started = time.monotonic()
    manifest = data.generate(HOME / "landing", int(args.size_mb * 1e6), files=args.files)
    print(
        f"generated {len(manifest.files)} files, {manifest.rows} rows, "
        f"{sum(os.path.getsize(f) for f in manifest.files) / 1e6:.1f} MB under {HOME / 'landing'} "
        f"({time.monotonic() - started:.1f}s)"
    )
    asyncio.run(enqueue(config, manifest.files))
    print(f"enqueued {len(manifest.files)} ingest messages, and one for a file that does not exist")
    master = redact(from_config(config).master)  # a Connect master's token stays off the terminal
    print(f"running the worker until the queues drain (Spark on {master} starts on the first message):", flush=True)
    host = Host(app, config, burst=True)
    asyncio.run(run_with_progress(host, config))
    log_file.close()

    root = warehouse()
    summary = json.loads((root / "reports" / "report.json").read_text())
    print()
    print(format_summary(host.metrics, host.elapsed))
    print()
    print((root / "reports" / "report.txt").read_text(), end="")
    print()
    print("time per step (s): " + ", ".join(f"{k} {v}" for k, v in step_seconds(root).items()))
    expected = (manifest.rows, manifest.quarantined, manifest.clean)
    got = (summary["rows_in"], sum(summary["quarantined"].values()), summary["rows_out"])
    print(f"rows in/quarantined/out {got}; the generator put in {expected}: {'match' if got == expected else 'MISMATCH'}")
    print(f"tables under {root}; worker log {log_path}; poisoned messages: .venv/bin/worker poison list ingest")
    if got != expected:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

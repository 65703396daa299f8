"""Pipeline throughput: N small landed files ingested one message per file, versus batched (cardinality many).

Both variants run the same ingest step (functions/pipeline.py) through the
worker host in burst mode on the embedded queue, against the same files. Each
run builds its own SparkSession, as a worker does; timing starts once it is
warm (a first small job done, so JVM, application and executor start-up are in
neither figure, as they are paid once in a worker's life).
Only the trigger differs: ``one`` gives each message its own invocation and
Spark job; ``many`` hands every received batch (up to batchSize) to one
invocation and one Spark job. The rows written are checked to be equal.

    python bench/pipeline.py [--files 32] [--rows 200] [--master local[2]] [--conf KEY=VALUE ...]

``--master`` takes any Spark master: ``local[n]``, a standalone cluster's
``spark://host:port`` (give ``--conf spark.driver.host=...`` where executors
must reach the driver at a given address), or a Spark Connect ``sc://`` URL.
Prints files per second for each and the ratio many/one.

``--ingest-before REV`` measures the ingest step itself instead, before and
after a change: functions/pipeline.py as it is at the git revision ``REV``
(before) and as it is in the working tree (after), each in a Python process of
its own on the same generated files (``--sizes`` in MB, 8 files over 4 days),
one after the other, sizes and variants alternated. In each process the
session is made first (its seconds are printed apart), then the files are
ingested three times, each into a new warehouse: the first ingest is the cold
one (the session's first real jobs), the median of the other two the warm one.

    python bench/pipeline.py --ingest-before main [--sizes 2,200] [--master local[2]] [--conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from functions import data, pipeline  # noqa: E402
from worker import QueueMessage, WorkerApp, spark  # noqa: E402
from worker.backends.registry import open_backend  # noqa: E402
from worker.bindings.encoding import encode  # noqa: E402
from worker.middleware.spark import Spark, SparkProvider, SparkSettings  # noqa: E402
from worker.observability.logs import configure_logging  # noqa: E402
from worker.runtime.host import Host  # noqa: E402
from worker.settings.config import HostConfig  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}


class WarmSession:
    """The host's SparkSession, warmed once per run, and the moment it was ready.

    Both variants' hosts are handed one session, started before either
    (on a cluster its executors take seconds to start); a worker pays that
    once in its life, so neither variant's figure includes it, and each
    variant's first job warms what is left.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ready_at: float | None = None

    def __call__(self) -> SparkSession:
        session = spark.session()
        with self._lock:
            if self.ready_at is None:
                session.range(0, 1000, numPartitions=4).selectExpr("sum(id)").collect()
                self.ready_at = time.perf_counter()
        return session


def ingest_app(cardinality: str, warehouse: Path, session: WarmSession) -> WorkerApp:
    app = WorkerApp()

    def paths(msgs: list[QueueMessage]) -> list[str]:
        return [json.loads(m.get_body())["path"] for m in msgs]

    if cardinality == "many":

        @app.queue_trigger(arg_name="msgs", queue_name="ingest", cardinality="many")
        def ingest_many(msgs: list[QueueMessage]) -> None:
            pipeline.ingest(session(), warehouse, paths(msgs))
    else:

        @app.queue_trigger(arg_name="msg", queue_name="ingest")
        def ingest_one(msg: QueueMessage) -> None:
            pipeline.ingest(session(), warehouse, paths([msg]))

    return app


async def run_variant(cardinality: str, files: list[str], folder: Path, provider: SparkProvider) -> tuple[float, int]:
    """Seconds to ingest every file once the session is warm (``provider``'s, which says where Spark runs), and rows
    written."""
    folder.mkdir(parents=True)
    warehouse = folder / "warehouse"
    config = HostConfig(base_dir=folder, max_polling_interval=0.1, batch_size=32, new_batch_threshold=16, handler_threads=2)
    queues = open_backend(None, folder)
    await queues.create_queue("ingest")
    for path in files:
        await queues.put("ingest", encode(json.dumps({"path": path}), "base64"))
    await queues.close()
    session = WarmSession()
    host = Host(ingest_app(cardinality, warehouse, session), config, burst=True, middleware=[Spark(provider)])
    await host.run()
    finished = time.perf_counter()
    assert session.ready_at is not None
    assert host.metrics.get("succeeded") == len(files), host.metrics.by_function()
    rows = sum(json.loads(p.read_text())["rows_out"] for p in (warehouse / "_stats" / "ingest").glob("*.json"))
    return finished - session.ready_at, rows


def ingest_timings(code: Path, landing: Path, master: str, conf: dict[str, str]) -> dict[str, float]:
    """In this process: make the session, then ingest every file under ``landing`` three times with the ingest of
    ``code`` (a copy of functions/pipeline.py), each into a new warehouse; seconds of each, and the rows out."""
    spec = importlib.util.spec_from_file_location("pipeline_under_test", code)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up as they are made
    spec.loader.exec_module(module)
    files = sorted(str(path.resolve()) for path in landing.rglob("*") if path.is_file())
    began = time.perf_counter()
    provider = SparkProvider(SparkSettings(master, "bench", dict(conf), log_file=landing.parent / "spark.log"))
    session = provider.session()
    timings = {"session": time.perf_counter() - began}
    try:
        for n in range(3):
            warehouse = landing.parent / f"warehouse-{code.stem}-{n}"
            began = time.perf_counter()
            stats = module.ingest(session, warehouse, files)
            timings[f"ingest{n}"] = time.perf_counter() - began
            timings["rows_out"] = sum(stat.rows_out for stat in stats)
            shutil.rmtree(warehouse, ignore_errors=True)
    finally:
        provider.stop()
    return timings


def compare_ingest(args: argparse.Namespace, conf: dict[str, str]) -> None:
    """Before and after, each size, each in a process of its own; print cold and warm ingest side by side."""
    root = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    try:
        before = root / "before.py"
        before.write_text(
            subprocess.run(
                ["git", "show", f"{args.ingest_before}:functions/pipeline.py"],
                cwd=REPO,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        variants = {"before": before, "after": REPO / "functions" / "pipeline.py"}
        results: dict[tuple[float, str], dict[str, float]] = {}
        for size in [float(mb) for mb in args.sizes.split(",")]:
            landing = root / f"{size:g}mb" / "landing"
            manifest = data.generate(landing, int(size * 1e6), files=8, days=4)
            for name, code in variants.items():
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--ingest-worker",
                        str(code),
                        str(landing),
                        "--master",
                        args.master,
                        *[f"--conf={key}={value}" for key, value in conf.items()],
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=REPO,
                ).stdout
                results[(size, name)] = json.loads(out.strip().splitlines()[-1])
                assert results[(size, name)]["rows_out"] == manifest.clean, (name, results[(size, name)])
        print(f"ingest, master {args.master}: {args.ingest_before} (before) and the working tree (after); seconds")
        print(f"{'size':>8} {'variant':>8} {'session':>8} {'cold':>8} {'warm':>8}")
        for (size, name), timing in results.items():
            warm = statistics.median([timing["ingest1"], timing["ingest2"]])
            print(f"{size:6g}MB {name:>8} {timing['session']:8.2f} {timing['ingest0']:8.2f} {warm:8.2f}")
        for size in sorted({size for size, _ in results}):
            b, a = results[(size, "before")], results[(size, "after")]
            warm_b = statistics.median([b["ingest1"], b["ingest2"]])
            warm_a = statistics.median([a["ingest1"], a["ingest2"]])
            print(f"{size:6g}MB before/after: cold {b['ingest0'] / a['ingest0']:.2f}x, warm {warm_b / warm_a:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--rows", type=int, default=200, help="rows per file")
    parser.add_argument("--master", default="local[2]", help="Spark master: local[n], spark://..., sc://...")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark property (repeatable)")
    parser.add_argument("--ingest-before", metavar="REV", help="compare the ingest step at REV with the working tree's")
    parser.add_argument("--sizes", default="2,200", help="with --ingest-before: data set sizes in MB")
    parser.add_argument("--ingest-worker", nargs=2, metavar=("CODE", "LANDING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    remote = args.master.startswith("sc://")
    conf = {} if remote else dict(SPARK_CONF)
    conf |= dict(item.split("=", 1) for item in args.conf)
    configure_logging("WARNING")
    if args.ingest_worker:
        code, landing = args.ingest_worker
        print(json.dumps(ingest_timings(Path(code), Path(landing), args.master, conf)))
        return
    if args.ingest_before:
        compare_ingest(args, conf)
        return
    root = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    provider: SparkProvider | None = None
    try:
        manifest = data.generate(root / "landing", args.rows * data.BYTES_PER_ROW * args.files, files=args.files)
        files = [str(Path(f).resolve()) for f in manifest.files]  # absolute: a cluster or Connect server reads them
        provider = SparkProvider(SparkSettings(args.master, "bench", dict(conf), log_file=root / "spark.log"))
        provider.session().range(10).count()  # the JVM (or the Connect channel) starts here, outside both timings
        results = {}
        for cardinality in ("one", "many"):
            results[cardinality] = asyncio.run(run_variant(cardinality, files, root / cardinality, provider))
        (one_s, one_rows), (many_s, many_rows) = results["one"], results["many"]
        assert one_rows == many_rows == manifest.clean, (one_rows, many_rows, manifest.clean)
        print(f"master {args.master}: {args.files} files, {manifest.rows} rows, {manifest.clean} rows out in each variant")
        print(f"one message per invocation : {one_s:7.1f} s  {args.files / one_s:6.2f} files/s")
        print(f"cardinality many           : {many_s:7.1f} s  {args.files / many_s:6.2f} files/s")
        print(f"ratio many/one             : {one_s / many_s:6.2f}x")
    finally:
        if provider is not None:
            provider.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

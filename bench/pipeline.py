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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


async def run_variant(
    cardinality: str, files: list[str], folder: Path, master: str, conf: dict[str, str], provider: SparkProvider
) -> tuple[float, int]:
    """Seconds to ingest every file once the session is warm, and rows written."""
    folder.mkdir(parents=True)
    warehouse = folder / "warehouse"
    config = HostConfig(
        base_dir=folder, max_polling_interval=0.1, batch_size=32, new_batch_threshold=16, handler_threads=2,
        spark_master=master, spark_conf=conf,
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--rows", type=int, default=200, help="rows per file")
    parser.add_argument("--master", default="local[2]", help="Spark master: local[n], spark://..., sc://...")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark property (repeatable)")
    args = parser.parse_args()
    remote = args.master.startswith("sc://")
    conf = {} if remote else dict(SPARK_CONF)
    conf |= dict(item.split("=", 1) for item in args.conf)
    configure_logging("WARNING")
    root = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    provider: SparkProvider | None = None
    try:
        manifest = data.generate(root / "landing", args.rows * data.BYTES_PER_ROW * args.files, files=args.files)
        files = [str(Path(f).resolve()) for f in manifest.files]  # absolute: a cluster or Connect server reads them
        provider = SparkProvider(SparkSettings(args.master, "bench", dict(conf), log_file=root / "spark.log"))
        provider.session().range(10).count()  # the JVM (or the Connect channel) starts here, outside both timings
        results = {}
        for cardinality in ("one", "many"):
            results[cardinality] = asyncio.run(
                run_variant(cardinality, files, root / cardinality, args.master, conf, provider))
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

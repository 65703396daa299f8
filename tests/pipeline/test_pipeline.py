"""The sample data pipeline on the embedded queue, with real Spark: local, a standalone cluster and Spark Connect."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from functions import data, pipeline, tables
from functions.function_app import app
from tests.host.processes import REPO
from tests.spark.sessions import SparkSessions, master_and_conf, process_env
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend
from worker.bindings.encoding import decode, encode
from worker.middleware.spark import SparkProvider
from worker.middleware.spark_settings import from_config
from worker.runtime.host import Host
from worker.settings.config import load_config

SPARK = "spark:\n  master: local[2]\n  conf:\n    spark.sql.shuffle.partitions: 2\n    spark.ui.enabled: false\n"
SETTINGS = "extensions:\n  queues:\n    maxPollingInterval: 200ms\n    maxDequeueCount: 2\nworker:\n  drainTimeout: 5s\n"


@pytest.fixture
def host_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text(SETTINGS + SPARK, encoding="utf-8")
    return path


@pytest.fixture
async def queues(tmp_path: Path) -> AsyncIterator[QueueBackend]:
    backend = open_backend(None, tmp_path)
    await backend.create_queue("ingest")
    yield backend
    await backend.close()


async def send_paths(queues: QueueBackend, *paths: str) -> None:
    for path in paths:
        await queues.put("ingest", encode(json.dumps({"path": path}), "base64"))


@pytest.mark.parametrize("where", ["local", "cluster", "connect"])
async def test_end_to_end_counts_match_the_generated_data_and_unreadable_input_is_poisoned(
    tmp_path: Path,
    host_yaml: Path,
    queues: QueueBackend,
    where: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On local Spark as ``make run`` runs it: a ``worker run --burst`` process that starts its own session from
    host.yaml. On the cluster and the Connect server: a host in this process on the Spark tests' session there.
    A worker process building its own driver on those two masters from host.yaml is shown by
    tests/spark/test_interpreter.py; one more JVM per master here would add a minute each and show nothing more."""
    manifest = data.generate(tmp_path / "landing", size_bytes=60_000, files=3, days=2)
    missing = str(tmp_path / "landing" / "2026-11-16" / "part-0404.csv")
    await send_paths(queues, *manifest.files, missing)
    warehouse = tmp_path / "warehouse"
    if where == "local":
        await run_worker_process(host_yaml, warehouse)
    else:
        monkeypatch.setenv("PIPELINE_WAREHOUSE", str(warehouse))
        monkeypatch.delenv("AzureWebJobsStorage", raising=False)
        spark = request.getfixturevalue("spark_sessions").middleware(*master_and_conf(where, request))
        host = Host(app, load_config(host_yaml, environ={}), burst=True, middleware=[spark])
        await asyncio.wait_for(host.run(), 300)
        assert host.metrics.get("poisoned") == 1

    report = json.loads((warehouse / "reports" / "report.json").read_text())
    assert report["files"] == 3
    assert report["rows_in"] == manifest.rows
    assert sum(report["quarantined"].values()) == manifest.quarantined
    assert report["quarantined"]["malformed row"] == manifest.faults["malformed"]
    assert report["duplicates"] == manifest.faults["duplicate"]
    assert report["rows_out"] == manifest.clean
    assert report["late"] == manifest.faults["late"]
    assert sum(day["units"] for day in report["days"]) > 0
    assert (warehouse / "reports" / "report.txt").read_text().startswith("files ingested   3")

    [poisoned] = await queues.peek("ingest-poison", 32)
    assert json.loads(decode(poisoned.content, "base64")) == {"path": missing}


async def run_worker_process(host_yaml: Path, warehouse: Path) -> None:
    """``worker run --burst`` on the sample app; its log must tell why the missing file was poisoned."""
    env = process_env(PYTHONPATH=str(REPO), PIPELINE_WAREHOUSE=str(warehouse))
    run = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "worker",
            "run",
            "--app",
            "functions.function_app:app",
            "--config",
            str(host_yaml),
            "--burst",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    moved = [line for line in lines if line["event"] == "message moved to the poison queue"]
    assert len(moved) == 1 and "does not exist" in moved[0]["reason"]


async def test_the_same_ingest_message_twice_gives_identical_tables(
    tmp_path: Path,
    host_yaml: Path,
    queues: QueueBackend,
    monkeypatch: pytest.MonkeyPatch,
    spark_sessions: SparkSessions,
    request: pytest.FixtureRequest,
) -> None:
    manifest = data.generate(tmp_path / "landing", size_bytes=20_000, files=1, days=1)
    warehouse = tmp_path / "warehouse"
    monkeypatch.setenv("PIPELINE_WAREHOUSE", str(warehouse))
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    config = load_config(host_yaml, environ={})
    # host.yaml's Spark: the test process's session, handed to both host runs, which then share it.
    spark_settings = from_config(config)
    assert (spark_settings.master, spark_settings.conf) == master_and_conf("local", request)
    spark = spark_sessions.middleware(*master_and_conf("local", request))

    snapshots = []
    for _ in range(2):
        await send_paths(queues, manifest.files[0])
        host = Host(app, config, burst=True, middleware=[spark])
        await asyncio.wait_for(host.run(), 300)
        assert host.metrics.get("failed") == 0
        snapshots.append(await asyncio.to_thread(snapshot, warehouse, spark.provider))
    first, second = snapshots
    assert first["events"] and first["quarantine"]
    assert first == second


@pytest.mark.parametrize("where", ["local", "cluster"])
async def test_steps_before_their_input_have_nothing_to_do_and_a_first_file_with_no_valid_row_wedges_nothing(
    tmp_path: Path,
    host_yaml: Path,
    queues: QueueBackend,
    monkeypatch: pytest.MonkeyPatch,
    spark_sessions: SparkSessions,
    request: pytest.FixtureRequest,
    where: str,
) -> None:
    """An aggregate and a report sent before any table exists succeed at once, doing nothing (not five immediate
    failures and poison). Then a file with no valid row is ingested on its own before a good one: the empty ``events``
    it publishes must not stop the good file's rows reaching the report. On local Spark and on the standalone
    cluster, where executors of their own write the empty version's folder and the driver its schema."""
    warehouse = tmp_path / "warehouse"
    monkeypatch.setenv("PIPELINE_WAREHOUSE", str(warehouse))
    monkeypatch.delenv("AzureWebJobsStorage", raising=False)
    host_yaml.write_text(
        host_yaml.read_text(encoding="utf-8")
        + "functions:\n"
        + "".join(
            f"  {step}:\n    maxConcurrency: 1\n" + ("    batchSize: 1\n" if step == "ingest" else "")
            for step in ("ingest", "aggregate", "report")
        ),
        encoding="utf-8",
    )  # one file per ingest, in order
    config = load_config(host_yaml, environ={})
    spark = spark_sessions.middleware(*master_and_conf(where, request))
    for step in ("aggregate", "report"):
        await queues.create_queue(step)
        await queues.put(step, encode(json.dumps({"days": ["2026-11-16"]}), "base64"))

    early = Host(app, config, burst=True, middleware=[spark])
    await asyncio.wait_for(early.run(), 300)
    assert (early.metrics.get("succeeded"), early.metrics.get("failed"), early.metrics.get("poisoned")) == (2, 0, 0)
    assert tables.current(warehouse / "daily_sales") is None
    assert not (warehouse / "reports").exists()

    no_valid_row = tmp_path / "landing" / "2026-11-16" / "part-0900.csv"
    manifest = data.generate(tmp_path / "landing", size_bytes=20_000, files=1, days=1, seed=7)
    no_valid_row.write_text(
        ",".join(data.COLUMNS) + "\n###,truncated\ne-1,o-1,c-1,SKU-001,three,9.99,DE,2026-11-16T10:00:00\n", encoding="utf-8"
    )
    await send_paths(queues, str(no_valid_row), *manifest.files)
    host = Host(app, config, burst=True, middleware=[spark])
    await asyncio.wait_for(host.run(), 300)

    assert (host.metrics.get("failed"), host.metrics.get("poisoned")) == (0, 0)
    report = json.loads((warehouse / "reports" / "report.json").read_text())
    assert (report["files"], report["rows_out"]) == (2, manifest.clean)
    assert sum(report["quarantined"].values()) == manifest.quarantined + 2
    assert sum(day["units"] for day in report["days"]) > 0


def snapshot(warehouse: Path, provider: SparkProvider) -> dict[str, Any]:
    """Every table's rows, sorted, and its current version's partition folders: what a reader of the tables sees."""
    session = provider.session()
    seen: dict[str, Any] = {}
    for table in ("events", "quarantine", "daily_sales"):
        rows = tables.read(session, warehouse / table).collect()
        seen[table] = sorted(json.dumps(r.asDict(), default=str, sort_keys=True) for r in rows)
        version = tables.current(warehouse / table)
        assert version is not None
        seen[f"{table} partitions"] = sorted(str(p.relative_to(version)) for p in version.rglob("*=*") if p.is_dir())
    return seen


def test_files_of_one_day_ingested_apart_both_stay_and_a_repeat_changes_nothing(
    tmp_path: Path, spark_sessions: SparkSessions, request: pytest.FixtureRequest
) -> None:
    """``events`` is partitioned by day alone: a second file of a day joins the first file's rows in the day's
    folder (one Parquet file each) rather than replacing them, and ingesting the first file again leaves the table as
    it was, its own earlier rows replaced. Also: ingest publishes ``events`` before ``quarantine``, so a reader never
    sees a file's rejected rows without its good ones."""
    manifest = data.generate(tmp_path / "landing", size_bytes=40_000, files=2, days=1)
    session = spark_sessions.provider(*master_and_conf("local", request)).session()
    warehouse = tmp_path / "warehouse"
    first, second = (str(Path(file).resolve()) for file in manifest.files)
    published = PublishedTables(warehouse)

    pipeline.ingest(session, warehouse, [first], tables.Writer(published))
    assert published.seen == [[], ["events"]], "each pointer about to move saw the tables published before it"
    pipeline.ingest(session, warehouse, [second])
    both = _events(session, warehouse)
    pipeline.ingest(session, warehouse, [first])

    assert _events(session, warehouse) == both
    assert len(both) == manifest.clean
    assert {json.loads(row)["batch_id"] for row in both} == {pipeline.batch_id(first), pipeline.batch_id(second)}
    version = tables.current(warehouse / "events")
    assert version is not None
    folders = [folder for folder in version.iterdir() if folder.is_dir()]
    assert sorted(folder.name for folder in folders) == sorted(
        {f"event_date={json.loads(row)['event_date']}" for row in both}
    )  # the landing day, and late events' days
    assert [len(list(folder.glob("*.parquet"))) for folder in folders] == [1] * len(folders)


def test_an_events_table_partitioned_by_day_and_file_is_rewritten_by_day_at_the_next_ingest(
    tmp_path: Path, spark_sessions: SparkSessions, request: pytest.FixtureRequest
) -> None:
    """A warehouse from before the layout by day: the next ingest carries every earlier row into day folders."""
    manifest = data.generate(tmp_path / "landing", size_bytes=40_000, files=2, days=2)
    session = spark_sessions.provider(*master_and_conf("local", request)).session()
    first, second = (str(Path(file).resolve()) for file in manifest.files)
    by_day, upgraded = tmp_path / "by-day", tmp_path / "upgraded"
    pipeline.ingest(session, by_day, [first])
    earlier = tables.read(session, by_day / "events")
    tables.publish(upgraded / "events", lambda: earlier, ["event_date", "batch_id"])  # as ingest wrote it before

    pipeline.ingest(session, by_day, [second])
    pipeline.ingest(session, upgraded, [second])

    assert _events(session, upgraded) == _events(session, by_day)
    assert len(_events(session, upgraded)) == manifest.clean
    version = tables.current(upgraded / "events")
    assert version is not None
    assert not list(version.glob("event_date=*/batch_id=*"))


class PublishedTables:
    """A fence that notes, each time a publish is about to move its table's pointer, which tables have one already."""

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = warehouse
        self.seen: list[list[str]] = []

    def check(self) -> None:
        self.seen.append([name for name in ("events", "quarantine") if tables.current(self.warehouse / name)])


def _events(session: Any, warehouse: Path) -> list[str]:
    return sorted(
        json.dumps(row.asDict(), default=str, sort_keys=True) for row in tables.read(session, warehouse / "events").collect()
    )

"""The pipeline's versioned tables (functions/tables.py) on local Spark (an empty write on the standalone cluster too):
a reader sees one whole version at a time."""

from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from functions import tables
from tests.host.processes import REPO
from tests.spark.sessions import SparkSessions, master_and_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Each aggregate below rewrites every one of these days, so each version of its table is one write's rows only.
DAYS = range(6)
ROUNDS = 4


@pytest.fixture
def spark(spark_sessions: SparkSessions, request: pytest.FixtureRequest) -> SparkSession:
    return spark_sessions.provider(*master_and_conf("local", request)).session()


def daily(spark: SparkSession, version: str, rows: int, days: range = DAYS) -> DataFrame:
    """``rows`` rows spread over ``days``, each naming its version and how many rows the version has."""
    return spark.range(rows).selectExpr(
        f"'{version}' AS version", f"{rows} AS rows", f"{days.start} + id % {len(days)} AS day"
    )


def versions_in(frame: DataFrame) -> list[tuple[str, int, int]]:
    """(version, the rows it says it has, the rows read of it) for every version a read found, in one Spark job."""
    return sorted((r["version"], r["rows"], r["count"]) for r in frame.groupBy("version", "rows").count().collect())


def test_a_report_reading_while_two_aggregates_rewrite_only_ever_sees_one_complete_version(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Two aggregates publish a new version of the table in turn while a report reads it over and over.

    Every version has a different row count, so a read that mixes two versions, misses a partition, or
    reads one twice gives more than one version or a count that differs from the one its rows state; a
    read whose files a writer deleted under it fails, and counts as torn too.
    """
    table = tmp_path / "daily_sales"
    tables.publish(table, partial(daily, spark, "initial", len(DAYS)), ["day"])
    writing_done = threading.Event()

    def aggregate(name: str) -> None:
        for n in range(ROUNDS):
            tables.publish(table, partial(daily, spark, f"{name}-{n}", len(DAYS) * (n + 2)), ["day"])

    def report() -> list[list[tuple[str, int, int]] | str]:
        reads: list[list[tuple[str, int, int]] | str] = []
        while not writing_done.is_set():
            try:
                reads.append(versions_in(tables.read(spark, table)))
            except Exception as exc:  # a read that meets files deleted under it is torn too
                reads.append(" ".join(str(exc).split())[:300])
        return reads

    with ThreadPoolExecutor(3) as pool:
        reader = pool.submit(report)
        writers = [pool.submit(aggregate, name) for name in ("aggregate-1", "aggregate-2")]
        try:
            for writer in writers:
                writer.result(timeout=90)
        finally:
            writing_done.set()
        reads = reader.result(timeout=30)

    torn = [read for read in reads if isinstance(read, str) or len(read) != 1 or read[0][1] != read[0][2]]
    assert not torn, f"{len(torn)} of {len(reads)} reads saw a table that was not one whole version: {torn[:3]}"
    seen = {read[0][0] for read in reads if not isinstance(read, str)} - {"initial"}
    assert len(seen) >= 2, f"the report read only {seen} while the aggregates wrote: it did not read beside them"
    last_published = versions_in(tables.read(spark, table))
    assert len(last_published) == 1 and last_published[0][0].endswith(f"-{ROUNDS - 1}")


def test_a_write_replaces_the_days_it_writes_and_keeps_the_others(tmp_path: Path, spark: SparkSession) -> None:
    table = tmp_path / "daily_sales"
    tables.publish(table, partial(daily, spark, "first", 6, range(3)), ["day"])
    tables.publish(table, partial(daily, spark, "second", 4, range(2, 4)), ["day"])

    rows = tables.read(spark, table).groupBy("day", "version").count().collect()
    assert sorted((r["day"], r["version"], r["count"]) for r in rows) == [
        (0, "first", 2),
        (1, "first", 2),
        (2, "second", 2),
        (3, "second", 2),
    ]


def test_two_writes_of_different_days_at_once_both_stay_in_the_table(tmp_path: Path, spark: SparkSession) -> None:
    """As two ingests of different files: each keeps the other's partitions, whichever publishes last."""
    table = tmp_path / "events"
    tables.publish(table, partial(daily, spark, "initial", 6), ["day"])
    both_started = threading.Barrier(2, timeout=30)

    def ingest(version: str, days: range) -> None:
        both_started.wait()
        tables.publish(table, partial(daily, spark, version, 2 * len(days), days), ["day"])

    with ThreadPoolExecutor(2) as pool:
        for write in [pool.submit(ingest, "first-half", range(3)), pool.submit(ingest, "second-half", range(3, 6))]:
            write.result(timeout=90)

    rows = tables.read(spark, table).groupBy("day", "version").count().collect()
    assert sorted((r["day"], r["version"]) for r in rows) == [
        *((day, "first-half") for day in range(3)),
        *((day, "second-half") for day in range(3, 6)),
    ]


def test_a_reader_keeps_its_version_and_a_retired_version_goes_only_after_the_grace(
    tmp_path: Path, spark: SparkSession
) -> None:
    table = tmp_path / "daily_sales"
    first = tables.publish(table, partial(daily, spark, "first", 6), ["day"])
    resolved = tables.read(spark, table)
    second = tables.publish(table, partial(daily, spark, "second", 12), ["day"])

    assert versions_in(resolved) == [("first", 6, 6)], "a reader that resolved the pointer reads what it resolved"
    assert versions_in(tables.read(spark, table)) == [("second", 12, 12)]
    third = tables.publish(table, partial(daily, spark, "third", 18), ["day"])
    assert first.is_dir() and second.is_dir(), "retired less than the grace ago: a reader may still be reading them"

    retired_long_ago = time.time() - tables.RETIRED_GRACE.total_seconds() - 1
    os.utime(first / tables.RETIRED, (retired_long_ago, retired_long_ago))
    fourth = tables.publish(table, partial(daily, spark, "fourth", 24), ["day"])
    assert sorted(table.glob("v-*")) == [second, third, fourth]
    assert tables.current(table) == fourth


def test_a_write_that_fails_leaves_the_table_as_it_was(tmp_path: Path, spark: SparkSession) -> None:
    table = tmp_path / "daily_sales"
    first = tables.publish(table, partial(daily, spark, "first", 6), ["day"])

    def failing() -> DataFrame:  # the job fails in its last task, after the others have written their files
        return daily(spark, "second", 12).selectExpr(
            "IF(day < 5, version, raise_error('no such SKU')) AS version", "rows", "day"
        )

    with pytest.raises(Exception, match="no such SKU"):
        tables.publish(table, failing, ["day"])
    assert tables.current(table) == first
    assert list(table.glob("v-*")) == [first]
    assert versions_in(tables.read(spark, table)) == [("first", 6, 6)]


@pytest.mark.parametrize("where", ["local", "cluster"])
def test_an_empty_write_publishes_an_empty_table_with_its_schema_and_an_empty_version_without_one_is_replaced(
    tmp_path: Path, spark_sessions: SparkSessions, request: pytest.FixtureRequest, where: str
) -> None:
    """The first ingest of a file with no valid row must not wedge the table: Spark cannot infer the schema of a
    version without data files, so the version says its own; one published before versions did reads as none. On
    the standalone cluster too, whose executors write the version's folder while the driver writes its schema."""
    spark = spark_sessions.provider(*master_and_conf(where, request)).session()
    table = tmp_path / "events"
    tables.publish(table, partial(daily, spark, "none", 0), ["day"])
    empty = tables.read(spark, table)
    assert (empty.count(), sorted(empty.columns)) == (0, ["day", "rows", "version"])

    tables.publish(table, partial(daily, spark, "first", 6), ["day"])
    assert versions_in(tables.read(spark, table)) == [("first", 6, 6)]

    wedged = tmp_path / "quarantine"  # as such an ingest left it before: a version of no files but _SUCCESS
    daily(spark, "none", 0).write.partitionBy("day").parquet(str(wedged / "v-old"))
    (wedged / tables.POINTER).write_text("v-old\n", encoding="utf-8")
    with pytest.raises(tables.NoVersion, match="holds no rows and no schema"):
        tables.read(spark, wedged)
    tables.publish(wedged, partial(daily, spark, "repaired", 6), ["day"])
    assert versions_in(tables.read(spark, wedged)) == [("repaired", 6, 6)]


def test_a_writer_that_turns_stale_while_it_writes_discards_its_version(tmp_path: Path, spark: SparkSession) -> None:
    """The fence is asked after the files are written, just before the pointer moves."""
    table = tmp_path / "daily_sales"
    first = tables.publish(table, partial(daily, spark, "first", 6), ["day"])
    stale = threading.Event()

    class LostDuringTheWrite:
        def check(self) -> None:
            if stale.is_set():
                raise tables.StaleWriter("lease lost")

    def build() -> DataFrame:
        stale.set()  # as a lease lost while the writer computes: it held when the writer took the lock
        return daily(spark, "stale", 12)

    with pytest.raises(tables.StaleWriter):
        tables.publish(table, build, ["day"], tables.Writer(LostDuringTheWrite()))
    assert tables.current(table) == first
    assert list(table.glob("v-*")) == [first]
    assert versions_in(tables.read(spark, table)) == [("first", 6, 6)]


def test_the_docs_recipes_for_readers_outside_the_worker_read_the_current_version(
    tmp_path: Path, spark: SparkSession
) -> None:
    """The documentation's code (docs/spark.md: with ``functions.tables``, then with plain PySpark), run as written but
    for the table."""
    readme = (REPO / "docs" / "spark.md").read_text(encoding="utf-8")
    section = readme.split("### Reading a table from outside the worker", 1)[1]
    recipes = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    assert len(recipes) == 2, "the section's two recipes"
    table = tmp_path / "events"
    tables.publish(table, partial(daily, spark, "first", 6), ["day"])
    tables.publish(table, partial(daily, spark, "second", 12), ["day"])

    for code in recipes:
        scope = {"spark": spark}
        exec(code.replace('".worker/pipeline/warehouse/events"', repr(str(table))), scope)  # noqa: S102
        assert versions_in(scope["events"]) == [("second", 12, 12)], code

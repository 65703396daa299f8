"""The pipeline's Spark steps, as plain functions of a SparkSession, so that handlers stay thin.

``ingest`` reads landed files with an explicit schema, quarantines rows that
fail validation with their reason, drops duplicate event ids and writes
partitioned Parquet. Every write replaces exactly the partitions of the batch
it comes from, so processing the same message twice leaves the same tables.
``aggregate`` recomputes the daily sales of the days a batch touched, and
``report`` writes what a reader of the data wants to know, as JSON and as text.

Tables live under one warehouse folder: ``events``, ``quarantine`` and
``daily_sales``, each written and read through :mod:`functions.tables` (a new
version per write, published at once), and the files ``reports`` and
``_stats`` (one JSON file per batch and step), each replaced whole.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

from functions import tables
from functions.data import COLUMNS

REQUIRED = ["event_id", "order_id", "sku", "quantity", "unit_price", "event_time"]
#: Typed columns: the expression that casts each (a failed cast gives null, not an error) and what it expects.
TYPED = {
    "quantity": ("try_cast(quantity AS INT)", "a whole number"),
    "unit_price": ("try_cast(unit_price AS DECIMAL(12, 2))", "a number"),
    "event_time": ("try_to_timestamp(event_time)", "a timestamp"),
}
#: An event more than this many days before the day it landed under is late.
LATE_AFTER_DAYS = 1


class UnreadableInput(Exception):
    """A landed file that is missing or cannot be read at all."""


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_FORMATS = (".csv", ".jsonl", ".json")


def unreadable(path: str) -> str | None:
    """Why the landed file ``path`` cannot be ingested, or None.

    Messages carry absolute paths or URIs, so that any Spark driver, cluster
    or Spark Connect server reads the same file: a relative path would be
    resolved against whichever process reads it. Local files (an absolute
    path or ``file://``) are checked here; other URIs (``abfss://``,
    ``s3a://``, ``hdfs://`` ...) are passed to Spark untouched, which says
    whether they exist.
    """
    if not path.lower().endswith(_FORMATS):
        return f"landed file {path} is neither CSV nor JSON lines"
    local = local_path(path)
    if local is None:
        if _URI.match(path):
            return None
        return (
            f"landed file path {path} is relative; give an absolute path or a URI (file:///, abfss://, s3a://), "
            "since a Spark driver or Connect server resolves a relative path against its own folder"
        )
    if not local.is_file():
        return f"landed file {path} does not exist"
    try:
        with local.open("rb"):
            pass
    except OSError as exc:
        return f"landed file {path} is not readable: {exc.strerror or exc}"
    return None


def local_path(path: str) -> Path | None:
    """The local file ``path`` names (an absolute path or a ``file://`` URI), or None for other URIs and relative paths."""
    if path.lower().startswith("file://"):
        from urllib.parse import unquote, urlsplit

        return Path(unquote(urlsplit(path).path))
    if _URI.match(path) or not Path(path).is_absolute():
        return None
    return Path(path)


@dataclass
class IngestStats:
    batch_id: str
    source: str
    rows_in: int
    quarantined: dict[str, int]
    duplicates: int
    rows_out: int
    late: int
    days: list[str] = field(default_factory=list)
    seconds: float = 0.0


def batch_id(path: str) -> str:
    """A partition-safe id of a landed file: its day folder and name (``2026-11-16-part-0003``)."""
    file = Path(path)
    return re.sub(r"[^A-Za-z0-9-]", "-", f"{file.parent.name}-{file.stem}")


def _read(spark: SparkSession, paths: list[str]) -> list[DataFrame]:
    """The files, one frame per format: all columns as text, ``_corrupt_record``, and ``_file`` (the file's URI).

    Validation and casts come after, so each reject has a reason.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    for path in paths:
        if problem := unreadable(path):
            raise UnreadableInput(problem)
    schema = T.StructType([T.StructField(c, T.StringType()) for c in [*COLUMNS, "_corrupt_record"]])

    def reader() -> Any:
        return spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", "_corrupt_record")

    csv = [path for path in paths if path.lower().endswith(".csv")]
    json_lines = [path for path in paths if not path.lower().endswith(".csv")]
    frames = []
    if csv:
        frames.append(reader().option("header", True).csv(csv))
    if json_lines:
        frames.append(reader().json(json_lines))
    return [frame.select("*", F.col("_metadata.file_path").alias("_file")) for frame in frames]


def _validated(raw: DataFrame, sources: Column) -> DataFrame:
    """Each row with a ``reason`` (null when valid), typed columns, the ``late`` flag, its ``batch_id`` and ``source``.

    The batch id is computed from the file's URI exactly as :func:`batch_id`
    computes it from the path, and ``sources`` maps it back to the path the
    message named.
    """
    from pyspark.sql import functions as F

    typed = raw.select("*", *[F.expr(expr).alias(f"{column}_typed") for column, (expr, _) in TYPED.items()])
    reason = F.when(F.col("_corrupt_record").isNotNull(), F.lit("malformed row"))
    for column in REQUIRED:
        reason = reason.when(F.col(column).isNull() | (F.trim(F.col(column)) == ""), F.lit(f"missing {column}"))
    for column, (_, expected) in TYPED.items():
        reason = reason.when(F.col(f"{column}_typed").isNull(), F.lit(f"{column} is not {expected}"))
    reason = reason.when(F.col("quantity_typed") <= 0, F.lit("quantity is not positive"))
    segments = F.split(F.url_decode(F.col("_file")), "/")
    day = F.element_at(segments, -2)  # the day folder the file landed in
    stem = F.regexp_replace(F.element_at(segments, -1), r"\.[^.]*$", "")
    batch = F.regexp_replace(F.concat(day, F.lit("-"), stem), "[^A-Za-z0-9-]", "-")
    event_date = F.to_date(F.col("event_time_typed"))
    return typed.select(
        "event_id",
        "order_id",
        "customer_id",
        "sku",
        "country",
        "_corrupt_record",
        F.col("quantity").alias("quantity_raw"),
        F.col("unit_price").alias("unit_price_raw"),
        F.col("event_time").alias("event_time_raw"),
        F.col("quantity_typed").alias("quantity"),
        F.col("unit_price_typed").alias("unit_price"),
        F.col("event_time_typed").alias("event_time"),
        event_date.alias("event_date"),
        (event_date < F.date_sub(day.cast("date"), LATE_AFTER_DAYS)).alias("late"),
        reason.alias("reason"),
        batch.alias("batch_id"),
        F.element_at(sources, batch).alias("source"),
    )


def ingest(spark: SparkSession, warehouse: Path, paths: list[str], writer: tables.Writer | None = None) -> list[IngestStats]:
    """Validate, quarantine, de-duplicate and store the landed files, in one scan of them; ``writer`` publishes.

    The files are read in one scan per format, not one per file, so that a
    batch of many small files costs about what one file does. Every row is
    marked once (its reason, and which copy of its event id it is) into a
    cached frame; the statistics are one aggregation of it, and both tables
    are written from it, so the files are read and de-duplicated once.
    ``events`` is published before ``quarantine``: between the two a reader
    may see a file's good rows and not yet its rejects, never its rejects
    without its good rows (which would look like a file wholly refused).

    Raises UnreadableInput naming the first file that cannot be read at all.
    """
    from pyspark.sql import functions as F

    started = time.monotonic()
    sources = F.create_map(*[F.lit(value) for path in paths for value in (batch_id(path), path)])
    frames = [_validated(raw, sources) for raw in _read(spark, paths)]
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    marked = _marked(rows).cache()
    try:
        stats = _ingest_stats(marked, paths)
        clean = marked.where("reason IS NULL AND copy = 1").select(*EVENT_COLUMNS)
        rejected = marked.where("reason IS NOT NULL").select(
            "batch_id",
            "source",
            "reason",
            "event_id",
            F.coalesce(
                F.col("_corrupt_record"),
                F.to_json(
                    F.struct(
                        F.col("event_id"),
                        F.col("order_id"),
                        F.col("customer_id"),
                        F.col("sku"),
                        F.col("quantity_raw"),
                        F.col("unit_price_raw"),
                        F.col("country"),
                        F.col("event_time_raw"),
                    )
                ),
            ).alias("raw"),
        )
        batches = [stat.batch_id for stat in stats]
        days = sorted({day for stat in stats for day in stat.days})
        tables.publish(
            warehouse / "events",
            lambda: _with_kept_events(spark, warehouse / "events", clean, batches, days),
            ["event_date"],
            writer,
        )
        tables.publish(warehouse / "quarantine", lambda: rejected.repartition("batch_id"), ["batch_id"], writer)
    finally:
        marked.unpersist()
    seconds = round((time.monotonic() - started) / len(paths), 3)
    for stat in stats:
        stat.seconds = seconds
        write_stats(warehouse, "ingest", stat.batch_id, asdict(stat))
    return stats


#: The columns of the ``events`` table, in order.
EVENT_COLUMNS = [
    "event_id",
    "order_id",
    "customer_id",
    "sku",
    "quantity",
    "unit_price",
    "country",
    "event_time",
    "late",
    "source",
    "event_date",
    "batch_id",
]


def _marked(rows: DataFrame) -> DataFrame:
    """Each row with ``copy``: for a valid row, which copy of its event id in its file it is (1 is kept).

    Rejected rows are numbered apart from the valid ones (the window also
    splits on validity), so a malformed copy never displaces a valid event.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    first = Window.partitionBy("batch_id", "event_id", F.col("reason").isNull()).orderBy("event_time", "order_id")
    return rows.withColumn("copy", F.row_number().over(first))


def _ingest_stats(marked: DataFrame, paths: list[str]) -> list[IngestStats]:
    """Every file's statistics from one aggregation of the marked rows: per file and reason (none for valid rows),
    the rows, and of the valid ones those kept, late, and their days."""
    from pyspark.sql import functions as F

    kept = F.col("reason").isNull() & (F.col("copy") == 1)
    groups = (
        marked.groupBy("batch_id", "reason")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(kept.cast("int")).alias("kept"),
            F.sum((kept & F.col("late")).cast("int")).alias("late"),
            F.collect_set(F.when(kept, F.col("event_date").cast("string"))).alias("days"),
        )
        .collect()
    )
    stats = {
        batch_id(path): IngestStats(
            batch_id=batch_id(path), source=path, rows_in=0, quarantined={}, duplicates=0, rows_out=0, late=0
        )
        for path in paths
    }
    for group in groups:
        stat = stats[group["batch_id"]]
        stat.rows_in += group["rows"]
        if group["reason"] is not None:
            stat.quarantined[group["reason"]] = group["rows"]
            continue
        stat.rows_out, stat.late, stat.days = group["kept"], group["late"], sorted(group["days"])
        stat.duplicates = group["rows"] - group["kept"]
    return list(stats.values())


def _with_kept_events(spark: SparkSession, table: Path, clean: DataFrame, batches: list[str], days: list[str]) -> DataFrame:
    """The events of ``days`` as this write leaves them: the new rows, and the rows other files put there before.

    ``events`` is partitioned by day alone (a few day folders for a batch, not
    one per file and day), so a write replaces whole days: rows of other files
    on those days are carried into the new version, and this batch's own rows
    from an earlier run of the same files are not, so processing a message
    twice leaves the same table. Called under the table's writer lock, so the
    version read is the newest. Each day is written by one task, so a day
    folder gets one file, not one from every task that held some of its rows.

    A table written before, partitioned by day and landed file, is rewritten
    whole into the layout by day: its day folders could not be kept beside
    the new ones. A table with nothing to read (none yet, or an empty version
    from before versions kept their schema) is started afresh.
    """
    from pyspark.sql import functions as F

    try:
        before = tables.read(spark, table).where(~F.col("batch_id").isin(batches))
    except tables.NoVersion:
        return clean.repartition("event_date")
    version = tables.current(table)  # the version just read: the caller holds the writer lock, so it cannot move
    if version is not None and next(version.glob("event_date=*/batch_id=*"), None) is None:
        before = before.where(F.col("event_date").cast("string").isin(days))
    return clean.unionByName(before.select(*EVENT_COLUMNS)).repartition("event_date")


def aggregate(spark: SparkSession, warehouse: Path, days: list[str], writer: tables.Writer | None = None) -> int:
    """Recompute daily sales per day, SKU and country for ``days``; returns the number of result rows.

    Raises :class:`tables.NoVersion`, publishing nothing, when ``events`` has nothing to read yet.
    """
    from pyspark.sql import functions as F

    started = time.monotonic()

    def daily() -> DataFrame:
        """Computed once daily_sales' writer lock is held, so the aggregate that publishes last read the newest events."""
        events = tables.read(spark, warehouse / "events").where(F.col("event_date").cast("string").isin(days))
        return events.groupBy("event_date", "sku", "country").agg(
            F.countDistinct("order_id").alias("orders"),
            F.count(F.lit(1)).alias("events"),
            F.sum("quantity").alias("units"),
            F.round(F.sum(F.col("quantity") * F.col("unit_price")), 2).cast("decimal(14, 2)").alias("revenue"),
            F.sum(F.col("late").cast("int")).alias("late_events"),
        )

    version = tables.publish(warehouse / "daily_sales", daily, ["event_date"], writer)
    rows = tables.read_version(spark, version).where(F.col("event_date").cast("string").isin(days)).count()  # as written
    write_stats(
        warehouse,
        "aggregate",
        "-".join(sorted(days)),
        {"days": days, "rows": rows, "seconds": round(time.monotonic() - started, 3)},
    )
    return rows


def report(spark: SparkSession, warehouse: Path) -> dict[str, Any]:
    """Write reports/report.json and report.txt over everything aggregated so far; returns the JSON.

    Raises :class:`tables.NoVersion`, writing nothing, when ``daily_sales`` has nothing to read yet.
    """
    from pyspark.sql import functions as F

    started = time.monotonic()
    daily = tables.read(spark, warehouse / "daily_sales")  # one version for every figure below
    per_day = [
        {
            "day": str(r["event_date"]),
            "orders": r["orders"],
            "units": r["units"],
            "revenue": float(r["revenue"]),
            "late_events": r["late_events"],
        }
        for r in daily.groupBy("event_date")
        .agg(
            F.sum("orders").alias("orders"),
            F.sum("units").alias("units"),
            F.sum("revenue").alias("revenue"),
            F.sum("late_events").alias("late_events"),
        )
        .orderBy("event_date")
        .collect()
    ]
    top = [
        {"sku": r["sku"], "revenue": float(r["revenue"])}
        for r in daily.groupBy("sku")
        .agg(F.sum("revenue").alias("revenue"))
        .orderBy(F.desc("revenue"), "sku")
        .limit(5)
        .collect()
    ]
    ingested = [json.loads(p.read_text()) for p in sorted((warehouse / "_stats" / "ingest").glob("*.json"))]
    quarantined: dict[str, int] = {}
    for item in ingested:
        for reason, n in item["quarantined"].items():
            quarantined[reason] = quarantined.get(reason, 0) + n
    summary = {
        "files": len(ingested),
        "rows_in": sum(i["rows_in"] for i in ingested),
        "quarantined": dict(sorted(quarantined.items())),
        "duplicates": sum(i["duplicates"] for i in ingested),
        "rows_out": sum(i["rows_out"] for i in ingested),
        "late": sum(i["late"] for i in ingested),
        "days": per_day,
        "top_skus": top,
    }
    out = warehouse / "reports"
    out.mkdir(parents=True, exist_ok=True)
    tables.write_atomic(out / "report.json", json.dumps(summary, indent=2))
    tables.write_atomic(out / "report.txt", render_report(summary))
    write_stats(warehouse, "report", "latest", {"seconds": round(time.monotonic() - started, 3)})
    return summary


def render_report(summary: dict[str, Any]) -> str:
    lines = [
        f"files ingested   {summary['files']}",
        f"rows in          {summary['rows_in']}",
        f"rows quarantined {sum(summary['quarantined'].values())}"
        + "".join(f"\n  {reason:<30} {n}" for reason, n in summary["quarantined"].items()),
        f"duplicates       {summary['duplicates']}",
        f"rows out         {summary['rows_out']} ({summary['late']} late)",
        "",
        f"{'day':<12} {'orders':>8} {'units':>8} {'revenue':>12}",
        *(f"{d['day']:<12} {d['orders']:>8} {d['units']:>8} {d['revenue']:>12.2f}" for d in summary["days"]),
        "",
        "top SKUs by revenue: " + ", ".join(f"{t['sku']} ({t['revenue']:.2f})" for t in summary["top_skus"]),
    ]
    return "\n".join(lines) + "\n"


def write_stats(warehouse: Path, step: str, key: str, stats: dict[str, Any]) -> None:
    """One JSON file per step and key, replaced whole when the same work is done again (report reads them)."""
    folder = warehouse / "_stats" / step
    folder.mkdir(parents=True, exist_ok=True)
    tables.write_atomic(folder / f"{key}.json", json.dumps(stats, default=str))

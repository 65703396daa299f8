"""Tables that are never read half-written: each write publishes a whole new version, and readers follow a pointer.

A table is a folder. A write goes into a new version folder inside it
(``v-<UTC time>-<random>``); only once Spark has finished writing it is the
small pointer file ``_current`` switched to name it, by an atomic rename. A
reader resolves the pointer once and reads that version, so it sees the table
as it was before a write or after it, never a mix, and never a partition that
a write is deleting.

A write replaces the partitions its rows fall in and keeps the others, as
Spark's dynamic partition overwrite does (so a message processed twice leaves
the same table). The partitions it keeps are hard-linked from the version
before, so a write costs the data it writes, not the size of the table.

Writers of one table take turns: a lock on ``_writer.lock`` is held from
before the rows are computed until the pointer names the new version. Two
writers that started from the same version would otherwise each publish it
with only their own partitions replaced, and the second would undo the first;
and a step that reads one table to write another (aggregate) reads its input
under the lock, so the last writer to publish has seen the newest input.

The next write removes a version retired for longer than
:data:`RETIRED_GRACE`: a reader that resolved the pointer just before it moved
is still reading that version.

All of this needs a filesystem: a local one, or a volume that replicas share
over NFS or SMB (deploy/k8s), where a rename is atomic too and Linux makes
``flock`` a lock of the whole file on the server (NFS since 2.6.12, SMB since
5.5); where a share has no hard links (Azure Files over SMB), kept partitions
are copied. On an object
store (``abfss://``, ``s3a://``) a rename is a copy and there are no links or
locks: there the pointer would be an object written last with a conditional
put (If-Match on the ETag the writer read, so that of two writers one fails
and writes again), and kept partitions copied or listed in a manifest; or,
better, the tables would be kept in a table format whose commits are atomic
(Delta Lake, Apache Iceberg), which does exactly that.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The file in a table's folder that names its current version.
POINTER = "_current"
#: The file in a table's folder whose lock its writer holds.
WRITER_LOCK = "_writer.lock"
#: How long a version stays after a write retired it. The readers are the pipeline's handlers, whose Spark jobs the
#: host cancels at functionTimeout (5 minutes in the sample's host.yaml); three times that leaves room for a slow
#: shutdown. A reader that runs longer (a notebook querying the warehouse) needs a longer grace.
RETIRED_GRACE = timedelta(minutes=15)


def current(table: Path) -> Path | None:
    """The version folder that readers of ``table`` read now, or None before its first write."""
    try:
        name = (table / POINTER).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return table / name


def read(spark: SparkSession, table: Path) -> DataFrame:
    """The table as its last write left it.

    The pointer is resolved here, once: every job of the frame reads that one
    version, even when writes publish others meanwhile.
    """
    version = current(table)
    if version is None:
        raise FileNotFoundError(f"table {table} has no published version yet")
    return spark.read.parquet(str(version))


def publish(table: Path, build: Callable[[], DataFrame], partitions: Sequence[str]) -> Path:
    """Write the frame ``build`` returns as the table's new version, replacing the partitions its rows fall in.

    ``build`` is called under the table's writer lock, so that what it reads
    is at least as new as what the writer before it read. ``partitions`` (at
    least one column) are the columns the table is partitioned by. If the
    write fails, the version folder is removed and readers go on reading the
    one before. Returns the new version's folder.
    """
    table.mkdir(parents=True, exist_ok=True)
    with _writer(table):
        base = current(table)
        version = table / f"v-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"
        try:
            build().write.partitionBy(*partitions).parquet(str(version))
            if base is not None:
                _link_kept(base, version, len(partitions))
                os.utime(base)  # its grace starts now (before the switch, so that no crash can skip it)
            write_atomic(table / POINTER, version.name + "\n")
        except BaseException:
            shutil.rmtree(version, ignore_errors=True)
            raise
        _remove_retired(table, version)
    return version


def write_atomic(path: Path, text: str) -> None:
    """Replace the file ``path`` with ``text`` at once: a reader finds the old content or the new, never part of one.

    The text goes to a temporary file in the same folder (a rename is atomic
    within one filesystem only) and reaches the disk before the rename, so
    that a crash cannot leave the name pointing at an empty file.
    """
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with temp.open("x", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


@contextmanager
def _writer(table: Path) -> Iterator[None]:
    """One writer of ``table`` at a time, among the threads and processes of this machine.

    ``flock`` locks belong to an open file, so two threads of one process that
    each open the file exclude each other too; the lock ends with the file's
    closing or the process's exit, so a killed writer leaves none behind.
    """
    with (table / WRITER_LOCK).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _link_kept(base: Path, version: Path, depth: int) -> None:
    """Hard-link into ``version`` every partition of ``base`` that the write did not replace."""
    pattern = "/".join(["*=*"] * depth)
    written = {partition.relative_to(version) for partition in version.glob(pattern)}
    for partition in base.glob(pattern):
        if (relative := partition.relative_to(base)) in written:
            continue
        shutil.copytree(partition, version / relative, copy_function=_link)


def _link(source: str, target: str) -> None:
    """A hard link where the filesystem has them, a copy where it has none (Azure Files over SMB)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _remove_retired(table: Path, keep: Path) -> None:
    """Remove every version but ``keep`` last touched more than RETIRED_GRACE ago.

    A retired version was touched when it was retired; one that a killed
    writer left unpublished was last touched by its write, and no reader ever
    had it. The caller holds the writer lock, so no other write is under way.
    """
    cutoff = time.time() - RETIRED_GRACE.total_seconds()
    for version in table.glob("v-*"):
        if version != keep and version.stat().st_mtime < cutoff:
            shutil.rmtree(version)

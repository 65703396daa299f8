"""Tables that are never read half-written: each write publishes a whole new version, and readers follow a pointer.

A table is a folder. A write goes into a new version folder inside it
(``v-<UTC time>-<random>``); only once Spark has finished writing it is the
small pointer file ``_current`` switched to name it, by an atomic rename. A
reader resolves the pointer once and reads that version, so it sees the table
as it was before a write or after it, never a mix, and never a partition that
a write is deleting. :func:`read` is that reader, for the pipeline's steps and
for anyone else (a notebook, a report job): it needs PySpark and this module,
not the worker.

Each version holds its schema (``_schema.json``, which Spark's readers skip as
they skip every name that starts with ``_``), so a write of no rows publishes
an empty table that reads as one, not a folder whose schema Spark cannot
infer. A version with neither rows nor schema (written before schemas were
kept) reads as no version at all, so the next write starts afresh.

A write replaces the partitions its rows fall in and keeps the others, as
Spark's dynamic partition overwrite does (so a message processed twice leaves
the same table). The partitions it keeps are hard-linked from the version
before, so a write costs the data it writes, not the size of the table.

Writers of one table take turns: a lock on ``_writer.lock`` is held from
before the rows are computed until the pointer names the new version. Two
writers that started from the same version would otherwise each publish it
with only their own partitions replaced, and the second would undo the first;
and a step that reads one table to write another (aggregate) reads its input
under the lock, so the last writer to publish has seen the newest input. A
writer waits for the lock for a bounded time (:attr:`Writer.lock_wait`) and
then gives up with :class:`LockTimeout`, so that a writer that hangs (a
paused process) makes the others fail and be retried rather than wait for
ever. Just before the pointer moves, still under the lock, the writer's
:class:`Fence` is asked whether it may still publish: a writer whose queue
message has meanwhile gone to another worker discards its version
(:class:`StaleWriter`), so a stale writer can never publish after the one that
replaced it.

Every write first removes, under the lock, the versions nobody reads: a
version never published (its writer was killed; with the lock held, no live
writer is making it) at once, and a retired one once
:attr:`Writer.retired_grace` has passed since it was retired, for a reader
that resolved the pointer just before it moved is still reading it.

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
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The file in a table's folder that names its current version.
POINTER = "_current"
#: The file in a table's folder whose lock its writer holds; it names the writer holding it, for whoever waits.
WRITER_LOCK = "_writer.lock"
#: The file in a version's folder that holds the version's schema (Spark's JSON of a StructType).
SCHEMA = "_schema.json"
#: The file in a version's folder written when a write retires the version; its time starts the grace.
RETIRED = "_retired"
#: How long a retired version stays by default: an hour, twelve times the sample's functionTimeout (5 minutes),
#: after which the host has long cancelled a step's Spark jobs, and longer than most queries of a notebook.
RETIRED_GRACE = timedelta(hours=1)
#: How long a writer waits for another writer's lock by default: under half the sample's functionTimeout, so
#: that an attempt that gets the lock late still has time to write, and a retry (which waits again) is a back-off.
LOCK_WAIT = timedelta(minutes=2)
#: The longest pause between two tries of a taken lock.
LOCK_POLL = 1.0


class NoVersion(FileNotFoundError):
    """The table has nothing to read: no version published yet, or one written before schemas were kept that holds
    no rows (which Spark could not read)."""


class StaleWriter(Exception):
    """The writer may no longer publish (its queue message is someone else's now); its version was discarded."""


class LockTimeout(TimeoutError):
    """Another writer held the table's lock for longer than the writer would wait; nothing was written."""


class Fence(Protocol):
    """Whether a writer may still publish: asked under the lock, while it waits and just before the pointer moves."""

    def check(self) -> None:
        """Return if the writer may publish; raise :class:`StaleWriter` saying why not."""


class Unfenced:
    """The fence of a writer that nothing can make stale (a script, a test): it always may publish."""

    def check(self) -> None:
        return None


@dataclass(frozen=True)
class Writer:
    """How one writer publishes: who may still publish (``fence``), and the table's waits and grace."""

    fence: Fence = field(default_factory=Unfenced)
    #: How long a retired version stays for its readers: set it above the longest read of a table (twice the
    #: longest step's functionTimeout at least, for the steps' own reads).
    retired_grace: timedelta = RETIRED_GRACE
    #: How long to wait for another writer's lock before :class:`LockTimeout`.
    lock_wait: timedelta = LOCK_WAIT


def current(table: Path) -> Path | None:
    """The version folder that readers of ``table`` read now, or None before its first write."""
    try:
        name = (table / POINTER).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return table / name


def read(spark: SparkSession, table: str | os.PathLike[str]) -> DataFrame:
    """The table as its last write left it; :class:`NoVersion` when it has nothing to read.

    The pointer is resolved here, once: every job of the frame reads that one
    version, even when writes publish others meanwhile, for as long as the
    writers' ``retired_grace`` after the next write retires it.
    """
    path = Path(table)
    version = current(path)
    if version is None:
        raise NoVersion(f"table {path} has no published version yet")
    return read_version(spark, version)


def read_version(spark: SparkSession, version: Path) -> DataFrame:
    """One version of a table (a folder :func:`publish` returned), read with the schema it was written with."""
    schema_file = version / SCHEMA
    if schema_file.is_file():
        from pyspark.sql.types import StructType

        schema = StructType.fromJson(json.loads(schema_file.read_text(encoding="utf-8")))
        return spark.read.schema(schema).parquet(str(version))
    if next(version.rglob("*.parquet"), None) is None:
        raise NoVersion(
            f"table {version.parent}'s version {version.name} holds no rows and no schema (an empty "
            "write from before versions kept their schema); the next write replaces it"
        )
    return spark.read.parquet(str(version))


def publish(table: Path, build: Callable[[], DataFrame], partitions: Sequence[str], writer: Writer | None = None) -> Path:
    """Write the frame ``build`` returns as the table's new version, replacing the partitions its rows fall in.

    ``build`` is called under the table's writer lock, so that what it reads
    is at least as new as what the writer before it read. ``partitions`` (at
    least one column) are the columns the table is partitioned by. If the
    write fails, or ``writer``'s fence says the writer is stale, the version
    folder is removed and readers go on reading the one before. Returns the
    new version's folder.
    """
    writer = writer or Writer()
    table.mkdir(parents=True, exist_ok=True)
    with _lock(table, writer):
        base = current(table)
        _remove_unread(table, base, writer.retired_grace)
        version = table / f"v-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"
        try:
            frame = build()
            frame.write.partitionBy(*partitions).parquet(str(version))
            (version / SCHEMA).write_text(frame.schema.json(), encoding="utf-8")
            if base is not None:
                _link_kept(base, version, len(partitions))
            writer.fence.check()
            if base is not None:
                # Its grace starts now, before the switch, so that no crash can skip it (a crash before the switch
                # leaves it current, and the current version is never removed).
                write_atomic(base / RETIRED, f"{datetime.now(UTC).isoformat()}\n")
            write_atomic(table / POINTER, version.name + "\n")
        except BaseException:
            shutil.rmtree(version, ignore_errors=True)
            raise
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
def _lock(table: Path, writer: Writer) -> Iterator[None]:
    """One writer of ``table`` at a time, among the threads and processes of this machine, waiting at most
    ``writer.lock_wait`` (and no longer than the writer's fence allows).

    ``flock`` locks belong to an open file, so two threads of one process that
    each open the file exclude each other too; the lock ends with the file's
    closing or the process's exit, so a killed writer leaves none behind. A
    paused one (SIGSTOP, a frozen VM) keeps it until it runs again, which is
    what the bounded wait is for. ``flock`` cannot wait with a deadline, so a
    taken lock is tried again at growing intervals.
    """
    fd = os.open(table / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    with os.fdopen(fd, "r+", encoding="utf-8") as lock:
        deadline = time.monotonic() + writer.lock_wait.total_seconds()
        pause = 0.05
        while not _try_lock(lock):
            writer.fence.check()
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockTimeout(
                    f"table {table}: its writer lock was not free within {writer.lock_wait} "
                    f"(held by {_holder(lock)}); nothing written"
                )
            time.sleep(min(pause, left))
            pause = min(pause * 2, LOCK_POLL)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()} since {datetime.now(UTC).isoformat()}\n")
        lock.flush()
        yield


def _try_lock(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(lock: IO[str]) -> str:
    """Who holds the lock, as its holder wrote it when it took it."""
    lock.seek(0)
    return lock.read().strip() or "a writer that has not said who it is"


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


def _remove_unread(table: Path, keep: Path | None, grace: timedelta) -> None:
    """Remove every version of ``table`` but ``keep`` (the current one) that no reader can be reading.

    A retired one goes once ``grace`` has passed since its retirement. One
    without a retirement mark was never published: its writer was killed
    before the switch, or was fenced out and died before removing it, and the
    caller, which holds the writer lock, knows no other write is under way. It
    goes at once, whatever its age. But a version that Spark committed
    (``_SUCCESS``) and that has no schema was written before versions were
    marked, and may have been published and retired then (with the folder's
    time as its retirement time): it is kept for the grace as it was then.
    """
    cutoff = time.time() - grace.total_seconds()
    for version in table.glob("v-*"):
        if version == keep:
            continue
        if (version / RETIRED).exists():
            retired: float | None = (version / RETIRED).stat().st_mtime
        elif (version / "_SUCCESS").exists() and not (version / SCHEMA).exists():
            retired = version.stat().st_mtime
        else:
            retired = None
        if retired is None or retired < cutoff:
            shutil.rmtree(version, ignore_errors=True)

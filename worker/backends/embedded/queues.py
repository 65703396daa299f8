"""The embedded queue: one SQLite file with Azure Storage Queue semantics, the default backend.

Receives, pop receipts, dequeue counts and expiry behave as in Azure; several processes may share the file.
One thread per backend owns the connection; waiting writes commit together, each under a savepoint.
A receive long-polls: this process's writes wake it, others' within ``CHANGE_POLL_SECONDS``.
A file deleted or replaced makes every call raise :class:`StorageGone`, so the worker restarts on the new one.
Why each of these: ARCHITECTURE.md, "Design notes".
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from worker.backends.azure.connection import AZURE_CAPABILITIES, AZURE_LIMITS
from worker.backends.embedded.files import private_file
from worker.backends.queues import (
    NEVER_EXPIRES,
    MessageCounts,
    MessageNotFound,
    PopReceiptMismatch,
    QueueNotFound,
    RawMessage,
    Receipt,
    StorageGone,
    TransientError,
    UnusableFile,
    check_no_channel,
    check_target,
)
from worker.backends.releasing import CancelledReceives
from worker.waits import wait_set

T = TypeVar("T")

#: How long a statement waits for another process's write lock before giving up (ms).
BUSY_TIMEOUT_MS = 30_000
#: Most writes committed in one transaction, so that other processes sharing the file get the lock soon.
MAX_GROUP = 256
#: Longest a receive waits for a message, as OCI Queue's and SQS's long polls (20 s).
LONG_POLL_SECONDS = 20.0
#: Azure's limits and capabilities, so that an app moves between the embedded queue and Azure Storage unchanged;
#: but times are kept to the microsecond, a receive waits for a message, and a message may carry properties.
EMBEDDED_LIMITS = replace(AZURE_LIMITS, visibility_resolution=0.0, long_poll=LONG_POLL_SECONDS)
EMBEDDED_CAPABILITIES = replace(AZURE_CAPABILITIES, message_properties=True)
#: How often the file is looked at for other processes' writes while a receive waits.
CHANGE_POLL_SECONDS = 0.075

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (
    name TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL,
    content TEXT NOT NULL,
    inserted REAL NOT NULL,
    expires REAL,
    visible REAL NOT NULL,
    dequeue_count INTEGER NOT NULL DEFAULT 0,
    pop_receipt TEXT,
    properties TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_visibility ON messages (queue, visible, seq);
"""

_COLUMNS = "id, content, dequeue_count, inserted, expires, visible, pop_receipt, properties"


def _add_properties(db: sqlite3.Connection) -> None:
    """Give a file made before messages had properties their column (NULL: none), so that it stays usable.

    Processes opening such a file together may both find the column missing: the one that adds it second is told
    it is there, which is what it wanted.
    """
    if "properties" not in {row[1] for row in db.execute("PRAGMA table_info(messages)")}:
        try:
            db.execute("ALTER TABLE messages ADD COLUMN properties TEXT")
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):
                raise


def _when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _row_to_message(row: tuple[Any, ...], with_receipt: bool = True) -> RawMessage:
    id_, content, dequeue_count, inserted, expires, visible, receipt, properties = row
    return RawMessage(
        id=id_,
        content=content,
        dequeue_count=dequeue_count,
        insertion_time=datetime.fromtimestamp(inserted, UTC),  # a NOT NULL column
        expiration_time=_when(expires),
        time_next_visible=_when(visible),
        pop_receipt=receipt if with_receipt else None,
        properties=json.loads(properties) if properties else {},
    )


@dataclass(eq=False)
class _Write(Generic[T]):
    """One write waiting for a group commit, and the future its caller awaits on ``loop``."""

    work: Callable[[sqlite3.Connection], T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]

    def resolve(self, ok: bool, value: Any) -> None:
        """On the caller's loop: hand over the result (a caller that stopped waiting is skipped): what ``work``
        returned where ``ok``, else what it raised."""
        if self.future.done():
            return
        if ok:
            self.future.set_result(value)
        else:
            assert isinstance(value, BaseException)
            self.future.set_exception(value)


#: The first bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be an embedded queue file, or None (a missing or empty file becomes a new database).

    Checked before SQLite opens it, so that a file of something else is refused with its path, not written over,
    and a file or folder that cannot be written is refused as read-only.
    """
    if path.is_dir():
        return f"embedded queue file {path} is a directory"
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        head = b""
    except OSError as exc:
        return f"embedded queue file {path} cannot be read: {exc.strerror or exc}"
    if head and head != SQLITE_HEADER:
        return f"embedded queue file {path} is not a SQLite database"
    return _read_only(path)


def _read_only(path: Path) -> str | None:
    """Why the host could not write ``path``, or None: the file, and the folder its journal files (or the file itself,
    or its folder) are made in, must be writable.

    SQLite opens a file it cannot write without a word and fails at the first write, deep in a receive; asked here,
    the answer names the file. ``os.access`` says no for a file on a read-only mount (or an immutable one) even to
    root, for whom permission bits alone do not.
    """
    if path.exists() and not os.access(path, os.W_OK):
        return f"embedded queue file {path} is read-only"
    folder = next(parent for parent in path.parents if parent.exists())
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"folder {folder} of embedded queue file {path} is read-only"
    return None


def _identity(path: Path) -> tuple[int, int] | None:
    """The device and inode ``path`` names now; None where nothing is there (the file or a folder above it gone)."""
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return status.st_dev, status.st_ino


def file_gone(path: Path, opened: tuple[int, int]) -> str | None:
    """Why the file opened as ``path`` (device and inode ``opened``) is no longer the one there, or None if it is.

    A stat that fails otherwise (a folder made unreadable) says nothing of the file, so it is not taken for gone.
    """
    try:
        now = _identity(path)
    except OSError:
        return None
    if now == opened:
        return None
    if now is None:
        return (
            f"embedded queue file {path} was deleted while this worker had it open: the messages it held went "
            "with it unless the file is restored, and what this worker wrote since is lost with it; the worker "
            "must restart to use a file at that path"
        )
    return (
        f"embedded queue file {path} was replaced by another file while this worker had the old one open: "
        "what this worker wrote since went into the old file, which nothing reads; the worker must restart "
        "to use the new one"
    )


class SqliteBackend:
    """Queues in one SQLite file; implements :class:`worker.backends.queues.QueueBackend`."""

    limits = EMBEDDED_LIMITS
    capabilities = EMBEDDED_CAPABILITIES
    service_dead_letters = False
    #: No registered name: this host's own.
    messaging_system = "queueworker_embedded"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"sqlite-{self.path.name}")
        self._db: sqlite3.Connection | None = None
        #: The device and inode of the file the connection opened, to notice it deleted or replaced under it.
        self._opened: tuple[int, int] | None = None
        self._changes = _Changes(self.path, self._gone)
        self._cancelled = CancelledReceives()
        #: Writes waiting for the next group commit, and whether a commit loop is queued or running.
        self._writes: list[_Write[Any]] = []
        self._writes_lock = threading.Lock()
        self._committing = False

    def __repr__(self) -> str:
        return f"SqliteBackend({str(self.path)!r})"

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            if problem := file_problem(self.path):
                raise UnusableFile(problem)
            try:
                private_file(self.path)  # before SQLite makes it 0644; its -wal and -shm then take its mode
            except OSError as exc:  # a folder this user may not write in: the operator's to fix, not a retry's
                raise UnusableFile(f"embedded queue file {self.path} cannot be created: {exc.strerror or exc}") from None
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            try:
                db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                self._enable_wal(db)
                db.execute("PRAGMA synchronous = NORMAL")
                db.executescript(_SCHEMA)
                _add_properties(db)
            except sqlite3.DatabaseError as exc:
                db.close()
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise
                raise UnusableFile(f"embedded queue file {self.path} cannot be used: {exc}") from None
            except BaseException:
                db.close()
                raise
            self._db = db
            self._opened = _identity(self.path)
        self._check_file()
        return self._db

    def _gone(self) -> str | None:
        """Why the file this backend opened is no longer at its path, or None (also before it is opened)."""
        return None if self._opened is None else file_gone(self.path, self._opened)

    def _check_file(self) -> None:
        """Raise StorageGone once the file opened has been deleted or replaced: once per read or group commit."""
        if problem := self._gone():
            raise StorageGone(problem)

    @staticmethod
    def _enable_wal(db: sqlite3.Connection) -> None:
        """Switch the file to WAL, retrying while other processes hold it.

        Turning a new file to WAL needs an exclusive lock, and SQLite answers "database is locked" at once
        rather than calling the busy handler, so processes opening a new file together must retry.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    async def _run(self, work: Callable[[sqlite3.Connection], T], *, write: bool = False) -> T:
        """Run ``work`` on the backend's thread: reads in a transaction of their own, writes in the next group."""
        loop = asyncio.get_running_loop()
        if not write:
            return await loop.run_in_executor(self._thread, self._read, work)
        item: _Write[T] = _Write(work, loop, loop.create_future())
        with self._writes_lock:
            self._writes.append(item)
            start, self._committing = not self._committing, True
        if start:
            self._thread.submit(self._commit_groups)
        return await item.future

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            db = self._connect()
            db.execute("BEGIN")
            try:
                return work(db)
            finally:
                db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            raise TransientError(f"embedded queue {self.path}: {exc}") from exc

    def _commit_groups(self) -> None:
        """On the backend's thread: commit waiting writes a group at a time until none is left."""
        while True:
            with self._writes_lock:
                group, self._writes = self._writes[:MAX_GROUP], self._writes[MAX_GROUP:]
                if not group:
                    self._committing = False
                    return
            try:
                outcomes = self._commit(group)
            except BaseException as exc:  # a bug, not storage trouble: still answer every caller
                outcomes = [(False, exc)] * len(group)
            for item, (ok, value) in zip(group, outcomes, strict=True):
                item.loop.call_soon_threadsafe(item.resolve, ok, value)

    def _commit(self, group: list[_Write[Any]]) -> list[tuple[bool, object]]:
        """Run ``group`` in one ``BEGIN IMMEDIATE`` transaction; each item's result or error, in order.

        An item that raises is rolled back to its savepoint and the rest go on. A failure of SQLite
        itself ("database is locked" past busy_timeout, disk I/O trouble) fails the whole group as
        transient: the same calls may succeed later.
        """
        try:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE")
            try:
                outcomes: list[tuple[bool, object]] = []
                for item in group:
                    db.execute("SAVEPOINT item")
                    try:
                        outcomes.append((True, item.work(db)))
                    except sqlite3.OperationalError:
                        raise
                    except Exception as exc:
                        db.execute("ROLLBACK TO item")
                        outcomes.append((False, exc))
                    db.execute("RELEASE item")
                db.execute("COMMIT")
                return outcomes
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            error = TransientError(f"embedded queue {self.path}: {exc}")
            error.__cause__ = exc
            return [(False, error)] * len(group)

    @staticmethod
    def _require_queue(db: sqlite3.Connection, queue: str) -> None:
        if db.execute("SELECT 1 FROM queues WHERE name = ?", (queue,)).fetchone() is None:
            raise QueueNotFound(f"queue {queue!r} does not exist")

    @staticmethod
    def _held(db: sqlite3.Connection, queue: str, message_id: str, pop_receipt: str, now: float) -> None:
        """Raise unless ``message_id`` is in ``queue``, unexpired, with ``pop_receipt`` current."""
        row = db.execute(
            "SELECT pop_receipt, expires FROM messages WHERE id = ? AND queue = ?", (message_id, queue)
        ).fetchone()
        if row is None or (row[1] is not None and row[1] <= now):
            raise MessageNotFound(f"message {message_id} is not in queue {queue!r}")
        if row[0] != pop_receipt:
            raise PopReceiptMismatch(f"pop receipt for message {message_id} is stale")

    # -- queues -----------------------------------------------------------------------------------------------

    async def create_queue(self, queue: str) -> None:
        self.limits.check_name(queue)
        await self._run(lambda db: db.execute("INSERT OR IGNORE INTO queues (name) VALUES (?)", (queue,)), write=True)

    async def delete_queue(self, queue: str) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM messages WHERE queue = ?", (queue,))
            db.execute("DELETE FROM queues WHERE name = ?", (queue,))

        await self._run(work, write=True)

    async def list_queues(self) -> list[str]:
        return await self._run(lambda db: [r[0] for r in db.execute("SELECT name FROM queues ORDER BY name")])

    # -- messages ---------------------------------------------------------------------------------------------

    async def put(
        self,
        queue: str,
        content: str,
        *,
        visibility_timeout: float = 0,
        time_to_live: float | None = None,
        channel: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> RawMessage:
        check_no_channel(channel, "embedded")
        ttl = self.limits.check_put(content, visibility_timeout, time_to_live)
        stored = json.dumps(dict(properties)) if properties else None

        def work(db: sqlite3.Connection) -> RawMessage:
            self._require_queue(db, queue)
            now = time.time()
            expires = None if ttl == NEVER_EXPIRES else now + ttl
            message_id = str(uuid.uuid4())
            db.execute(
                "INSERT INTO messages (id, queue, content, inserted, expires, visible, properties) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (message_id, queue, content, now, expires, now + visibility_timeout, stored),
            )
            return _row_to_message((message_id, content, 0, now, expires, now + visibility_timeout, None, stored))

        message = await self._run(work, write=True)
        self._changes.written()
        return message

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float,
        *,
        wait: float = 0,
        channel: str | None = None,
    ) -> list[RawMessage]:
        check_no_channel(channel, "embedded")
        self.limits.check_count(max_messages)
        self.limits.check_visibility(visibility_timeout, 1)
        deadline = time.monotonic() + min(max(wait, 0.0), self.limits.long_poll)

        def work(db: sqlite3.Connection) -> tuple[list[RawMessage], float | None]:
            """The messages taken, and when none: the time the next one becomes visible (None: none waits)."""
            self._require_queue(db, queue)
            now = time.time()
            db.execute("DELETE FROM messages WHERE queue = ? AND expires <= ?", (queue, now))
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE queue = ? AND visible <= ? ORDER BY seq LIMIT ?",
                (queue, now, max_messages),
            ).fetchall()
            taken = []
            for id_, content, dequeue_count, inserted, expires, _, _, properties in rows:
                receipt = uuid.uuid4().hex
                visible = now + visibility_timeout
                db.execute(
                    "UPDATE messages SET visible = ?, dequeue_count = ?, pop_receipt = ? WHERE id = ?",
                    (visible, dequeue_count + 1, receipt, id_),
                )
                taken.append(
                    _row_to_message((id_, content, dequeue_count + 1, inserted, expires, visible, receipt, properties))
                )
            if taken or wait <= 0:
                return taken, None
            row = db.execute("SELECT min(visible) FROM messages WHERE queue = ?", (queue,)).fetchone()
            return taken, row[0]

        while True:
            seen = self._changes.version
            taken, next_visible = await self._take(queue, work)
            remaining = deadline - time.monotonic()
            if taken or remaining <= 0:
                return taken
            if next_visible is not None:
                remaining = min(remaining, max(next_visible - time.time(), 0.0) + 0.001)
            await self._changes.wait(seen, remaining)

    async def _take(
        self, queue: str, work: Callable[[sqlite3.Connection], tuple[list[RawMessage], float | None]]
    ) -> tuple[list[RawMessage], float | None]:
        """Run a receive's ``work``; if the caller is cancelled meanwhile, what it took is given back.

        Receives are cancelled at shutdown; the messages a take had already
        hidden would otherwise stay invisible for a whole lease. They come back
        as they were, dequeue count included: no attempt was made. ``close``
        waits for that (:mod:`worker.backends.releasing`).
        """

        async def give_back(got: tuple[list[RawMessage], float | None]) -> None:
            if got[0]:
                await self._release([(m.id, m.pop_receipt or "") for m in got[0]], queue)

        return await self._cancelled.run(self._run(work, write=True), give_back)

    async def _release(self, held: list[tuple[str, str]], queue: str) -> None:
        """Undo a take that nobody got: the messages visible again, their dequeue counts as before, in one write."""

        def work(db: sqlite3.Connection) -> None:
            for message_id, receipt in held:
                db.execute(
                    "UPDATE messages SET visible = ?, pop_receipt = NULL, dequeue_count = dequeue_count - 1 "
                    "WHERE id = ? AND queue = ? AND pop_receipt = ?",
                    (time.time(), message_id, queue, receipt),
                )

        await self._run(work, write=True)
        self._changes.written()

    async def update(
        self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float, content: str | None = None
    ) -> Receipt:
        check_target("visibility change", queue, message_id, pop_receipt)
        self.limits.check_visibility(visibility_timeout, 0)
        if content is not None:
            self.limits.check_size(content)

        def work(db: sqlite3.Connection) -> Receipt:
            now = time.time()
            self._held(db, queue, message_id, pop_receipt, now)
            receipt = uuid.uuid4().hex
            db.execute(
                "UPDATE messages SET visible = ?, pop_receipt = ?, content = coalesce(?, content) WHERE id = ?",
                (now + visibility_timeout, receipt, content, message_id),
            )
            return Receipt(receipt, _when(now + visibility_timeout))  # type: ignore[arg-type]

        receipt = await self._run(work, write=True)
        if visibility_timeout < self.limits.long_poll:  # a release: a waiting receive looks again (now, or at its time)
            self._changes.written()
        return receipt

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        check_target("delete", queue, message_id, pop_receipt)

        def work(db: sqlite3.Connection) -> None:
            self._held(db, queue, message_id, pop_receipt, time.time())
            db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

        await self._run(work, write=True)

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        self.limits.check_count(max_messages)

        def work(db: sqlite3.Connection) -> list[RawMessage]:
            self._require_queue(db, queue)
            now = time.time()
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE queue = ? AND visible <= ? "
                "AND (expires IS NULL OR expires > ?) ORDER BY seq LIMIT ?",
                (queue, now, now, max_messages),
            ).fetchall()
            return [_row_to_message(r, with_receipt=False) for r in rows]

        return await self._run(work)

    async def approximate_count(self, queue: str) -> int:
        def work(db: sqlite3.Connection) -> int:
            self._require_queue(db, queue)
            row = db.execute(
                "SELECT count(*) FROM messages WHERE queue = ? AND (expires IS NULL OR expires > ?)",
                (queue, time.time()),
            ).fetchone()
            return int(row[0])

        return await self._run(work)

    async def message_counts(self, queue: str) -> MessageCounts:
        def work(db: sqlite3.Connection) -> MessageCounts:
            self._require_queue(db, queue)
            now = time.time()
            row = db.execute(
                "SELECT count(*), coalesce(sum(visible > ?), 0) FROM messages WHERE queue = ? "
                "AND (expires IS NULL OR expires > ?)",
                (now, queue, now),
            ).fetchone()
            return MessageCounts(visible=int(row[0]) - int(row[1]), invisible=int(row[1]))

        return await self._run(work)

    async def close(self) -> None:
        await self._cancelled.wait()
        await self._changes.close()

        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._thread, shut)
        self._thread.shutdown(wait=True)


class _Changes:
    """Tells waiting receives that the file may hold something new.

    ``version`` moves when this backend writes (:meth:`written`) and when
    another connection commits to the file, which one task notices by reading
    ``PRAGMA data_version`` every ``CHANGE_POLL_SECONDS`` on a connection of
    its own, only while some receive waits. The read is a few microseconds and
    never waits for a lock (its busy timeout is 0), so it runs on the event
    loop: a thread hand-off would cost thirty times the read, and an idle
    worker does little else. The same poll asks ``gone`` whether the file was
    deleted or replaced, and wakes the receives then, so that their next take
    says so rather than after their whole wait.
    """

    def __init__(self, path: Path, gone: Callable[[], str | None]) -> None:
        self.path = path
        self.gone = gone
        self.version = 0
        self._event: asyncio.Event | None = None
        self._waiting = 0
        self._watcher: asyncio.Task[None] | None = None
        self._db: sqlite3.Connection | None = None

    def written(self) -> None:
        """Something was written: wake every waiting receive (called on the event loop)."""
        self.version += 1
        if self._event is not None:
            self._event.set()
            self._event = None

    async def wait(self, seen: int, timeout: float) -> None:
        """Return when ``version`` has moved past ``seen``, or after ``timeout`` seconds."""
        if self.version != seen or timeout <= 0:
            return
        if self._event is None:
            self._event = asyncio.Event()
        event = self._event
        self._waiting += 1
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name=f"sqlite-changes-{self.path.name}")
        try:
            await wait_set(event, timeout)
        finally:
            self._waiting -= 1

    async def _watch(self) -> None:
        """While receives wait: notice other connections' commits; ends when none waits."""
        last = self._data_version()
        while self._waiting:
            await asyncio.sleep(CHANGE_POLL_SECONDS)
            current = self._data_version()
            if current != last or self.gone():
                last = current
                self.written()

    def _data_version(self) -> int | None:
        """SQLite's counter of other connections' commits (None while the file cannot be read now: a change is
        then reported when it can be again)."""
        try:
            if self._db is None:  # read-write, never create: a file deleted before the first wait is not made again
                self._db = sqlite3.connect(
                    f"{self.path.absolute().as_uri()}?mode=rw", uri=True, timeout=0, isolation_level=None
                )
            return int(self._db.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        if self._db is not None:
            self._db.close()
            self._db = None

"""The embedded queue: one SQLite file with Azure Storage Queue semantics.

It is the default backend, so that the host runs with no cloud account. Every
rule a worker depends on holds as in Azure: a receive hides messages for a
visibility timeout and rotates their pop receipts; update and delete need the
current receipt; the dequeue count rises at each receive; expired messages are
never delivered. Several worker processes may share one file: a receive runs
in a ``BEGIN IMMEDIATE`` transaction, so two receivers never take the same
visible message, and WAL mode lets readers go on meanwhile.

SQLite calls block, so each backend owns one thread that holds its connection
and runs every statement; the event loop only awaits it. Writes are committed
in groups: whatever writes are waiting when the thread is free run in one
transaction, each under its own savepoint so that one failing (a stale pop
receipt) leaves the others alone. A transaction's fixed cost (taking the write
lock, syncing the WAL) dominates a one-row update, so ten thousand lease
renewals a second fit only this way.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from worker.queues.base import (
    NEVER_EXPIRES,
    MessageNotFound,
    PopReceiptMismatch,
    QueueNotFound,
    RawMessage,
    Receipt,
    TransientError,
    UnusableFile,
    check_count,
    check_put,
    check_queue_name,
    check_visibility,
)

T = TypeVar("T")

#: How long a statement waits for another process's write lock before giving up (ms).
BUSY_TIMEOUT_MS = 30_000
#: Most writes committed in one transaction, so that other processes sharing the file get the lock soon.
MAX_GROUP = 256

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
    pop_receipt TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_visibility ON messages (queue, visible, seq);
"""

_COLUMNS = "id, content, dequeue_count, inserted, expires, visible, pop_receipt"


def _when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _row_to_message(row: tuple, with_receipt: bool = True) -> RawMessage:
    id_, content, dequeue_count, inserted, expires, visible, receipt = row
    return RawMessage(
        id=id_,
        content=content,
        dequeue_count=dequeue_count,
        insertion_time=_when(inserted),  # type: ignore[arg-type]
        expiration_time=_when(expires),
        time_next_visible=_when(visible),
        pop_receipt=receipt if with_receipt else None,
    )


@dataclass(eq=False)
class _Write:
    """One write waiting for a group commit, and the future its caller awaits on ``loop``."""

    work: Callable[[sqlite3.Connection], object]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future

    def settle(self, ok: bool, value: object) -> None:
        """On the caller's loop: hand over the result (a caller that stopped waiting is skipped)."""
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

    Checked before SQLite opens it, so that a file of something else is refused with its path, not written over.
    """
    if path.is_dir():
        return f"embedded queue file {path} is a directory"
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"embedded queue file {path} cannot be read: {exc.strerror or exc}"
    if head and head != SQLITE_HEADER:
        return f"embedded queue file {path} is not a SQLite database"
    return None


class SqliteBackend:
    """Queues in one SQLite file; implements :class:`worker.queues.base.QueueBackend`."""

    #: Visibility times are kept to the microsecond.
    visibility_resolution = 0.0

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"sqlite-{self.path.name}")
        self._db: sqlite3.Connection | None = None
        #: Writes waiting for the next group commit, and whether a commit loop is queued or running.
        self._writes: list[_Write] = []
        self._writes_lock = threading.Lock()
        self._committing = False

    def __repr__(self) -> str:
        return f"SqliteBackend({str(self.path)!r})"

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            if problem := file_problem(self.path):
                raise UnusableFile(problem)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            try:
                db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                self._enable_wal(db)
                db.execute("PRAGMA synchronous = NORMAL")
                db.executescript(_SCHEMA)
            except sqlite3.DatabaseError as exc:
                db.close()
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise
                raise UnusableFile(f"embedded queue file {self.path} cannot be used: {exc}") from None
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

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
        item = _Write(work, loop, loop.create_future())
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
                item.loop.call_soon_threadsafe(item.settle, ok, value)

    def _commit(self, group: list[_Write]) -> list[tuple[bool, object]]:
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
        check_queue_name(queue)
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
        self, queue: str, content: str, *, visibility_timeout: float = 0, time_to_live: float | None = None
    ) -> RawMessage:
        ttl = check_put(content, visibility_timeout, time_to_live)

        def work(db: sqlite3.Connection) -> RawMessage:
            self._require_queue(db, queue)
            now = time.time()
            expires = None if ttl == NEVER_EXPIRES else now + ttl
            message_id = str(uuid.uuid4())
            db.execute(
                "INSERT INTO messages (id, queue, content, inserted, expires, visible) VALUES (?, ?, ?, ?, ?, ?)",
                (message_id, queue, content, now, expires, now + visibility_timeout),
            )
            return _row_to_message((message_id, content, 0, now, expires, now + visibility_timeout, None))

        return await self._run(work, write=True)

    async def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[RawMessage]:
        check_count(max_messages)
        check_visibility(visibility_timeout, 1)

        def work(db: sqlite3.Connection) -> list[RawMessage]:
            self._require_queue(db, queue)
            now = time.time()
            db.execute("DELETE FROM messages WHERE queue = ? AND expires <= ?", (queue, now))
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE queue = ? AND visible <= ? ORDER BY seq LIMIT ?",
                (queue, now, max_messages),
            ).fetchall()
            taken = []
            for id_, content, dequeue_count, inserted, expires, _, _ in rows:
                receipt = uuid.uuid4().hex
                visible = now + visibility_timeout
                db.execute(
                    "UPDATE messages SET visible = ?, dequeue_count = ?, pop_receipt = ? WHERE id = ?",
                    (visible, dequeue_count + 1, receipt, id_),
                )
                taken.append(_row_to_message((id_, content, dequeue_count + 1, inserted, expires, visible, receipt)))
            return taken

        return await self._run(work, write=True)

    async def update(self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float) -> Receipt:
        check_visibility(visibility_timeout, 0)

        def work(db: sqlite3.Connection) -> Receipt:
            now = time.time()
            self._held(db, queue, message_id, pop_receipt, now)
            receipt = uuid.uuid4().hex
            db.execute(
                "UPDATE messages SET visible = ?, pop_receipt = ? WHERE id = ?",
                (now + visibility_timeout, receipt, message_id),
            )
            return Receipt(receipt, _when(now + visibility_timeout))  # type: ignore[arg-type]

        return await self._run(work, write=True)

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        def work(db: sqlite3.Connection) -> None:
            self._held(db, queue, message_id, pop_receipt, time.time())
            db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

        await self._run(work, write=True)

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        check_count(max_messages)

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

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._thread, shut)
        self._thread.shutdown(wait=True)

"""An embedded queue file made before messages had properties stays usable: its messages are read as they were
and new ones carry properties, in the file as it is (a column added, nothing rewritten)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from worker.backends.embedded.queues import SqliteBackend

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#: The schema of files made before message properties, as such a file holds it.
BEFORE_PROPERTIES = """
CREATE TABLE queues (name TEXT PRIMARY KEY);
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, queue TEXT NOT NULL, content TEXT NOT NULL,
    inserted REAL NOT NULL, expires REAL, visible REAL NOT NULL, dequeue_count INTEGER NOT NULL DEFAULT 0,
    pop_receipt TEXT
);
CREATE INDEX messages_by_visibility ON messages (queue, visible, seq);
"""


async def test_a_file_from_before_message_properties_is_read_and_takes_them(tmp_path: Path) -> None:
    path = tmp_path / "queues.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(BEFORE_PROPERTIES)
        db.execute("INSERT INTO queues VALUES ('work')")
        db.execute(
            "INSERT INTO messages (id, queue, content, inserted, visible) VALUES ('old-1', 'work', 'old', ?, ?)",
            (time.time(), time.time()),
        )
    db.close()
    backend = SqliteBackend(path)
    try:
        await backend.put("work", "new", properties={"traceparent": TRACEPARENT})
        got = await backend.receive("work", 32, 30)
    finally:
        await backend.close()

    assert [(m.content, dict(m.properties)) for m in got] == [("old", {}), ("new", {"traceparent": TRACEPARENT})]
    assert got[0].id == "old-1"

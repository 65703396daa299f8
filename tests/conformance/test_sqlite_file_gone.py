"""The embedded queue's file deleted or replaced under a running backend (``rm -rf .worker``, ``git clean -xdf``, a
volume swapped).

SQLite goes on writing into the file it opened, which nothing else reads and which vanishes with the last
descriptor: so the backend compares its path with the file it opened and, from the first call after the change,
raises StorageGone naming the file, rather than storing messages nobody will see. A receive waiting on an empty
queue learns it from the change watcher, within one of its polls.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from worker.backends.embedded.files import queue_files
from worker.backends.embedded.queues import SqliteBackend
from worker.backends.queues import StorageGone, TransientError

QUEUE = "orders"
#: A visibility long enough that nothing comes back during a test.
HIDDEN = 30


async def opened(path: Path) -> SqliteBackend:
    """A backend on ``path`` with a queue holding one message: the file is open."""
    backend = SqliteBackend(path)
    await backend.create_queue(QUEUE)
    await backend.put(QUEUE, "before")
    return backend


def remove(path: Path) -> None:
    """Delete the queue file and the files SQLite keeps beside it, as ``rm -rf`` of its folder does."""
    for file in queue_files(path):
        file.unlink(missing_ok=True)


async def test_every_call_after_the_file_is_deleted_raises_storage_gone(tmp_path: Path) -> None:
    """Receive, put and count each fail at once, naming the file and saying it was deleted; none is transient."""
    path = tmp_path / ".worker" / "queue.db"
    backend = await opened(path)
    try:
        shutil.rmtree(path.parent)
        calls = {
            "receive": lambda: backend.receive(QUEUE, 16, HIDDEN),
            "put": lambda: backend.put(QUEUE, "after"),
            "approximate_count": lambda: backend.approximate_count(QUEUE),
            "message_counts": lambda: backend.message_counts(QUEUE),
        }
        for name, call in calls.items():
            with pytest.raises(StorageGone) as raised:
                await call()
            assert not isinstance(raised.value, TransientError), name
            assert str(path) in str(raised.value) and "deleted" in str(raised.value), name
        assert not path.exists(), "the backend made a new file where the old one was deleted"
    finally:
        await backend.close()


async def test_a_file_replaced_by_another_at_the_same_path_raises_storage_gone(tmp_path: Path) -> None:
    """The path now names a new queue file (``worker send`` after the folder was removed, or a restored copy): the
    backend that opened the old one refuses to go on, naming the replacement, and the new file keeps what was sent
    to it for the worker that starts on it."""
    path = tmp_path / "queue.db"
    backend = await opened(path)
    sender = None
    try:
        remove(path)
        sender = await opened(path)  # a new file at the same path, with a message of its own
        await sender.put(QUEUE, "for the next worker")
        for call in (
            lambda: backend.receive(QUEUE, 16, HIDDEN),
            lambda: backend.put(QUEUE, "lost"),
            lambda: backend.approximate_count(QUEUE),
        ):
            with pytest.raises(StorageGone, match="replaced by another file"):
                await call()
        assert sorted(m.content for m in await sender.receive(QUEUE, 16, HIDDEN)) == ["before", "for the next worker"]
    finally:
        await backend.close()
        if sender is not None:
            await sender.close()


async def test_a_file_moved_over_the_path_is_a_replacement(tmp_path: Path) -> None:
    """A copy moved over the path (a restore from a backup, a swapped volume) is another file, though it holds the
    same messages: the running backend would otherwise write into the unlinked original."""
    path = tmp_path / "queue.db"
    backend = await opened(path)
    try:
        copy = tmp_path / "copy.db"
        shutil.copyfile(path, copy)
        copy.replace(path)
        with pytest.raises(StorageGone, match="replaced"):
            await backend.receive(QUEUE, 1, HIDDEN)
    finally:
        await backend.close()


async def test_a_waiting_receive_learns_of_the_deletion_within_a_poll(tmp_path: Path) -> None:
    """A long poll on an empty queue is not left waiting out its whole wait on a file that is gone."""
    path = tmp_path / "queue.db"
    backend = SqliteBackend(path)
    await backend.create_queue(QUEUE)
    try:
        poll = asyncio.ensure_future(backend.receive(QUEUE, 1, HIDDEN, wait=backend.limits.long_poll))
        await asyncio.sleep(0.2)  # a stimulus, not a wait for a condition: the poll is waiting by now
        assert not poll.done()
        remove(path)
        removed = time.monotonic()
        with pytest.raises(StorageGone, match="deleted"):
            await asyncio.wait_for(poll, backend.limits.long_poll / 2)
        assert time.monotonic() - removed < backend.limits.long_poll / 4
    finally:
        await backend.close()


async def test_the_file_left_in_place_is_used_as_before(tmp_path: Path) -> None:
    """The check changes nothing while the file stays: two backends on it share its messages as before."""
    path = tmp_path / "queue.db"
    first = await opened(path)
    second = SqliteBackend(path)
    try:
        assert await second.approximate_count(QUEUE) == 1
        [message] = await second.receive(QUEUE, 1, HIDDEN)
        await first.delete(QUEUE, message.id, message.pop_receipt or "")
        assert await first.approximate_count(QUEUE) == 0
        await first.put(QUEUE, "again")
        assert [m.content for m in await second.receive(QUEUE, 16, HIDDEN)] == ["again"]
    finally:
        await first.close()
        await second.close()

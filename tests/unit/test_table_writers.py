"""The pipeline tables' writers without Spark: the bounded wait for the writer lock, the fence while waiting, and the
removal of versions nobody reads (functions/tables.py). Publishing itself, on Spark: tests/pipeline/test_tables.py."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

import pytest

from functions import tables
from functions.fencing import HeldMessages
from worker.message import QueueMessage
from worker.model import Lease


class BuildRefused(Exception):
    """What a build raises here in place of computing a frame: the publish then ends without Spark."""


def refuse() -> NoReturn:
    raise BuildRefused


def lease(seconds_left: float, message_id: str = "m") -> Lease:
    """A lease a host holds (its clock counts) with ``seconds_left`` before it runs out."""
    taken = Lease(
        backend=None, queue="q", message_id=message_id, pop_receipt="r", expires_at=time.monotonic() + seconds_left
    )
    taken.keeper = object()  # type: ignore[assignment]  # only whether a keeper holds it matters here
    return taken


def held(lease: Lease) -> QueueMessage:
    """The message a handler gets under ``lease``."""
    return QueueMessage(
        id=lease.message_id,
        body=b"{}",
        dequeue_count=1,
        insertion_time=None,
        expiration_time=None,
        time_next_visible=None,
        lease=lease,
    )


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[Path]:
    """A table whose writer lock another writer (a thread of this process, in its build) holds until the test ends."""
    table = tmp_path / "events"
    holding, release = threading.Event(), threading.Event()

    def build() -> NoReturn:
        holding.set()
        release.wait(30)
        raise BuildRefused

    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(tables.publish, table, build, ["day"])
        assert holding.wait(30), "the first writer never took the lock"
        try:
            yield table
        finally:
            release.set()
            with pytest.raises(BuildRefused):
                writer.result(30)


def test_a_writer_gives_up_on_a_held_lock_after_its_wait_naming_the_holder(held_lock: Path) -> None:
    built = []

    def build() -> NoReturn:
        built.append(True)
        refuse()

    started = time.monotonic()
    with pytest.raises(tables.LockTimeout, match=f"held by pid {os.getpid()} on "):
        tables.publish(held_lock, build, ["day"], tables.Writer(lock_wait=timedelta(seconds=0.3)))
    assert 0.3 <= time.monotonic() - started < 5
    assert not built, "nothing may be computed without the lock"
    assert not list(held_lock.glob("v-*"))


def test_a_waiting_writer_whose_message_is_lost_stops_waiting_at_once(held_lock: Path) -> None:
    taken = lease(60, "m-1")
    taken.lost.set()  # what the lease scheduler does when a renewal finds the message taken
    started = time.monotonic()
    with pytest.raises(tables.StaleWriter, match="lease lost: .* m-1"):
        tables.publish(
            held_lock, refuse, ["day"], tables.Writer(HeldMessages([held(taken)]), lock_wait=timedelta(minutes=5))
        )
    assert time.monotonic() - started < 5


def test_a_message_is_held_until_its_lease_is_lost_cancelled_or_run_out_by_the_clock() -> None:
    assert held(lease(60)).holds_lease(1.0)
    assert not held(lease(0.5)).holds_lease(1.0), "less left than the margin"
    assert not held(lease(-3)).holds_lease(), "run out while paused, though no renewal has said so yet"
    lost, cancelled = lease(60), lease(60)
    lost.lost.set()
    cancelled.cancelled.set()
    assert not held(lost).holds_lease() and not held(cancelled).holds_lease()
    detached = QueueMessage(
        id="m", body=b"", dequeue_count=1, insertion_time=None, expiration_time=None, time_next_visible=None
    )
    assert detached.holds_lease(), "a message built outside a host has no lease to lose"


def test_the_next_write_removes_leftovers_at_once_and_retired_versions_after_the_grace(tmp_path: Path) -> None:
    """Even a write that then fails: the removal comes first, under the lock. A version of a table written before
    versions were marked (committed, no schema) is kept for the grace from its folder's time, as it was then."""
    table = tmp_path / "daily_sales"
    names = (
        "current",
        "leftover",
        "committed-leftover",
        "retired-now",
        "retired-long-ago",
        "unmarked-now",
        "unmarked-long-ago",
    )
    versions = {name: table / f"v-{name}" for name in names}
    for folder in versions.values():
        folder.mkdir(parents=True)
    (table / tables.POINTER).write_text("v-current\n", encoding="utf-8")
    for name in ("committed-leftover", "unmarked-now", "unmarked-long-ago"):  # Spark's commit mark
        (versions[name] / "_SUCCESS").touch()
    (versions["committed-leftover"] / tables.SCHEMA).touch()  # killed after its write, before the switch
    (versions["retired-now"] / tables.RETIRED).touch()
    (versions["retired-long-ago"] / tables.RETIRED).touch()
    long_ago = time.time() - 3601
    os.utime(versions["retired-long-ago"] / tables.RETIRED, (long_ago, long_ago))
    os.utime(versions["unmarked-long-ago"], (long_ago, long_ago))  # retired before versions were marked

    with pytest.raises(BuildRefused):
        tables.publish(table, refuse, ["day"], tables.Writer(retired_grace=timedelta(hours=1)))

    assert sorted(table.glob("v-*")) == [versions["current"], versions["retired-now"], versions["unmarked-now"]]
    assert tables.current(table) == versions["current"]

"""The embedded SQLite queue shared by several OS processes.

This is what lets several worker processes share one queue file: a receive
hides what it takes in one ``BEGIN IMMEDIATE`` transaction, so no two
processes ever hold the same message while its lease lasts; and processes
started together on a file that does not exist yet all manage to open it. The
workers here are real processes (``multiprocessing`` with the "spawn" context,
so nothing is inherited from the test process but the arguments), each with
its own connection, started together behind a barrier. Each writes a JSON
report that the test checks."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.backends.embedded.queues import EMBEDDED_LIMITS, SqliteBackend
from worker.backends.queues import QueueError

PROCESSES = 4
MESSAGES = 400
#: Longer than the whole test, so a message is never legitimately delivered twice.
LEASE_SECONDS = 60
#: Batch sizes the workers use, so receives of different sizes interleave.
BATCH_SIZES = [1, 3, 7, EMBEDDED_LIMITS.max_batch]
#: Fresh files the processes open together in the start-up test, and messages each puts in each.
ROUNDS = 30
PUTS_PER_ROUND = 5
#: How long the processes get to start and drain the queue, even on a loaded machine.
DEADLINE_SECONDS = 90


def _drain(path: str, queue: str, worker: int, batch: int, barrier: Any, out: str) -> None:
    """Process entry point: receive until the queue is empty, deleting each message; write what happened to ``out``."""
    asyncio.run(_drain_async(path, queue, worker, batch, barrier, out))


async def _drain_async(path: str, queue: str, worker: int, batch: int, barrier: Any, out: str) -> None:
    backend = SqliteBackend(path)
    received: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        await backend.approximate_count(queue)  # open the connection before the start line
        barrier.wait(DEADLINE_SECONDS)
        while True:
            got = await backend.receive(queue, batch, LEASE_SECONDS)
            if not got:
                # Receives are serialized and no lease can run out during the test, so an empty
                # receive means every message has been taken by some process.
                break
            for n, message in enumerate(got):
                received.append({"id": message.id, "content": message.content, "dequeue_count": message.dequeue_count})
                receipt = message.pop_receipt or ""
                try:
                    if n % 3 == 1:
                        # Renew some leases first, as a long-running handler would.
                        receipt = (await backend.update(queue, message.id, receipt, LEASE_SECONDS)).pop_receipt
                    await backend.delete(queue, message.id, receipt)
                except QueueError as exc:
                    errors.append(f"{message.id}: {type(exc).__name__}: {exc}")
    except Exception as exc:  # reported to the test, which fails on it
        errors.append(f"worker {worker}: {type(exc).__name__}: {exc}")
    finally:
        await backend.close()
        Path(out).write_text(json.dumps({"worker": worker, "received": received, "errors": errors}))


def _open_fresh_files(directory: str, queue: str, worker: int, rounds: int, barrier: Any, out: str) -> None:
    """Process entry point: for each round, open a new file at the same moment as the others and write to it."""
    asyncio.run(_open_fresh_files_async(directory, queue, worker, rounds, barrier, out))


async def _open_fresh_files_async(directory: str, queue: str, worker: int, rounds: int, barrier: Any, out: str) -> None:
    errors: list[str] = []
    for n in range(rounds):
        barrier.wait(DEADLINE_SECONDS)
        backend = SqliteBackend(Path(directory) / f"round-{n}.sqlite3")
        try:
            await backend.create_queue(queue)
            for i in range(PUTS_PER_ROUND):
                await backend.put(queue, f"worker {worker} round {n} message {i}")
        except Exception as exc:  # reported to the test, which fails on it
            errors.append(f"worker {worker} round {n}: {type(exc).__module__}.{type(exc).__name__}: {exc}")
        finally:
            await backend.close()
    Path(out).write_text(json.dumps({"worker": worker, "errors": errors}))


async def _fill(path: Path, queue: str) -> set[str]:
    backend = SqliteBackend(path)
    try:
        await backend.create_queue(queue)
        return {(await backend.put(queue, f"message {i:03d}")).id for i in range(MESSAGES)}
    finally:
        await backend.close()


async def _run_processes(target: Callable[..., None], args: list[tuple[Any, ...]], out_dir: Path) -> list[dict[str, Any]]:
    """Run ``target(*args[i], barrier, out_i)`` in one spawned process per ``args`` entry; return their reports."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    outputs = [out_dir / f"worker-{i}.json" for i in range(len(args))]
    processes = [
        ctx.Process(target=target, args=(*a, barrier, str(out)), name=f"worker-{i}")
        for i, (a, out) in enumerate(zip(args, outputs, strict=True))
    ]
    for p in processes:
        p.start()
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        for p in processes:
            # join blocks: run it off the event loop.
            await asyncio.to_thread(p.join, max(0.0, deadline - time.monotonic()))
        hung = [p.name for p in processes if p.is_alive()]
        assert not hung, f"worker processes still running after {DEADLINE_SECONDS}s: {hung}"
        assert [p.exitcode for p in processes] == [0] * len(processes), "a worker process crashed"
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
                p.join(5)
    return [json.loads(out.read_text()) for out in outputs]


async def test_processes_sharing_a_file_take_each_message_exactly_once(tmp_path: Path, queue_name: str) -> None:
    db = tmp_path / "shared.sqlite3"
    sent = await _fill(db, queue_name)
    assert len(sent) == MESSAGES

    reports = await _run_processes(
        _drain,
        [(str(db), queue_name, i, BATCH_SIZES[i % len(BATCH_SIZES)]) for i in range(PROCESSES)],
        tmp_path,
    )
    received = [m for r in reports for m in r["received"]]
    counts = Counter(m["id"] for m in received)
    twice = {i: n for i, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} messages were received more than once while leased: {list(twice.items())[:5]}"
    errors = [e for r in reports for e in r["errors"]]
    assert not errors, f"workers hit errors: {errors[:10]}"
    assert set(counts) == sent, f"{len(sent - set(counts))} messages were never received"
    assert len(received) == MESSAGES
    assert sorted(m["content"] for m in received) == [f"message {i:03d}" for i in range(MESSAGES)]
    assert all(m["dequeue_count"] == 1 for m in received), "a message was delivered more than once"
    busy = [r["worker"] for r in reports if r["received"]]
    assert len(busy) >= 2, f"only workers {busy} received anything: the processes did not actually compete"

    backend = SqliteBackend(db)
    try:
        assert await backend.approximate_count(queue_name) == 0, "some messages were not deleted"
        assert await backend.peek(queue_name, EMBEDDED_LIMITS.max_batch) == []
    finally:
        await backend.close()


async def test_processes_opening_a_new_file_together_all_succeed(tmp_path: Path, queue_name: str) -> None:
    """Workers started at once on a file that does not exist yet (the default set-up) must not fail to open it.

    Each round the processes meet at a barrier, then all open the same new file, create the queue and
    put a few messages; several rounds make the race on first opening likely to show.
    """
    files = tmp_path / "files"
    files.mkdir()
    reports = await _run_processes(
        _open_fresh_files, [(str(files), queue_name, i, ROUNDS) for i in range(PROCESSES)], tmp_path
    )
    errors = [e for r in reports for e in r["errors"]]
    assert not errors, f"{len(errors)} opens of a new file failed: {errors[:5]}"

    for n in range(ROUNDS):
        backend = SqliteBackend(files / f"round-{n}.sqlite3")
        try:
            assert await backend.approximate_count(queue_name) == PROCESSES * PUTS_PER_ROUND
        finally:
            await backend.close()

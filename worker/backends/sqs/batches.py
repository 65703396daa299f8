"""Deletes and visibility changes of one queue sent in batches where the host has several at once.

A call goes out at the end of the event loop's turn, with every call of its kind to its queue from that turn.
While :data:`MAX_IN_FLIGHT` requests are under way, new calls wait and go together, :data:`BATCH` a request.
Each caller gets its own entry's result, so one stale receipt fails only its caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

#: Entries a batch request takes (SQS's limit for both calls).
BATCH = 10
#: Requests of one kind to one queue under way at once before further calls wait to go out together: two, so that
#: under load most entries go ten to a request (bench/sqs_throughput.py: fewer requests, less CPU per message).
MAX_IN_FLIGHT = 2

Entry = dict[str, Any]
SendOne = Callable[[str, Entry], Awaitable[None]]
#: Sends entries as one request; returns, entry by entry, None for success or the error for that entry's caller.
SendBatch = Callable[[str, list[Entry]], Awaitable[list[BaseException | None]]]


@dataclass
class _Queue:
    in_flight: int = 0
    waiting: list[tuple[Entry, asyncio.Future[None]]] = field(default_factory=list)
    #: A send of what waits is due at the end of the loop's current turn.
    due: bool = False


class Batcher:
    """One kind of call (delete, or visibility change) to every queue of a backend; used on the event loop only."""

    def __init__(self, send_one: SendOne, send_batch: SendBatch) -> None:
        self._send_one = send_one
        self._send_batch = send_batch
        self._queues: dict[str, _Queue] = {}
        self._flushes: set[asyncio.Task[None]] = set()

    async def submit(self, queue: str, entry: Entry) -> None:
        """Send ``entry``: alone at once, or in the next batch of its queue; raises its own error."""
        state = self._queues.setdefault(queue, _Queue())
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        state.waiting.append((entry, future))
        if not state.due:
            state.due = True
            loop.call_soon(self._turn_ended, queue, state)
        await future

    def _turn_ended(self, queue: str, state: _Queue) -> None:
        state.due = False
        self._next(queue, state)

    def _next(self, queue: str, state: _Queue) -> None:
        """Send what waits, a batch at a time, while there is room."""
        while state.waiting and state.in_flight < MAX_IN_FLIGHT:
            chunk, state.waiting[:BATCH] = state.waiting[:BATCH], []
            state.in_flight += 1
            flush = asyncio.ensure_future(self._flush(queue, state, chunk))
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        if not state.waiting and not state.in_flight and not state.due:
            self._queues.pop(queue, None)

    async def _flush(self, queue: str, state: _Queue, chunk: list[tuple[Entry, asyncio.Future[None]]]) -> None:
        try:
            if len(chunk) == 1:
                results: list[BaseException | None] = [None]
                await self._send_one(queue, chunk[0][0])
            else:
                results = await self._send_batch(queue, [entry for entry, _ in chunk])
        except BaseException as exc:  # the request as a whole: every caller hears it
            results = [exc] * len(chunk)
        finally:
            state.in_flight -= 1
        for (_, future), error in zip(chunk, results, strict=True):
            if future.done():  # its caller has gone
                continue
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
        self._next(queue, state)

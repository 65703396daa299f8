"""When to fetch: one listener per function, as the WebJobs SDK's QueueListener.

A listener receives up to ``batchSize`` messages with the fixed lease, hands
each to the dispatcher at once, and fetches again as soon as its in-flight
count falls to ``newBatchThreshold``. On an empty queue it backs off with
randomized exponential delays up to ``maxPollingInterval``, and starts over at
the next message. A storage error never stops it: it is logged, counted and
backed off like an empty queue.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable

import structlog

from worker.app import FunctionSpec
from worker.config import HostConfig
from worker.dispatcher import Dispatcher
from worker.middleware import Chain
from worker.observability import Metrics
from worker.queues.base import QueueBackend, QueueNotFound

log = structlog.get_logger("worker.listener")

#: Shortest back-off, and the first step of the exponential sequence (as in Functions).
MIN_POLL_DELAY = 0.1


class Backoff:
    """100 ms, 200 ms, 400 ms ... up to ``ceiling``, each with +-20 % jitter."""

    def __init__(self, ceiling: float) -> None:
        self.ceiling = max(ceiling, MIN_POLL_DELAY)
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    def next(self) -> float:
        delay = min(self.ceiling, MIN_POLL_DELAY * 2 ** min(self._attempt, 30))
        self._attempt += 1
        return min(self.ceiling, delay * random.uniform(0.8, 1.2))


class Capacity:
    """In-flight messages and invocations per function, and messages in all, bounded by ``maxInFlight``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._per_function: Counter[str] = Counter()
        self._invocations: Counter[str] = Counter()
        #: Set whenever places are given back; every waiting listener wakes and looks again.
        self._changed = asyncio.Event()

    def in_flight(self, function: str) -> int:
        return self._per_function[function]

    def running(self, function: str) -> int:
        """Invocations of ``function`` held now (received and not completed)."""
        return self._invocations[function]

    async def reserve(self, function: str, threshold: int, want: int, allowed: Callable[[int], int] | None = None) -> int:
        """Wait until ``function`` holds no more than ``threshold``, the process has room and ``allowed`` gives some.

        ``allowed(running invocations)`` is what middleware lets the function
        receive now (maxConcurrency). The room is taken before the receive (the
        check and the taking have no await between them), so that listeners
        receiving at the same time cannot together pass ``maxInFlight``; the
        caller gives back what the receive did not fill.
        """
        while True:
            if self._per_function[function] <= threshold and self.total < self.limit:
                room = min(want, self.limit - self.total)
                if allowed is not None:
                    room = min(room, allowed(self._invocations[function]))
                if room > 0:
                    break
            self._changed.clear()
            await self._changed.wait()
        self._per_function[function] += room
        self.total += room
        return room

    def started(self, function: str) -> None:
        """One invocation of ``function`` was dispatched with places reserved before."""
        self._invocations[function] += 1

    def give_back(self, function: str, count: int = 1, invocations: int = 0) -> None:
        """``count`` reserved places (and ``invocations`` invocations) are free again."""
        if count or invocations:
            self._per_function[function] -= count
            self._invocations[function] -= invocations
            self.total -= count
            self._changed.set()


class Listener:
    def __init__(
        self,
        function: FunctionSpec,
        backend: QueueBackend,
        config: HostConfig,
        dispatcher: Dispatcher,
        capacity: Capacity,
        metrics: Metrics,
        stopping: asyncio.Event,
        middleware: Chain,
    ) -> None:
        """``config`` is the function's own settings (:meth:`HostConfig.for_function`)."""
        self.function = function
        self.middleware = middleware
        self.backend = backend
        self.config = config
        self.dispatcher = dispatcher
        self.capacity = capacity
        self.metrics = metrics
        self.stopping = stopping
        self._wake = asyncio.Event()
        self._log = log.bind(function=function.name, queue=function.queue_name)
        #: Why the last storage call failed, until one succeeds again (for /readyz when storage does not answer).
        self.last_error: str | None = None

    def wake(self) -> None:
        """Cut a back-off short: something was just written to this queue."""
        self._wake.set()

    async def run(self) -> None:
        """Fetch and dispatch until ``stopping`` is set. Never raises for storage trouble."""
        backoff = Backoff(self.config.max_polling_interval)
        name = self.function.name
        while not self.stopping.is_set():
            room = await self._wait_for_room()
            if room == 0:
                return
            try:
                with self.metrics.receive_seconds.labels(name).time():
                    messages = await self.backend.receive(self.function.queue_name, room, self.config.lease_duration)
                self.last_error = None
            except QueueNotFound:
                # Deleted under the host, or never created because storage was down at start.
                self._log.warning("trigger queue does not exist; creating it")
                await self._create_queue()
                messages = []
            except Exception as exc:
                self.metrics.inc("storage_errors", name)
                self.last_error = str(exc) or type(exc).__name__
                self._log.error("receive failed; backing off", error=f"{type(exc).__name__}: {exc}")
                messages = []
            self.capacity.give_back(name, room - len(messages))
            if messages:
                backoff.reset()
                self.middleware.after_receive(self.function, len(messages))
                batches = [messages] if self.function.many else [[raw] for raw in messages]
                for batch in batches:
                    self.capacity.started(name)
                    self.dispatcher.dispatch(self.function, self.config, self.backend, batch,
                                             self._give_back(len(batch)))
                continue
            await self._sleep(backoff.next())

    async def _create_queue(self) -> None:
        try:
            await self.backend.create_queue(self.function.queue_name)
        except Exception as exc:
            self.metrics.inc("storage_errors", self.function.name)
            self.last_error = str(exc) or type(exc).__name__
            self._log.error("creating the trigger queue failed; backing off", error=f"{type(exc).__name__}: {exc}")

    def _allowed(self, running: int) -> int:
        """What middleware (maxConcurrency) lets this function receive now, given its running invocations."""
        return self.middleware.receive_limit(self.function, self.config, running, self.config.batch_size)

    def _give_back(self, count: int) -> Callable[[], None]:
        """What an invocation of ``count`` messages calls when it is completed."""
        return lambda: self.capacity.give_back(self.function.name, count, invocations=1)

    async def _wait_for_room(self) -> int:
        """Room for the next receive, or 0 when the host is stopping."""
        room = asyncio.ensure_future(
            self.capacity.reserve(self.function.name, self.config.new_batch_threshold, self.config.batch_size,
                                  self._allowed)
        )
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({room, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not room.done():
            room.cancel()
            return 0
        if self.stopping.is_set():
            self.capacity.give_back(self.function.name, room.result())
            return 0
        return room.result()

    async def _sleep(self, seconds: float) -> None:
        """Back off for ``seconds``, or less if woken or stopping."""
        self._wake.clear()
        wake = asyncio.ensure_future(self._wake.wait())
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({wake, stop}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        wake.cancel()
        stop.cancel()

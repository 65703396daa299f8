"""When to fetch: one listener per function, as the WebJobs SDK's QueueListener.

It receives up to ``batchSize``, and again when in-flight falls to ``newBatchThreshold``.
An empty queue is long-polled where the backend can wait, else backed off up to ``maxPollingInterval``.
Transient storage errors back off like an empty queue; :class:`StorageGone` ends the listener.
Full batches add receives (up to ``maxInFlight / batchSize``); each reserves its room first.
A long poll is never cut (:meth:`Listener._call`); it holds one place meanwhile.
While completions on its storage fail (:mod:`worker.runtime.backpressure`), it starts no receive.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from worker.backends.queues import OverLimit, QueueBackend, QueueNotFound, RawMessage, StorageGone
from worker.backends.releasing import release_now
from worker.middleware import Chain
from worker.model import FunctionSpec
from worker.observability.metrics import Metrics
from worker.runtime.backpressure import StoreTrouble
from worker.runtime.dispatcher import Dispatcher
from worker.settings.config import FunctionOptions

#: The function option the listener reads (see :attr:`worker.Middleware.function_options`).
FUNCTION_OPTIONS = {
    "channel": "channel='name': receive from that channel of the queue only, where the backend has "
    "channels (OCI Queue); refused at start elsewhere",
    "batching_window": "batching_window=seconds: with cardinality='many', a batch gathers further "
    "receives until batchSize or this long after its first message (Lambda's "
    "MaximumBatchingWindowInSeconds)",
}

log = structlog.get_logger("worker.runtime.listener")

#: Shortest back-off, and the first step of the exponential sequence (as in Functions).
MIN_POLL_DELAY = 0.1
#: Most receives one function keeps in flight while its queue returns full batches.
MAX_PIPELINE = 8


class Backoff:
    """100 ms, 200 ms, 400 ms ... up to ``ceiling``, each with +-20 % jitter."""

    def __init__(self, ceiling: float) -> None:
        self.ceiling = max(ceiling, MIN_POLL_DELAY)
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    def next(self) -> float:
        delay = min(self.ceiling, MIN_POLL_DELAY * 2.0 ** min(self._attempt, 30))
        self._attempt += 1
        return min(self.ceiling, delay * random.uniform(0.8, 1.2))


class Capacity:
    """In-flight messages and invocations per function, and messages in all, bounded by ``maxInFlight``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._per_function: Counter[str] = Counter()
        self._invocations: Counter[str] = Counter()
        #: Receives in progress per function, and the room they reserved.
        self._receiving: Counter[str] = Counter()
        self._receiving_room: Counter[str] = Counter()
        #: Set when places given back may let a waiting listener receive: it wakes and looks again.
        self._changed = asyncio.Event()
        #: The listeners waiting for room, by function, and each such function's ``newBatchThreshold``.
        self._waiting: Counter[str] = Counter()
        self._thresholds: dict[str, int] = {}
        #: Long polls holding room, each with the event that asks it to give the room back.
        self._long_polls: dict[asyncio.Event, str] = {}
        #: Functions waiting for room because the process has none left.
        self._starved: Counter[str] = Counter()

    def in_flight(self, function: str) -> int:
        return self._per_function[function]

    async def reserve(self, function: str, threshold: int, want: int, allowed: Callable[[], int] | None = None) -> int:
        """Wait until ``function`` holds no more than ``threshold``, the process has room and ``allowed`` gives some.

        ``allowed()`` is what middleware lets the function receive now
        (maxConcurrency), read again whenever places given back leave room. The room is taken before the receive (the
        check and the taking have no await between them), so that listeners
        receiving at the same time cannot together pass ``maxInFlight``; the
        caller gives back what the receive did not fill.
        """
        while True:
            if self._per_function[function] <= threshold and self.total < self.limit:
                room = min(want, self.limit - self.total)
                if allowed is not None:
                    room = min(room, allowed())
                if room > 0:
                    break
            starved = self.total >= self.limit
            if starved:  # room held by idle long polls of other functions is asked back
                self._starved[function] += 1
                for preempt, holder in self._long_polls.items():
                    if holder != function:
                        preempt.set()
            self._changed.clear()
            self._waiting[function] += 1
            self._thresholds[function] = threshold
            try:
                await self._changed.wait()
            finally:
                self._waiting[function] -= 1
                if starved:
                    self._starved[function] -= 1
        self._per_function[function] += room
        self.total += room
        self._receiving[function] += 1
        self._receiving_room[function] += room
        return room

    def received(self, function: str, room: int) -> None:
        """A receive that reserved ``room`` has returned (what it did not fill is given back separately)."""
        self._receiving[function] -= 1
        self._receiving_room[function] -= room

    def running(self, function: str, *, batches: bool) -> int:
        """Invocations of ``function`` held now, and those the receives in progress may start.

        A receive of ``cardinality="many"`` (``batches``) starts one invocation; otherwise one per message.
        """
        pending = self._receiving[function] if batches else self._receiving_room[function]
        return self._invocations[function] + pending

    def recheck(self) -> None:
        """Listeners waiting for room look again: what middleware allows them may have risen."""
        self._changed.set()

    def long_poll(self, function: str) -> asyncio.Event:
        """A long poll of ``function`` begins, holding room; the event is set if another function needs the room."""
        preempt = asyncio.Event()
        self._long_polls[preempt] = function
        if any(n for name, n in self._starved.items() if name != function):
            preempt.set()  # another function already waits for room: do not hold it
        return preempt

    def take(self, function: str, want: int, allowed: Callable[[], int]) -> int:
        """Room for up to ``want`` messages now, without waiting (0 if there is none): for what a long poll brings
        after it gave its place back."""
        room = max(0, min(want, self.limit - self.total, allowed()))
        self._per_function[function] += room
        self.total += room
        return room

    def long_poll_done(self, preempt: asyncio.Event) -> None:
        self._long_polls.pop(preempt, None)

    def started(self, function: str) -> None:
        """One invocation of ``function`` was dispatched with places reserved before."""
        self._invocations[function] += 1

    def give_back(self, function: str, count: int = 1, invocations: int = 0) -> None:
        """``count`` reserved places (and ``invocations`` invocations) are free again."""
        if count or invocations:
            self._per_function[function] -= count
            self._invocations[function] -= invocations
            self.total -= count
            # Only when a waiting listener's function is at its threshold now, with room in the process: else it would
            # wake to wait again, once for each message completed.
            if self.total < self.limit:
                for name, n in self._waiting.items():  # a loop, not any(): no generator made per message
                    if n and self._per_function[name] <= self._thresholds[name]:
                        self._changed.set()
                        break


@dataclass
class _Held:
    """The room a receive holds: what it reserved, or 0 once a long poll gave its place back."""

    room: int


class Listener:
    def __init__(
        self,
        function: FunctionSpec,
        backend: QueueBackend,
        options: FunctionOptions,
        dispatcher: Dispatcher,
        capacity: Capacity,
        metrics: Metrics,
        stopping: asyncio.Event,
        middleware: Chain,
        trouble: StoreTrouble,
    ) -> None:
        """``options`` are the function's own (:meth:`HostConfig.for_function`); ``trouble`` says when
        completions on ``backend`` fail, and receiving must wait."""
        self.function = function
        self.trouble = trouble
        self.middleware = middleware
        self.backend = backend
        self.options = options
        self.dispatcher = dispatcher
        self.capacity = capacity
        self.metrics = metrics
        self.stopping = stopping
        self._wake = asyncio.Event()
        self._log = log.bind(function=function.name, queue=function.queue_name)
        #: Why the last storage call failed, until one succeeds again (for /readyz when storage does not answer).
        self.last_error: str | None = None
        #: Receives wanted at once now (1 .. _most), and the condition parked receivers wait on.
        self._most = max(1, min(MAX_PIPELINE, capacity.limit // options.batch_size))
        self._receivers = 1
        self._more = asyncio.Condition()
        #: The last long poll gave its room back to another function.
        self._preempted = False
        #: Since when receives fail (monotonic), and how many have, until one succeeds: one outage, logged twice.
        self._failing_since: float | None = None
        self._failed_receives = 0
        #: How long a batch of a ``cardinality="many"`` function gathers receives (0: a batch is one receive).
        self._window = float(function.extra("batching_window") or 0) if function.many else 0.0

    def wake(self) -> None:
        """Cut a back-off short: something was just written to this queue."""
        self._wake.set()

    async def run(self) -> None:
        """Fetch and dispatch until ``stopping`` is set. Never raises for storage trouble that may pass; raises
        StorageGone, which cannot."""
        extra = [
            asyncio.create_task(self._pipelined(index), name=f"receiver-{self.function.name}-{index}")
            for index in range(1, self._most)
        ]
        # A middleware that held receives back and now allows them says so (wake_listeners): room is looked at again.
        unwatch = self.middleware.watch_limits(self.capacity.recheck)
        try:
            await self._first()
        finally:
            unwatch()
            for task in extra:
                task.cancel()
            await asyncio.gather(*extra, return_exceptions=True)

    async def _first(self) -> None:
        """The receiver that always runs: full batches while messages come, then one long poll (or back-off).

        A long poll holds one place of ``maxInFlight``, not a batch, so idle
        functions waiting together leave the room to busy ones; the message
        that ends it is dispatched and a full receive follows at once.
        """
        backoff = Backoff(self.options.max_polling_interval)
        wait = self.backend.limits.long_poll
        busy = True
        while not self.stopping.is_set():
            long_poll = wait > 0 and not busy
            room = await self._wait_for_room(1 if long_poll else self.options.batch_size)
            if room == 0:
                return
            self._wake.clear()  # a wake from now on is for a message this receive may not see
            messages, failed = await self._receive(room, wait if long_poll else 0)
            busy = bool(messages)
            if messages:
                backoff.reset()
            elif failed or wait <= 0 or self._preempted:
                # Polling with back-off: a backend that cannot wait, storage trouble, or room too short to share
                # (this long poll was asked to give its place to another function, which may ask again).
                await self._sleep(backoff.next())

    async def _pipelined(self, index: int) -> None:
        """A further receiver, at work only while full batches keep coming (while ``index`` < receivers wanted)."""
        while not self.stopping.is_set():
            async with self._more:
                await self._more.wait_for(lambda: self._receivers > index)
            room = await self._wait_for_room(self.options.batch_size)
            if room == 0:
                return
            await self._receive(room, 0)

    async def _receive(self, room: int, wait: float) -> tuple[list[RawMessage], bool]:
        """One receive of up to ``room`` (reserved) messages, dispatched; returns them and whether storage failed."""
        held = _Held(room)
        messages, failed = await self._fetch(held, wait)
        messages = await self._fit(held, messages)
        if messages and self._window > 0 and len(messages) < self.options.batch_size:
            messages = await self._gather(messages)
        if messages:
            self._dispatch(messages)
        if wait <= 0:
            await self._pace(full=len(messages) >= room)
        return messages, failed

    async def _fetch(self, held: _Held, wait: float) -> tuple[list[RawMessage], bool]:
        """The receive's call, and what its failure means: the messages, and whether storage failed. Raises only
        StorageGone, after giving the room back."""
        started = time.monotonic()
        try:
            messages = await self._call(held, wait)
        except QueueNotFound as exc:  # deleted under the host, or never created because storage was down at start
            await self._missing_queue(exc)
        except StorageGone:  # the queue's file was deleted or replaced: no back-off helps, the process must restart
            if held.room:
                self.capacity.received(self.function.name, held.room)
                self.capacity.give_back(self.function.name, held.room)
            raise
        except OverLimit as exc:  # the service's limit of messages in flight: passes as held ones complete
            self.last_error = str(exc)
            self._log.warning("receive held back by the service's limit; backing off", error=str(exc))
        except Exception as exc:
            self._receive_failed(exc)
        else:
            self._receives_work()
            if messages or wait <= 0:
                self.metrics.receive_seconds.observe(self.function.name, time.monotonic() - started)
            return messages, False
        return [], True

    async def _missing_queue(self, exc: QueueNotFound) -> None:
        """The trigger queue does not exist: created where the service creates queues, else said and backed off."""
        if self.backend.capabilities.creates_queues:
            self._log.warning("trigger queue does not exist; creating it")
            await self._create_queue()
        else:
            self.last_error = str(exc)
            self._log.error(
                "trigger queue does not exist, and this host does not create queues there; backing off", error=str(exc)
            )

    def _receive_failed(self, exc: Exception) -> None:
        """A receive failed for a reason that may pass: counted, and said once per outage (then at debug)."""
        self.metrics.inc("storage_errors", self.function.name)
        self.last_error = str(exc) or type(exc).__name__
        self._failed_receives += 1
        if self._failing_since is None:  # said once per outage, and once more when it ends, with the count
            self._failing_since = time.monotonic()
            self._log.error("receive failed; backing off", error=f"{type(exc).__name__}: {exc}")
        else:
            self._log.debug(
                "receive failed again; backing off",
                failed_receives=self._failed_receives,
                error=f"{type(exc).__name__}: {exc}",
            )

    def _receives_work(self) -> None:
        """A receive succeeded: an outage that was said ends, with its count and length."""
        self.last_error = None
        if self._failing_since is not None:
            self._log.info(
                "receives work again",
                failed_receives=self._failed_receives,
                outage_seconds=round(time.monotonic() - self._failing_since, 3),
            )
            self._failing_since, self._failed_receives = None, 0

    async def _fit(self, held: _Held, messages: list[RawMessage]) -> list[RawMessage]:
        """The messages the room holds: the receive's room is settled, and what it did not fill given back. A long
        poll that gave its place back meanwhile keeps what fits now and releases the rest."""
        name = self.function.name
        if held.room:
            self.capacity.received(name, held.room)
        elif messages:
            held.room = self.capacity.take(name, len(messages), self._allowed)
            await self._release(messages[held.room :])
            messages = messages[: held.room]
        self.capacity.give_back(name, held.room - len(messages))
        return messages

    def _dispatch(self, messages: list[RawMessage]) -> None:
        """Hand what a receive brought to the dispatcher: one batch, or one invocation per message."""
        self.middleware.after_receive(self.function, len(messages))
        batches = [messages] if self.function.many else [[raw] for raw in messages]
        for batch in batches:
            self.capacity.started(self.function.name)
            self.dispatcher.dispatch(self.function, self.options, self.backend, batch, self._give_back(len(batch)))

    async def _call(self, held: _Held, wait: float) -> list[RawMessage]:
        """The backend's receive of up to ``held.room`` messages.

        A long poll (``wait`` > 0) that another function asks its room back from gives it back at once
        (``held.room`` becomes 0) and is not cancelled: the service may hand messages to a request whose client
        has hung up, and those would stay hidden for the whole lease with a delivery counted. Only stopping
        cancels a long poll; the backend then gives back what the poll takes (``QueueBackend.receive``).
        """
        receive = self.backend.receive(
            self.function.queue_name,
            held.room,
            self.options.lease_duration,
            wait=wait,
            channel=self.function.extras.get("channel"),
        )
        if wait <= 0:
            return await receive
        name = self.function.name
        call = asyncio.ensure_future(receive)
        preempt = self.capacity.long_poll(name)
        stop = asyncio.ensure_future(self.stopping.wait())
        asked = asyncio.ensure_future(preempt.wait())
        try:
            await asyncio.wait({call, stop, asked}, return_when=asyncio.FIRST_COMPLETED)
            if asked.done() and not call.done() and not stop.done():
                self.capacity.received(name, held.room)
                self.capacity.give_back(name, held.room)
                held.room = 0
                await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.capacity.long_poll_done(preempt)
            stop.cancel()
            asked.cancel()
        self._preempted = preempt.is_set() and not self.stopping.is_set()
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            return []
        return call.result()

    async def _gather(self, messages: list[RawMessage]) -> list[RawMessage]:
        """More of a batch, until batchSize or the batching window after its first message: each further receive
        takes the room it needs then, without waiting for any, and waits on the service for what is left of the
        window. Storage trouble or stopping ends the batch as it is."""
        name = self.function.name
        deadline = time.monotonic() + self._window
        while len(messages) < self.options.batch_size and not self.stopping.is_set():
            left = deadline - time.monotonic()
            room = self.capacity.take(name, self.options.batch_size - len(messages), self._allowed) if left > 0 else 0
            if room == 0:
                break
            got: list[RawMessage] = []
            wait = min(left, self.backend.limits.long_poll)
            call = asyncio.ensure_future(
                self.backend.receive(
                    self.function.queue_name,
                    room,
                    self.options.lease_duration,
                    wait=wait,
                    channel=self.function.extras.get("channel"),
                )
            )
            stop = asyncio.ensure_future(self.stopping.wait())
            try:
                await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
                if not call.done():  # stopping: the backend gives back what the cancelled receive brings
                    call.cancel()
                    await asyncio.gather(call, return_exceptions=True)
                    break
                got = call.result()
            except Exception as exc:  # the batch goes as it is; the next receive meets the trouble and says so
                self._log.debug("receive for a batching window failed", error=f"{type(exc).__name__}: {exc}")
                break
            finally:
                stop.cancel()
                self.capacity.give_back(name, room - len(got))
            messages = [*messages, *got]
            if not got and wait <= 0:  # a service that answers at once: a short pause before asking again
                await self._sleep(min(left, MIN_POLL_DELAY))
        return messages

    async def _release(self, messages: list[RawMessage]) -> None:
        """Make messages this host has no room for visible again at once, for any worker to take."""
        await release_now(
            self.backend,
            self.function.queue_name,
            messages,
            "messages a long poll brought after giving its room away",
            self._log,
        )

    async def _pace(self, *, full: bool) -> None:
        """One more receiver after a full batch (up to the most), back to one after a partial one."""
        wanted = min(self._most, self._receivers + 1) if full else 1
        if wanted != self._receivers:
            self._receivers = wanted
            async with self._more:
                self._more.notify_all()

    async def _create_queue(self) -> None:
        try:
            await self.backend.create_queue(self.function.queue_name)
        except Exception as exc:
            self.metrics.inc("storage_errors", self.function.name)
            self.last_error = str(exc) or type(exc).__name__
            self._log.error("creating the trigger queue failed; backing off", error=f"{type(exc).__name__}: {exc}")

    def _allowed(self) -> int:
        """What middleware (maxConcurrency) lets this function receive now, given its running invocations."""
        running = self.capacity.running(self.function.name, batches=self.function.many)
        return self.middleware.receive_limit(self.function, self.options, running, self.options.batch_size)

    def _give_back(self, count: int) -> Callable[[], None]:
        """What an invocation of ``count`` messages calls when it is completed."""
        return lambda: self.capacity.give_back(self.function.name, count, invocations=1)

    async def _wait_for_room(self, want: int) -> int:
        """Room for the next receive (at most ``want``) while no completion on this storage fails; 0 when stopping.

        Trouble that begins while the room is awaited sends the room back: the receive would follow at once.
        """
        while True:
            if not await self._wait_until_settled():
                return 0
            room = await self._reserve(want)
            if room == 0 or not self.trouble.holding(self.backend):
                return room
            self.capacity.received(self.function.name, room)
            self.capacity.give_back(self.function.name, room)

    async def _wait_until_settled(self) -> bool:
        """Wait while completions on this listener's storage fail; False when the host stops meanwhile."""
        cleared = self.trouble.cleared(self.backend)
        if cleared.is_set():
            return True
        settled = asyncio.ensure_future(cleared.wait())
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({settled, stop}, return_when=asyncio.FIRST_COMPLETED)
        settled.cancel()
        stop.cancel()
        return not self.stopping.is_set()

    async def _reserve(self, want: int) -> int:
        """Room for the next receive (at most ``want``), or 0 when the host is stopping."""
        room = asyncio.ensure_future(
            self.capacity.reserve(self.function.name, self.options.new_batch_threshold, want, self._allowed)
        )
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({room, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not room.done():
            room.cancel()
            return 0
        if self.stopping.is_set():
            self.capacity.received(self.function.name, room.result())
            self.capacity.give_back(self.function.name, room.result())
            return 0
        return room.result()

    async def _sleep(self, seconds: float) -> None:
        """Back off for ``seconds``, or less if woken (also by a wake during the last receive) or stopping."""
        wake = asyncio.ensure_future(self._wake.wait())
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({wake, stop}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        wake.cancel()
        stop.cancel()

"""From received messages to a finished invocation: decode, call the handler, hand the results to completion.

Every message starts at once, as in Functions. Async handlers run on the event
loop; sync handlers take one of ``handlerThreads`` threads and never block it.
A sync message waiting for a thread has not started: at shutdown it is
released at once, while started handlers get the drain time to finish.

A function with ``cardinality="many"`` gets the whole received batch in one
invocation. Each message keeps its own lease and its own outcome: messages
that cannot be decoded go to poison without failing the rest, and the handler
may fail single messages with ``message.fail(reason)``.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from worker import expressions
from worker.app import FunctionSpec
from worker.blob_bindings import read_inputs
from worker.completion import CompletionProcessor, Finished, Outcome, Result
from worker.config import HostConfig
from worker.context import Context, RetryContext
from worker.encoding import MessageDecodeError, decode
from worker.lease import Lease, LeaseScheduler
from worker.message import QueueMessage
from worker.observability import Metrics
from worker.outputs import Out, send_outputs
from worker.queues.base import QueueBackend, RawMessage
from worker.storage import Storage

log = structlog.get_logger("worker.dispatcher")

LEASE_LOST = "lease lost"
SHUTDOWN = "shutdown"

#: The invocation whose handler is running in this context (copied into handler threads).
current_invocation: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "current_invocation", default=None
)


@dataclass(eq=False)
class Delivery:
    """One received message of an invocation, with its lease and, once decided, its result."""

    raw: RawMessage
    lease: Lease
    message: QueueMessage | None = None
    result: Result | None = None


@dataclass(eq=False)
class Invocation:
    """One run of one function for one message (or, with cardinality many, one batch)."""

    function: FunctionSpec
    backend: QueueBackend
    deliveries: list[Delivery]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: bool = False
    cancel_reason: str | None = None
    handler_task: asyncio.Task[Any] | None = None
    #: The whole invocation: handler, then completion.
    task: asyncio.Task[None] | None = None
    #: Called when the host gives up on the invocation, e.g. to interrupt the Spark jobs it started.
    on_interrupt: list[Callable[[], None]] = field(default_factory=list)
    #: Called in the handler's thread when it returns, to clear what the handler left on the thread.
    thread_cleanup: list[Callable[[], None]] = field(default_factory=list)
    #: What a handler with a ``context`` parameter gets.
    context: Context | None = None

    def interrupt(self) -> None:
        """Tell the handler to stop: set every message's ``cancelled`` event and run ``on_interrupt``."""
        for delivery in self.deliveries:
            delivery.lease.cancelled.set()
        for hook in self.on_interrupt:
            try:
                hook()
            except Exception as exc:  # an interrupt that fails must not stop the others
                log.warning("interrupt hook failed", invocation_id=self.id, error=f"{type(exc).__name__}: {exc}")

    def cancel(self, reason: str) -> None:
        """Give up on the invocation: its messages are released (async handlers are also cancelled)."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.interrupt()
        if self.handler_task is not None:
            self.handler_task.cancel()


class Dispatcher:
    def __init__(
        self,
        config: HostConfig,
        scheduler: LeaseScheduler,
        completion: CompletionProcessor,
        metrics: Metrics,
        storage: Storage,
    ) -> None:
        """``storage`` opens the queues and blob stores that bindings' connections name."""
        self.config = config
        self.storage = storage
        self.scheduler = scheduler
        self.completion = completion
        self.metrics = metrics
        self.invocations: set[Invocation] = set()
        self._threads = ThreadPoolExecutor(config.handler_threads, thread_name_prefix="handler")
        self._thread_slots = asyncio.Semaphore(config.handler_threads)
        self._busy_threads = 0
        self._threads_idle = asyncio.Event()
        self._threads_idle.set()
        #: Threads still running a handler the host gave up on (timed out or cancelled); Python cannot stop them.
        self._abandoned: set[Future[None]] = set()

    def dispatch(
        self, function: FunctionSpec, backend: QueueBackend, raws: list[RawMessage], on_done: Callable[[], None]
    ) -> Invocation:
        """Take the leases on ``raws``, start their invocation, and call ``on_done`` once all are completed.

        One message per invocation, or a whole batch for a ``cardinality="many"`` function.
        """
        inv = Invocation(function, backend, [])
        inv.deliveries = [
            Delivery(raw, Lease(backend, function.queue_name, raw.id, raw.pop_receipt, function=function.name,
                                dequeue_count=raw.dequeue_count, invocation_id=inv.id))
            for raw in raws
        ]
        deliveries = inv.deliveries
        for delivery in deliveries:
            if not function.many:  # a batch goes on without a message whose lease was lost
                delivery.lease.on_lost = lambda: inv.cancel(LEASE_LOST)
            self.scheduler.hold(delivery.lease)
        self.invocations.add(inv)
        self.metrics.inc("received", function.name, len(raws))

        def finished(_: asyncio.Task[None]) -> None:
            self.invocations.discard(inv)
            on_done()

        inv.task = asyncio.create_task(self._process(inv), name=f"invocation-{inv.id}")
        inv.task.add_done_callback(finished)
        return inv

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until every invocation is completed, or ``timeout`` passes; True when none is left."""
        tasks = {inv.task for inv in self.invocations if inv.task is not None}
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return not self.invocations

    def release_unstarted(self) -> int:
        """Shutdown: give back every message whose handler has not started; returns how many."""
        waiting = [inv for inv in self.invocations if not inv.started]
        for inv in waiting:
            inv.cancel(SHUTDOWN)
        return sum(len(inv.deliveries) for inv in waiting)

    def cancel_all(self, reason: str) -> None:
        for inv in list(self.invocations):
            inv.cancel(reason)

    @property
    def threads_busy(self) -> int:
        """Sync handlers still running in a thread, including ones the host has given up on."""
        return self._busy_threads

    @property
    def threads_abandoned(self) -> int:
        """Threads held by handlers the host gave up on; they come back only when those handlers return."""
        return len(self._abandoned)

    def stuck(self) -> str | None:
        """Why the host can no longer run sync handlers (every thread held by an abandoned one), or None."""
        limit = self.config.handler_threads
        if len(self._abandoned) < limit:
            return None
        return (f"every handler thread ({limit}) runs a handler that ran past functionTimeout or was cancelled; "
                "only a restart frees them")

    async def wait_threads(self, timeout: float) -> bool:
        """Give cancelled sync handlers ``timeout`` to notice ``message.cancelled`` and return."""
        try:
            await asyncio.wait_for(self._threads_idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _process(self, inv: Invocation) -> None:
        # Every line logged in this task (and the handler's thread, which copies its context) names the invocation,
        # including the handler's own logging and structlog lines. The task's context is its own: nothing leaks.
        structlog.contextvars.bind_contextvars(function=inv.function.name, invocation_id=inv.id)
        bound = log.bind(function=inv.function.name, queue=inv.function.queue_name, invocation_id=inv.id)
        if not inv.function.many:
            raw = inv.deliveries[0].raw
            bound = bound.bind(message_id=raw.id, dequeue_count=raw.dequeue_count)
        started = time.monotonic()
        if self.config.invocation_logs:
            bound.info("Executing", reason="new queue message detected", messages=len(inv.deliveries))
        await self._execute(inv, bound)
        if self.config.invocation_logs:
            outcomes = sorted({(d.result or Result(Outcome.RELEASE, "")).outcome.value for d in inv.deliveries})
            bound.info("Executed", outcome=",".join(outcomes), duration_ms=round((time.monotonic() - started) * 1000, 1))
        completions = [
            self.completion.complete(
                Finished(inv.function.name, inv.id, inv.backend, inv.function.queue_name, d.raw, d.lease),
                d.result or Result(Outcome.RELEASE, "no result"),
            )
            for d in inv.deliveries
        ]
        if len(completions) == 1:  # the common case, without gather's task per message
            await completions[0]
        else:
            await asyncio.gather(*completions)

    def _admit(self, delivery: Delivery, bound: structlog.typing.FilteringBoundLogger) -> bool:
        """Decode one message for the handler; or decide at once that it goes to poison. True if admitted."""
        raw = delivery.raw
        limit = self.config.max_dequeue_count
        if raw.dequeue_count > limit:
            delivery.result = Result(Outcome.POISON, f"dequeue count {raw.dequeue_count} is over maxDequeueCount {limit}")
            return False
        try:
            body = decode(raw.content, self.config.message_encoding)
        except MessageDecodeError as exc:
            bound.error("message decoding has failed", message_id=raw.id, reason=str(exc))
            delivery.result = Result(Outcome.POISON, str(exc))
            return False
        delivery.message = QueueMessage(
            id=raw.id, body=body, dequeue_count=raw.dequeue_count, insertion_time=raw.insertion_time,
            expiration_time=raw.expiration_time, time_next_visible=raw.time_next_visible, lease=delivery.lease,
        )
        return True

    async def _execute(self, inv: Invocation, bound: structlog.typing.FilteringBoundLogger) -> None:
        """Run the handler and set each delivery's result; never raises."""
        live = [d for d in inv.deliveries if self._admit(d, bound)]
        if not live:
            return
        result = await self._run_handler(inv, live, bound)
        for delivery in live:
            failure = delivery.message.failure if delivery.message is not None else None
            if result.outcome is Outcome.SUCCEEDED and failure is not None:
                bound.warning("handler failed one message", message_id=delivery.raw.id, reason=failure)
                delivery.result = Result(Outcome.FAILED, failure)
            else:
                delivery.result = result

    async def _run_handler(
        self, inv: Invocation, live: list[Delivery], bound: structlog.typing.FilteringBoundLogger
    ) -> Result:
        """Call the handler on the admitted messages, then send its outputs; the outcome of the whole call."""
        if inv.cancel_reason is not None:
            return Result(Outcome.RELEASE, inv.cancel_reason)
        messages = [d.message for d in live]
        outputs = {binding.arg_name: Out[Any]() for binding in inv.function.outputs}
        # Binding data for blob paths: one message's (blob bindings need cardinality one); only computed when used.
        data = expressions.binding_data(messages[0]) if inv.function.has_blob_bindings else {}
        try:
            inputs = await read_inputs(inv.function.inputs, data, self.storage.blobs)
        except Exception as exc:
            bound.error("input binding failed; the message will be retried", error=f"{type(exc).__name__}: {exc}")
            return Result(Outcome.FAILED, f"input binding: {type(exc).__name__}: {exc}")
        try:
            argument = messages if inv.function.many else _trigger_argument(messages[0], inv.function)
        except UnicodeDecodeError as exc:
            bound.error("message body is not UTF-8 text for a str parameter", error=str(exc))
            return Result(Outcome.FAILED, f"message body is not valid UTF-8 for a str parameter: {exc}")
        inv.handler_task = asyncio.create_task(self._invoke(inv, argument, {**inputs, **outputs}))
        started = time.monotonic()
        try:
            try:
                await inv.handler_task
            finally:
                self.metrics.handler_seconds.labels(inv.function.name).observe(time.monotonic() - started)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():  # the host itself is being torn down
                raise
            if inv.cancel_reason is None:
                bound.error("handler cancelled itself")
                return Result(Outcome.FAILED, "handler raised CancelledError")
        except TimeoutError:
            inv.interrupt()
            reason = f"functionTimeout of {self.config.function_timeout:g}s exceeded"
            bound.error("handler timed out", reason=reason)
            return Result(Outcome.FAILED, reason)
        except Exception as exc:
            if inv.cancel_reason is not None:  # e.g. its Spark job was cancelled: the cancellation, not a failure
                bound.warning("invocation cancelled", reason=inv.cancel_reason, error=f"{type(exc).__name__}: {exc}")
                return Result(Outcome.RELEASE, inv.cancel_reason)
            bound.exception("handler failed", error=f"{type(exc).__name__}: {exc}")
            return Result(Outcome.FAILED, f"{type(exc).__name__}: {exc}")
        if inv.cancel_reason is not None:
            bound.warning("invocation cancelled", reason=inv.cancel_reason)
            return Result(Outcome.RELEASE, inv.cancel_reason)
        try:
            await send_outputs(inv.function.outputs, outputs, self.storage, self.config.message_encoding, data)
        except Exception as exc:
            bound.error("output binding failed; the message will be retried", error=f"{type(exc).__name__}: {exc}")
            return Result(Outcome.FAILED, f"output binding: {type(exc).__name__}: {exc}")
        bound.debug("handler succeeded", seconds=round(time.monotonic() - started, 3), messages=len(live))
        return Result(Outcome.SUCCEEDED)

    async def _invoke(self, inv: Invocation, argument: Any, bound: dict[str, Any]) -> None:
        """Call the handler with the trigger ``argument`` and the ``bound`` inputs and outputs, within functionTimeout."""
        kwargs: dict[str, Any] = {inv.function.arg_name: argument, **bound}
        if inv.function.wants_context:  # made only for handlers that ask for one
            first = inv.deliveries[0].raw
            kwargs["context"] = inv.context = Context(inv.id, inv.function.name, inv.function.directory, RetryContext(
                retry_count=max(0, first.dequeue_count - 1), max_retry_count=self.config.max_dequeue_count - 1,
            ))
        current_invocation.set(inv)  # this task's own context, copied into the handler's thread below
        if inv.function.is_async:
            inv.started = True
            async with asyncio.timeout(self.config.function_timeout):
                await inv.function.handler(**kwargs)
            return
        await self._thread_slots.acquire()
        inv.started = True
        self._busy_threads += 1
        self._threads_idle.clear()
        loop = asyncio.get_running_loop()

        def in_thread() -> None:
            if inv.context is not None:  # the Python worker's context.thread_local_storage, filled in the handler's thread
                inv.context.thread_local_storage.invocation_id = inv.id
            try:
                inv.function.handler(**kwargs)
            finally:
                for cleanup in inv.thread_cleanup:
                    cleanup()

        def thread_done(done: Future[None]) -> None:
            loop.call_soon_threadsafe(self._free_thread, done)

        future = self._threads.submit(contextvars.copy_context().run, in_thread)
        future.add_done_callback(thread_done)
        try:
            async with asyncio.timeout(self.config.function_timeout):
                await asyncio.wrap_future(future)
        except BaseException:
            if not future.done():
                self._abandon(inv, future)
            raise

    def _abandon(self, inv: Invocation, future: Future[None]) -> None:
        """The host stops waiting for a sync handler that still runs: its thread stays taken until it returns."""
        self._abandoned.add(future)
        log.warning(
            "handler thread is still running after the host gave up on it; it stays busy until the handler returns",
            function=inv.function.name, invocation_id=inv.id,
            threads_abandoned=len(self._abandoned), handler_threads=self.config.handler_threads,
        )
        if (problem := self.stuck()) is not None:
            log.error("sync handlers can no longer run", problem=problem)

    def _free_thread(self, future: Future[None]) -> None:
        """A thread is free only when its handler returns, not when the host stops waiting for it."""
        self._abandoned.discard(future)
        self._busy_threads -= 1
        if self._busy_threads == 0:
            self._threads_idle.set()
        self._thread_slots.release()


def _trigger_argument(message: QueueMessage, function: FunctionSpec) -> Any:
    """The message as the trigger parameter asks for it: the QueueMessage, or its body as bytes or text."""
    if function.trigger_kind == "bytes":
        return message.get_body()
    if function.trigger_kind == "str":
        return message.get_body().decode("utf-8")
    return message

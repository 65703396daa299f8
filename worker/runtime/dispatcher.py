"""From received messages to a finished invocation: decode, call the handler, hand the results to completion.

The path reads top to bottom in one method, :meth:`Dispatcher._pipeline`; its stages follow in the order they run.
Every message starts at once, as in Functions: async handlers on the loop, sync ones on ``handlerThreads``.
A sync message waiting for a thread has not started: at shutdown it is released at once.
``cardinality="many"`` hands the batch to one invocation; each message keeps its lease and outcome.
Bindings, logs and counting are middleware; the threads are :mod:`worker.runtime.threads`.
Whether a message is poison is for :mod:`worker.runtime.verdict` to say.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from worker.backends.queues import QueueBackend, RawMessage
from worker.bindings.encoding import MessageDecodeError, decode
from worker.context import Context, RetryContext
from worker.invocation import (
    Delivery,
    Invocation,
    InvocationState,
    current_invocation,
    new_invocation,
    new_invocation_id,
    state_of,
)
from worker.message import QueueMessage
from worker.middleware import Chain
from worker.model import Finished, FunctionSpec, Lease, Outcome, Result
from worker.observability.logs import BindOnUse, bind_invocation, debug_enabled
from worker.runtime import verdict
from worker.runtime.completion import CompletionProcessor
from worker.runtime.lease import LeaseScheduler
from worker.runtime.recycle import Recycler
from worker.runtime.threads import HandlerThreads, Overran, TimedOut
from worker.runtime.verdict import HandlerExited
from worker.settings.config import FunctionOptions

log = structlog.get_logger("worker.runtime.dispatcher")

#: The function option the dispatcher reads (see :attr:`worker.Middleware.function_options`).
FUNCTION_OPTIONS = {
    "checkpoints": "checkpoints=True: the handler replaces its message's content as it works "
    "(msg.checkpoint); refused at start where the backend cannot change content"
}

LEASE_LOST = "lease lost"
#: A handler's success: one result for all (a Result is frozen), not a new one per message.
_SUCCEEDED = Result(Outcome.SUCCEEDED)
SHUTDOWN = "shutdown"


class Dispatcher:
    def __init__(
        self,
        scheduler: LeaseScheduler,
        completion: CompletionProcessor,
        middleware: Chain,
        threads: HandlerThreads,
        recycler: Recycler,
        on_fault: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        """``on_fault`` hears of an invocation task that ended with an exception (a fault of the host's own: the
        handler's failures are results), so that it is reported at once rather than its messages stalling."""
        self.scheduler = scheduler
        self.on_fault = on_fault
        self.completion = completion
        self.middleware = middleware
        self.threads = threads
        #: Takes the messages of sync handlers that ran past functionTimeout.
        self.recycler = recycler
        #: Each invocation not yet completed, with its task (the handler, then completion).
        self.invocations: dict[Invocation, asyncio.Task[None]] = {}
        #: The invocations whose handler runs now, each with its task (the handler runs in the invocation's own):
        #: cancelled there when the host gives up on it.
        self._handlers: dict[Invocation, asyncio.Task[None]] = {}
        #: The functionTimeout of the async handlers running now, by its length.
        self._deadlines: dict[float, _Deadlines] = {}

    def dispatch(
        self,
        function: FunctionSpec,
        options: FunctionOptions,
        backend: QueueBackend,
        raws: list[RawMessage],
        on_done: Callable[[], None],
    ) -> Invocation:
        """Take the leases on ``raws``, start their invocation, and call ``on_done`` once all are completed.

        One message per invocation, or a whole batch for a ``cardinality="many"`` function; ``options`` are the
        function's.
        """
        invocation_id = new_invocation_id()
        deliveries = [
            Delivery(
                raw,
                Lease(
                    backend,
                    function.queue_name,
                    raw.id,
                    raw.pop_receipt,
                    function=function.name,
                    dequeue_count=raw.dequeue_count,
                    invocation_id=invocation_id,
                    duration=options.lease_duration,
                    message_expires=raw.expiration_time.timestamp() if raw.expiration_time else None,
                ),
            )
            for raw in raws
        ]
        if function.many:
            bound = BindOnUse(log, function=function.name, queue=function.queue_name, invocation_id=invocation_id)
        else:
            bound = BindOnUse(
                log,
                function=function.name,
                queue=function.queue_name,
                invocation_id=invocation_id,
                message_id=raws[0].id,
                dequeue_count=raws[0].dequeue_count,
            )
        inv = new_invocation(function, options, backend, deliveries, InvocationState(), invocation_id, bound)
        for delivery in inv.deliveries:
            if not function.many:  # a batch goes on without a message whose lease was lost
                # Refers back to the invocation; the scheduler drops it when the lease is completed or lost.
                delivery.lease.on_lost = lambda: self._give_up(inv, LEASE_LOST)
            self.scheduler.hold(delivery.lease)
        task = self.invocations[inv] = asyncio.create_task(self._pipeline(inv), name=f"invocation-{inv.id}")

        def finished(done: asyncio.Task[None]) -> None:
            del self.invocations[inv]
            on_done()
            if self.on_fault is not None and not done.cancelled() and (exc := done.exception()) is not None:
                self.on_fault(done.get_name(), exc)

        task.add_done_callback(finished)
        return inv

    async def wait_idle(self, timeout: float | None) -> bool:
        """Wait until every invocation is completed, or ``timeout`` passes; True when none is left."""
        if self.invocations:
            await asyncio.wait(set(self.invocations.values()), timeout=timeout)
        return not self.invocations

    def release_unstarted(self) -> int:
        """Shutdown: give back every message whose handler has not started; returns how many."""
        waiting = [inv for inv in self.invocations if not inv.started]
        for inv in waiting:
            self._give_up(inv, SHUTDOWN)
        return sum(len(inv.deliveries) for inv in waiting)

    def cancel_all(self, reason: str) -> None:
        for inv in list(self.invocations):
            self._give_up(inv, reason)

    def _give_up(self, inv: Invocation, reason: str) -> None:
        """The host gives up on ``inv``: its messages are released, the handler told, an async one cancelled."""
        state = state_of(inv)
        if state.cancel_reason is None:
            state.cancel_reason = reason
        self._interrupt(inv)
        task = self._handlers.get(inv)
        if task is None:
            return
        from_the_handler = asyncio.current_task() is task  # not in the if: the type checker would widen task
        if from_the_handler:
            # Given up from within the handler (its checkpoint found the lease lost), which goes on running: a
            # cancellation asked for now would wait for the task's next await, which may come after the handler has
            # returned, in its completion (Python 3.11's uncancel() does not withdraw it). So it is asked for from
            # the loop, if the handler still runs then.
            task.get_loop().call_soon(self._cancel_handler, inv, task)
        else:
            self._cancel_handler(inv, task)

    def _cancel_handler(self, inv: Invocation, task: asyncio.Task[None]) -> None:
        """Cancel ``task`` where it awaits in ``inv``'s handler, if it still runs it; counted, for
        :meth:`_call_handler` to withdraw once the handler is over."""
        if self._handlers.get(inv) is task:
            state_of(inv).handler_cancels += 1
            task.cancel()

    def _interrupt(self, inv: Invocation) -> None:
        """Tell the handler to stop (``message.cancelled``) and the middleware (``on_interrupt``)."""
        inv.interrupt()
        self.middleware.on_interrupt(inv)

    async def _pipeline(self, inv: Invocation) -> None:
        """One invocation, top to bottom: admit each message, bind the handler's arguments, run the handler between
        its middleware (under its lease, within functionTimeout), give each message its own result, settle each.

        A stage that ends the attempt early returns its result; nothing raises past here but the host's own teardown.
        """
        # Every line logged in this task (and the handler's thread, which copies its context) names the invocation,
        # including the handler's own logging and structlog lines. The task's context is its own: nothing leaks.
        bind_invocation(inv.function.name, inv.id)
        state = state_of(inv)
        state.began = time.monotonic()
        admitted = [d for d in inv.deliveries if self._admit(inv, d)]
        if admitted:
            state.messages = [d.message for d in admitted if d.message is not None]
            result = self._bind_arguments(inv, state)
            if result is None:
                result = await self._apply_middleware(inv, state)
            for delivery in admitted:
                delivery.result = verdict.of_message(delivery.message, result, inv.log)
        await self._settle(inv, state)

    def _admit(self, inv: Invocation, delivery: Delivery) -> bool:
        """Decode one message for the handler; or decide at once that it goes to poison. True if admitted."""
        raw = delivery.raw
        if (refused := verdict.admitted(raw, inv.options.max_dequeue_count)) is not None:
            delivery.result = refused
            return False
        try:
            body = decode(raw.content, inv.options.message_encoding, utf8=inv.function.trigger_kind == "str")
        except MessageDecodeError as exc:
            inv.log.error("message decoding has failed", message_id=raw.id, reason=str(exc))
            delivery.result = verdict.undecodable(exc)
            return False
        delivery.message = QueueMessage(
            id=raw.id,
            body=body,
            dequeue_count=raw.dequeue_count,
            insertion_time=raw.insertion_time,
            expiration_time=raw.expiration_time,
            time_next_visible=raw.time_next_visible,
            lease=delivery.lease,
            checkpoint_encoding=inv.options.message_encoding if inv.function.extras.get("checkpoints") else None,
            properties=raw.properties,
            service_attributes=raw.service_attributes,
        )
        return True

    def _bind_arguments(self, inv: Invocation, state: InvocationState) -> Result | None:
        """Put what the handler is called with in ``inv.kwargs``; or the result of an attempt that cannot begin (the
        host gave it up already, a body a ``str`` parameter cannot take), which no hook hears of."""
        if state.cancel_reason is not None:
            return Result(Outcome.RELEASE, state.cancel_reason)
        function = inv.function
        try:
            argument = inv.messages if function.many else _trigger_argument(inv.messages[0], function)
        except UnicodeDecodeError as exc:
            inv.log.error("message body is not UTF-8 text for a str parameter", error=str(exc))
            return Result(Outcome.FAILED, f"message body is not valid UTF-8 for a str parameter: {exc}")
        inv.kwargs[function.arg_name] = argument
        if function.wants_context:  # made only for handlers that ask for one
            first = inv.deliveries[0].raw
            inv.kwargs["context"] = state.context = Context(
                inv.id,
                function.name,
                function.directory,
                RetryContext(
                    retry_count=max(0, first.dequeue_count - 1),
                    max_retry_count=inv.options.max_dequeue_count - 1,
                ),
            )
        return None

    async def _apply_middleware(self, inv: Invocation, state: InvocationState) -> Result:
        """before_invocation hooks, the handler under its lease, after_invocation hooks: the result of the whole call,
        as the hooks leave it (one that raises fails the attempt, or poisons it)."""
        try:
            await self.middleware.before_invocation(inv)
        except Exception as exc:
            result = verdict.raised(exc, "before the handler", inv.log)
        else:
            result = await self._run_under_lease(inv, state)
        try:
            return await self.middleware.after_invocation(inv, result)
        except Exception as exc:
            return verdict.raised(exc, "after the handler", inv.log)

    async def _run_under_lease(self, inv: Invocation, state: InvocationState) -> Result:
        """Call the handler while the host holds its messages, within functionTimeout: its result, with the host
        giving it up (a lost lease, shutdown: released) told apart from a failure of its own."""
        if state.cancel_reason is not None:
            # Given up while a before_invocation hook ran (shutdown releases what has not started): the handler
            # must not start now, or it would run to its end and then see its message released.
            return Result(Outcome.RELEASE, state.cancel_reason)
        task = self.invocations[inv]  # the current task, as dispatch made it
        try:
            seconds = await self._call_handler(inv, task, state)
        except asyncio.CancelledError:
            if task.cancelling():  # the host itself is being torn down
                raise
            if state.cancel_reason is None:
                inv.log.error("handler cancelled itself")
                return Result(Outcome.FAILED, "handler raised CancelledError")
        except Overran as exc:  # a sync handler, still running: its messages wait for the process to be recycled
            state.overran = str(exc)
            return Result(Outcome.FAILED, str(exc))
        except TimedOut as exc:
            inv.log.error("handler timed out", reason=str(exc))
            return Result(Outcome.FAILED, str(exc))
        except Exception as exc:
            if state.cancel_reason is not None:  # e.g. its Spark job was cancelled: the cancellation, not a failure
                inv.log.warning("invocation cancelled", reason=state.cancel_reason, error=f"{type(exc).__name__}: {exc}")
                return Result(Outcome.RELEASE, state.cancel_reason)
            return verdict.raised(exc, "", inv.log)
        if state.cancel_reason is not None:
            inv.log.warning("invocation cancelled", reason=state.cancel_reason)
            return Result(Outcome.RELEASE, state.cancel_reason)
        if debug_enabled():  # else the invocation's logger need not be bound at all
            inv.log.debug("handler succeeded", seconds=round(seconds, 3), messages=len(inv.messages))
        return _SUCCEEDED

    async def _call_handler(self, inv: Invocation, task: asyncio.Task[None], state: InvocationState) -> float:
        """Call the handler with ``inv.kwargs`` in ``task`` (the current one), where :meth:`_give_up` can cancel it:
        on the event loop if async, else in a handler thread. How long it ran, also kept in ``state``."""
        # The handler runs in this task, not in one of its own (which cost more than the rest of the dispatcher's work
        # for a message); while it runs, _give_up cancels this task, and the cancellations it asked for are withdrawn
        # once the handler is over, so that only another's (the host torn down) reach what follows.
        self._handlers[inv] = task
        # Set for the handler alone (a sync handler's thread gets a copy of this context), not for what follows it.
        handler_context = current_invocation.set(inv)
        started = time.monotonic()
        try:
            if inv.function.is_async:
                await self._call_async(inv, task, state)
            else:
                await self._call_in_thread(inv, state)
        finally:
            state.handler_seconds = seconds = time.monotonic() - started
            current_invocation.reset(handler_context)
            del self._handlers[inv]
            for _ in range(state.handler_cancels):
                task.uncancel()
        if task.cancelling():
            # Cancelled by another than the host while the handler ran, and not seen: the handler swallowed it, or
            # cancelled its own task and returned before its next await. Pending, the latter would be taken at this
            # task's next await, in the completion; it is taken here instead, as the handler's own.
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                task.uncancel()
                raise
        return seconds

    async def _call_async(self, inv: Invocation, task: asyncio.Task[None], state: InvocationState) -> None:
        """Await an async handler in ``task``; past functionTimeout it is cancelled and raises :class:`TimedOut`."""
        state.started = True
        timeout = inv.options.function_timeout
        # functionTimeout cancels this task (see _Deadlines), not asyncio.timeout: the same outcome without its
        # context manager's objects and timer on every message.
        deadlines = None if timeout is None else self._deadlines_of(timeout)
        if deadlines is not None:
            deadlines.start(task, state)
        try:
            await inv.function.handler(**inv.kwargs)
        except asyncio.CancelledError:
            if state.timed_out and task.uncancel() == 0:  # the deadline's cancellation, and no other
                self._interrupt(inv)
                raise TimedOut(f"functionTimeout of {timeout:g}s exceeded") from None
            raise
        except Exception:
            raise
        except BaseException as exc:  # SystemExit, KeyboardInterrupt ...: fails the attempt, not the loop
            raise HandlerExited(exc) from exc
        else:
            if state.timed_out:  # the handler swallowed the deadline's cancellation: withdrawn, as the host's are
                task.uncancel()
        finally:
            if deadlines is not None:
                deadlines.end(task)

    def _deadlines_of(self, timeout: float) -> _Deadlines:
        """The one timer of the async handlers running now whose functionTimeout is ``timeout``."""
        deadlines = self._deadlines.get(timeout)
        if deadlines is None:
            deadlines = self._deadlines[timeout] = _Deadlines(timeout)
        return deadlines

    async def _call_in_thread(self, inv: Invocation, state: InvocationState) -> None:
        """Run a sync handler in a handler thread, which is told to stop at functionTimeout (:class:`TimedOut`, or
        :class:`Overran` while it still runs after the grace)."""
        function = inv.function

        def in_thread() -> None:
            if inv.context is not None:  # the Python worker's context.thread_local_storage, filled in the handler's thread
                inv.context.thread_local_storage.invocation_id = inv.id
            try:
                function.handler(**inv.kwargs)
            except (Exception, asyncio.CancelledError):
                raise
            except BaseException as exc:
                raise HandlerExited(exc) from exc
            finally:
                for cleanup in inv.thread_cleanup:
                    cleanup()

        def started() -> None:
            state.started = True

        await self.threads.run(
            in_thread,
            inv.options.function_timeout,
            on_start=started,
            on_timeout=lambda: self._interrupt(inv),
            about={"function": function.name, "invocation_id": inv.id},
        )

    async def _settle(self, inv: Invocation, state: InvocationState) -> None:
        """Hand each message to completion with its result (none: released); the messages of a sync handler still
        running past functionTimeout to the recycler instead, for the next process to complete."""
        function = inv.function
        deliveries = inv.deliveries
        if state.overran is not None:  # completed by the next process, once this one (and the handler's thread) is gone
            self.recycler.hold(inv, [d for d in deliveries if d.message is not None], state.overran)
            deliveries = [d for d in deliveries if d.message is None]
        completions = [
            self.completion.complete(
                Finished(
                    function.name,
                    inv.id,
                    inv.backend,
                    function.queue_name,
                    d.raw,
                    d.lease,
                    inv.options,
                    BindOnUse(inv.log, message_id=d.raw.id, dequeue_count=d.raw.dequeue_count) if function.many else inv.log,
                ),
                d.result or Result(Outcome.RELEASE, "no result"),
            )
            for d in deliveries
        ]
        if len(completions) == 1:  # the common case, without gather's task per message
            await completions[0]
        elif completions:
            await asyncio.gather(*completions)


class _Deadlines:
    """The functionTimeout of the async handlers running now that have one length of it, kept with one timer.

    A timer per message (``call_later``, then its cancel) cost more than the rest of what keeps the deadline, and
    left a cancelled handle per message in the loop's heap. Handlers start in the order their deadlines come, so
    the earliest is the first still running: the one timer is set for it, and when it fires, the handlers past
    their deadline are cancelled and it is set again for the first left.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._loop = asyncio.get_running_loop()
        #: Each running handler's task, with its deadline (the loop's clock) and its invocation's state; in start order.
        self._running: dict[asyncio.Task[None], tuple[float, InvocationState]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def start(self, task: asyncio.Task[None], state: InvocationState) -> None:
        """``task``'s handler starts now: it is cancelled, and ``state.timed_out`` set, once its time is up."""
        deadline = self._loop.time() + self.timeout
        self._running[task] = (deadline, state)
        if self._timer is None:
            self._timer = self._loop.call_at(deadline, self._expire)

    def end(self, task: asyncio.Task[None]) -> None:
        """``task``'s handler is over."""
        self._running.pop(task, None)

    def _expire(self) -> None:
        self._timer = None
        now = self._loop.time()
        while self._running:
            task, (deadline, state) = next(iter(self._running.items()))
            if deadline > now:
                self._timer = self._loop.call_at(deadline, self._expire)
                return
            del self._running[task]
            state.timed_out = True
            task.cancel()


def _trigger_argument(message: QueueMessage, function: FunctionSpec) -> Any:
    """The message as the trigger parameter asks for it: the QueueMessage, or its body as bytes or text."""
    if function.trigger_kind == "bytes":
        return message.get_body()
    if function.trigger_kind == "str":
        return message.get_body().decode("utf-8")
    return message

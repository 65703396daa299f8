"""An attempt's verdict: the one place that decides whether a message is poison, and what completion does with it.

- :func:`admitted`: dequeued more than ``maxDequeueCount`` (lost attempts), it is not run, as in the WebJobs SDK;
- :func:`undecodable`: a body that cannot be decoded never will be;
- :func:`raised`: :class:`worker.Poison`, or :class:`worker.bindings.errors.Unusable`;
- :func:`of_message`: a batch's message failed alone; :func:`fate`: a failure on the last attempt.
The verdict is the message's :class:`worker.model.Fate`, the names completion reports in.
Where poison goes is the backend's :class:`worker.runtime.poison.PoisonPolicy`.
:mod:`worker.runtime.completion` carries the verdict out.
"""

from __future__ import annotations

from typing import Any

from worker.backends.queues import RawMessage
from worker.bindings.encoding import MessageDecodeError
from worker.bindings.errors import Unusable
from worker.message import Poison, QueueMessage
from worker.middleware import InvocationFailed
from worker.model import Fate, Outcome, Result
from worker.runtime.poison import is_poison_queue


class HandlerExited(Exception):  # noqa: N818 -- what happened, as the log says it
    """A handler raised a BaseException that is not an error (SystemExit, KeyboardInterrupt, GeneratorExit).

    Left alone, it would leave the event loop (asyncio lets SystemExit and
    KeyboardInterrupt through) or the invocation's task, and take the process
    or the batch's other completions with it; wrapped, it fails its attempt
    like any exception. The original is the ``__cause__``.
    """

    def __init__(self, raised: BaseException) -> None:
        super().__init__(f"{type(raised).__name__}: {raised}")


def admitted(raw: RawMessage, max_dequeue_count: int) -> Result | None:
    """None when the message may run; poison when it was dequeued more than ``max_dequeue_count`` times."""
    if raw.dequeue_count > max_dequeue_count:
        return Result(Outcome.POISON, f"dequeue count {raw.dequeue_count} is over maxDequeueCount {max_dequeue_count}")
    return None


def undecodable(exc: MessageDecodeError) -> Result:
    """A message whose body cannot be decoded: poison, since no attempt could decode it."""
    return Result(Outcome.POISON, str(exc))


def raised(exc: Exception, where: str, log: Any) -> Result:
    """The result of a handler (``where`` empty) or of middleware ``where`` that raised: poison if the handler
    asked for it or no attempt can succeed, else a failure. Logged on ``log``."""
    if isinstance(exc, Poison) and not where:
        log.error("handler asked for the poison queue", reason=exc.reason)
        return Result(Outcome.POISON, exc.reason, requested=True)
    # No attempt can succeed: a middleware found so (a blob path that cannot be used), or a value the handler gave
    # cannot be used (an azure.functions handler's output of a type no message can carry).
    if isinstance(exc, (Poison, Unusable)):
        reason = exc.reason if isinstance(exc, Poison) else str(exc)
        log.error(f"message cannot be handled{f' ({where})' if where else ''}; it goes to the poison queue", reason=reason)
        return Result(Outcome.POISON, reason)
    error = str(exc) if isinstance(exc, HandlerExited) else f"{type(exc).__name__}: {exc}"
    if where:
        log.error(f"invocation failed {where}; the message will be retried", error=error)
        return Result(Outcome.FAILED, str(exc) if isinstance(exc, InvocationFailed) else error)
    log.exception("handler failed", error=error)
    return Result(Outcome.FAILED, error, exception=exc)


def of_message(message: QueueMessage | None, result: Result, log: Any) -> Result:
    """One message's result in an invocation whose result is ``result``: its own where the handler failed it alone
    (``msg.fail``; poison when it asked for it), or dropped it unhandled (``msg.drop``: deleted whether the rest of the
    batch succeeded or failed, as Lambda deletes what its filters drop)."""
    if message is not None and message.dropped is not None and result.outcome in (Outcome.SUCCEEDED, Outcome.FAILED):
        return Result(Outcome.SUCCEEDED, message.dropped, filtered=True)
    if result.outcome is Outcome.SUCCEEDED and message is not None and message.failure is not None:
        log.warning(
            "handler failed one message", message_id=message.id, reason=message.failure, poison=message.poison_requested
        )
        outcome = Outcome.POISON if message.poison_requested else Outcome.FAILED
        return Result(outcome, message.failure, requested=message.poison_requested)
    return result


def fate(queue: str, dequeue_count: int, max_dequeue_count: int, result: Result) -> Fate:
    """What completion is to do with a message of ``queue`` after an attempt with ``result``."""
    if result.outcome is Outcome.SUCCEEDED:
        return Fate.DELETED
    if result.outcome is Outcome.RELEASE:
        return Fate.RELEASED
    if is_poison_queue(queue):
        return Fate.LEFT
    if result.outcome is Outcome.POISON or dequeue_count >= max_dequeue_count:
        return Fate.POISONED
    return Fate.RETRIED

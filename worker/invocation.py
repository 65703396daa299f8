"""An invocation: one run of one function for one message (or a batch), as the dispatcher runs it and middleware sees it.

Middleware hooks and extensions receive the :class:`Invocation`; they read it,
add to ``kwargs`` (what the handler is called with) and ``thread_cleanup``; the
other fields are written by the dispatcher alone. It holds no task and no
callable that refers back to it, so that once its task ends, reference
counting frees it and all it holds at once (a cycle would leave every
message's objects to the garbage collector).
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.backends.queues import QueueBackend, RawMessage
from worker.context import Context
from worker.message import QueueMessage
from worker.model import FunctionSpec, Lease, Result
from worker.settings.config import FunctionOptions

#: The invocation whose handler is running in this context (copied into handler threads).
current_invocation: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar(
    "current_invocation", default=None
)


@dataclass(eq=False, slots=True)
class Delivery:
    """One received message of an invocation, with its lease and, once decided, its result."""

    raw: RawMessage
    lease: Lease
    message: QueueMessage | None = None
    result: Result | None = None


@dataclass(eq=False, slots=True)
class Invocation:
    """One run of one function for one message (or, with cardinality many, one batch)."""

    function: FunctionSpec
    #: The function's settings (host.yaml's ``functions:`` section over the global ones).
    config: FunctionOptions
    backend: QueueBackend
    deliveries: list[Delivery]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: bool = False
    cancel_reason: str | None = None
    #: Called in the handler's thread when it returns, to clear what the handler left on the thread.
    thread_cleanup: list[Callable[[], None]] = field(default_factory=list)
    #: What a handler with a ``context`` parameter gets.
    context: Context | None = None
    #: The messages handed to the handler (those not poisoned before it ran).
    messages: list[QueueMessage] = field(default_factory=list)
    #: What the handler is called with: the trigger argument, then what middleware adds (outputs, inputs, context).
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: The message's binding data for blob paths (cardinality one), filled by the bindings middleware when needed.
    binding_data: dict[str, Any] = field(default_factory=dict)
    #: How long the handler ran, once it has.
    handler_seconds: float | None = None
    #: Set when a sync handler ran past functionTimeout and still runs (why): its messages then wait for the
    #: process to be recycled (:mod:`worker.runtime.recycle`).
    overran: str | None = None
    #: time.monotonic() when processing began.
    began: float = 0.0
    #: The invocation's logger, bound to function, queue and ids.
    log: Any = None
    #: Tags that name the invocation's work elsewhere (its Spark jobs'), added by the middleware that tags it.
    job_tags: list[str] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        """True once the host has given up on the invocation (see :meth:`interrupt`)."""
        return any(delivery.lease.is_cancelled for delivery in self.deliveries)

    def interrupt(self) -> None:
        """Tell the handler to stop: set every message's ``cancelled`` event (the dispatcher then runs the
        middleware's ``on_interrupt``, and cancels an async handler it gives up on)."""
        for delivery in self.deliveries:
            delivery.lease.cancelled.set()

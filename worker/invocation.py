"""An invocation: one run of one function for one message (or a batch), as the dispatcher runs it and middleware sees it.

Middleware hooks and extensions receive the :class:`Invocation`; they read it,
add to ``kwargs`` (what the handler is called with), ``on_interrupt`` and
``thread_cleanup``; the fields marked as the runtime's are written by the
dispatcher alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from worker.backends.queues import QueueBackend, RawMessage
from worker.context import Context
from worker.message import QueueMessage
from worker.model import FunctionSpec, Lease, Result
from worker.settings.config import FunctionOptions

log = structlog.get_logger("worker.invocation")


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
    #: The function's settings (host.yaml's ``functions:`` section over the global ones).
    config: FunctionOptions
    backend: QueueBackend
    deliveries: list[Delivery]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: bool = False
    cancel_reason: str | None = None
    handler_task: asyncio.Task[Any] | None = None
    #: The whole invocation: handler, then completion.
    task: asyncio.Task[None] | None = None
    #: Called when the host gives up on the invocation; the runtime puts the middleware's ``on_interrupt`` here.
    on_interrupt: list[Callable[[], None]] = field(default_factory=list)
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
    #: time.monotonic() when processing began.
    began: float = 0.0
    #: The invocation's logger, bound to function, queue and ids.
    log: Any = None

    @property
    def interrupted(self) -> bool:
        """True once the host has given up on the invocation (see :meth:`interrupt`)."""
        return any(delivery.lease.cancelled.is_set() for delivery in self.deliveries)

    def interrupt(self) -> None:
        """Tell the handler to stop: set every message's ``cancelled`` event, then run ``on_interrupt``."""
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

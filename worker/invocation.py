"""An invocation: one run of one function for one message (or a batch), as middleware sees it.

:class:`Invocation` is a frozen view: assigning to it raises :class:`AttributeError`.
A middleware changes only what it hands out: ``kwargs``, ``thread_cleanup``, work tags, :meth:`Invocation.scratch`.
The dispatcher's own record is :class:`InvocationState`; the view shows parts of it read-only.
Neither refers back to the invocation, so reference counting frees it when its task ends.
A cycle would leave every message's objects to the garbage collector.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from worker.backends.queues import QueueBackend, RawMessage
from worker.context import Context
from worker.message import QueueMessage
from worker.model import FunctionSpec, Lease, Result
from worker.settings.config import FunctionOptions

#: The invocation whose handler is running in this context (copied into handler threads).
current_invocation: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar("current_invocation", default=None)


class _InvocationIds:
    """Invocation ids in the form of Functions' (a version-4 UUID's text): 74 random bits drawn once per process,
    then 48 bits counting up from a random start.

    Unique within the process for 2**48 invocations, and across processes by the random part (drawn again in a
    forked child), as an id needs to be; not unguessable, which an invocation id need not be. One is made per
    message, so it avoids ``str(uuid.uuid4())``, which reads the OS's random source each time (bench/README.md).
    """

    def __init__(self) -> None:
        self._draw()
        os.register_at_fork(after_in_child=self._draw)

    def _draw(self) -> None:
        bits = int.from_bytes(os.urandom(16), "big")
        # 8-4-4-4-12 hex digits: the third group starts with the version (4), the fourth with the variant (8 to b).
        self._prefix = (
            f"{bits >> 96:08x}-{(bits >> 80) & 0xFFFF:04x}-4{(bits >> 68) & 0xFFF:03x}-"
            f"{0x8000 | ((bits >> 54) & 0x3FFF):04x}-"
        )
        self._counter = itertools.count(bits & _LAST_GROUP)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter) & _LAST_GROUP:012x}"


_LAST_GROUP = (1 << 48) - 1
#: A new invocation id (see :class:`_InvocationIds`).
new_invocation_id = _InvocationIds()

#: The key of the bindings middleware's scratch, which the deprecated ``Invocation.binding_data`` reads.
BINDINGS_SCRATCH = "worker.bindings"


@dataclass(eq=False, slots=True)
class Delivery:
    """One received message of an invocation, with its lease and, once decided, its result."""

    raw: RawMessage
    lease: Lease
    message: QueueMessage | None = None
    result: Result | None = None


@dataclass(eq=False, slots=True)
class InvocationState:
    """What the dispatcher writes as an invocation runs: its own, written by it alone."""

    started: bool = False
    #: Why the host gave up on the invocation (shutdown, lease lost), once it has.
    cancel_reason: str | None = None
    #: How often the host cancelled the invocation's task while its handler ran (withdrawn once the handler is over).
    handler_cancels: int = 0
    #: Set when an async handler's functionTimeout has cancelled its task.
    timed_out: bool = False
    #: Set when a sync handler ran past functionTimeout and still runs (why): its messages then wait for the
    #: process to be recycled (:mod:`worker.runtime.recycle`).
    overran: str | None = None
    #: time.monotonic() when processing began.
    began: float = 0.0
    #: How long the handler ran, once it has.
    handler_seconds: float | None = None
    #: What a handler with a ``context`` parameter gets.
    context: Context | None = None
    #: The messages handed to the handler (those not poisoned before it ran).
    messages: list[QueueMessage] = field(default_factory=list)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"Invocation.{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


class _InvocationFields:
    """An invocation's fields, writable only while :class:`Invocation` makes it (plain stores are the fast way)."""

    __slots__ = (
        "function",
        "options",
        "backend",
        "deliveries",
        "id",
        "log",
        "kwargs",
        "thread_cleanup",
        "_state",
        "_work_tags",
        "_scratch",
    )

    function: FunctionSpec
    #: The function's options (host.yaml's ``functions:`` section over the global ones).
    options: FunctionOptions
    backend: QueueBackend
    deliveries: list[Delivery]
    id: str
    #: The invocation's logger, bound to function, queue and ids.
    log: Any
    #: What the handler is called with: the trigger argument, then what middleware adds (outputs, inputs, context).
    kwargs: dict[str, Any]
    #: Called in the handler's thread when it returns, to clear what the handler left on the thread.
    thread_cleanup: list[Callable[[], None]]

    def __init__(
        self,
        function: FunctionSpec,
        options: FunctionOptions,
        backend: QueueBackend,
        deliveries: list[Delivery],
        state: InvocationState,
        id: str,  # noqa: A002
        log: Any,
    ) -> None:
        self.function = function
        self.options = options
        self.backend = backend
        self.deliveries = deliveries
        self.id = id
        self.log = log
        self.kwargs = {}
        self.thread_cleanup = []
        self._state = state
        # _work_tags and _scratch are made on first use: most invocations need neither.


class Invocation(_InvocationFields):
    """One run of one function for one message (or, with cardinality many, one batch), as hooks see it: frozen."""

    __slots__ = ()

    def __new__(
        cls,
        function: FunctionSpec,
        options: FunctionOptions,
        backend: QueueBackend,
        deliveries: list[Delivery],
        state: InvocationState,
        *,
        id: str | None = None,  # noqa: A002
        log: Any = None,
    ) -> Invocation:
        """One made with ``state`` to write (the dispatcher uses :func:`new_invocation`, the same without keywords)."""
        return new_invocation(function, options, backend, deliveries, state, id or new_invocation_id(), log)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Everything was done by :func:`new_invocation`."""

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"an Invocation is read-only to middleware: cannot set {name!r} (see docs/middleware.md)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an Invocation is read-only to middleware: cannot delete {name!r}")

    def __repr__(self) -> str:
        return f"Invocation(function={self.function.name!r}, id={self.id!r}, messages={len(self.deliveries)})"

    # What the dispatcher writes, read-only here.
    @property
    def started(self) -> bool:
        """True once the handler has started (a sync one has its thread)."""
        return self._state.started

    @property
    def began(self) -> float:
        """time.monotonic() when processing began."""
        return self._state.began

    @property
    def handler_seconds(self) -> float | None:
        """How long the handler ran, once it has."""
        return self._state.handler_seconds

    @property
    def context(self) -> Context | None:
        """What a handler with a ``context`` parameter gets (None for one without)."""
        return self._state.context

    @property
    def messages(self) -> list[QueueMessage]:
        """The messages handed to the handler (those not poisoned before it ran)."""
        return self._state.messages

    @property
    def interrupted(self) -> bool:
        """True once the host has given up on the invocation (see :meth:`interrupt`)."""
        return any(delivery.lease.is_cancelled for delivery in self.deliveries)

    def interrupt(self) -> None:
        """Tell the handler to stop: set every message's ``cancelled`` event (the dispatcher then runs the
        middleware's ``on_interrupt``, and cancels an async handler it gives up on)."""
        for delivery in self.deliveries:
            delivery.lease.cancelled.set()

    @property
    def work_tags(self) -> tuple[str, ...]:
        """Names of the invocation's work elsewhere (its Spark jobs' tags), as middleware added them."""
        return tuple(getattr(self, "_work_tags", ()))

    def add_work_tag(self, tag: str) -> None:
        """Name the invocation's work elsewhere (a Spark job tag): shown by the console and on the invocation's span."""
        tags = self._tags()
        if tag not in tags:
            tags.append(tag)

    def _tags(self) -> list[str]:
        tags: list[str] | None = getattr(self, "_work_tags", None)
        if tags is None:
            tags = []
            object.__setattr__(self, "_work_tags", tags)
        return tags

    def scratch(self, owner: object) -> dict[str, Any]:
        """``owner``'s own per-invocation state: a dict made on first use and dropped with the invocation. A
        middleware passes itself (or a key it owns); no other party reads it."""
        scratch: dict[object, dict[str, Any]] | None = getattr(self, "_scratch", None)
        if scratch is None:
            scratch = {}
            object.__setattr__(self, "_scratch", scratch)
        found = scratch.get(owner)
        if found is None:
            found = scratch[owner] = {}
        return found

    # Deprecated names, kept working.
    @property
    def config(self) -> FunctionOptions:
        """Deprecated: :attr:`options`."""
        _deprecated("config", "Invocation.options")
        return self.options

    @property
    def job_tags(self) -> list[str]:
        """Deprecated: :attr:`work_tags` (read) and :meth:`add_work_tag` (write)."""
        _deprecated("job_tags", "Invocation.work_tags and Invocation.add_work_tag")
        return self._tags()

    @property
    def binding_data(self) -> dict[str, Any]:
        """Deprecated: the bindings middleware's own state (the message's binding data for blob paths)."""
        _deprecated("binding_data", "the bindings middleware's own state")
        data: dict[str, Any] = self.scratch(BINDINGS_SCRATCH).setdefault("binding_data", {})
        return data

    @property
    def cancel_reason(self) -> str | None:
        """Deprecated: the dispatcher's own (use :attr:`interrupted`)."""
        _deprecated("cancel_reason", "Invocation.interrupted")
        return self._state.cancel_reason


def new_invocation(
    function: FunctionSpec,
    options: FunctionOptions,
    backend: QueueBackend,
    deliveries: list[Delivery],
    state: InvocationState,
    id: str,  # noqa: A002
    log: Any,
) -> Invocation:
    """An :class:`Invocation` whose dispatcher keeps ``state`` to write: built with plain stores, then frozen by
    taking its class (the fast way: one per message)."""
    made = _InvocationFields(function, options, backend, deliveries, state, id, log)
    object.__setattr__(made, "__class__", Invocation)
    return made  # type: ignore[return-value]


def state_of(invocation: Invocation) -> InvocationState:
    """The dispatcher's state of ``invocation``: for the dispatcher, which made it, and the recycler it hands to."""
    return invocation._state

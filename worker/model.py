"""The types every layer shares: a function as the host runs it, a lease, an invocation, and their outcomes.

They sit below the runtime and middleware, so every layer imports them from one place.
The app registers a :class:`FunctionSpec`; each received message gets a :class:`Lease`.
An invocation's :class:`Result` (the attempt's :class:`Outcome`) becomes a :class:`Finished` for completion,
which gives the message its :class:`Fate`.
"""

from __future__ import annotations

import asyncio
import enum
import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from worker.backends.queues import QueueBackend, RawMessage
from worker.bindings.blobs import BlobInput, BlobOutput
from worker.bindings.outputs import OutputBinding
from worker.bindings.types import DataKind
from worker.settings.config import FunctionOptions
from worker.settings.retry import RetryPolicy

log = structlog.get_logger("worker.model")


class CheckpointFailed(Exception):  # noqa: N818 -- named for what happened, as Poison is
    """A checkpoint (``QueueMessage.checkpoint``) did not store its content.

    Either the lease is no longer held (lost to another receiver, or the
    invocation is over: ``message.lease_lost`` tells which), and nothing was
    written; or storage failed after its retries while the lease still
    holds, and the content may or may not have been stored. Either way the
    work since the last checkpoint that succeeded may be done again.
    """


class StartupRefused(ValueError):
    """The app cannot run as configured; ``problems`` has one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("the app cannot run:\n" + "\n".join(f"  {line}" for line in problems))


#: Options that were FunctionSpec fields once, with their defaults then (still read as attributes, deprecated).
_FORMER_FIELDS: dict[str, Any] = {"channel": None, "checkpoints": False, "spark": False}


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One queue-triggered function as the host runs it."""

    name: str
    handler: Callable[..., Any]
    arg_name: str
    queue_name: str
    #: The connection setting's name; None: ``AzureWebJobsStorage`` when it is set, else the embedded queue.
    connection: str | None
    is_async: bool
    #: ``@app.queue_output`` and ``@app.blob_output`` bindings, written only when the handler succeeds.
    outputs: tuple[OutputBinding | BlobOutput, ...] = ()
    #: ``@app.blob_input`` bindings, read before the handler runs.
    inputs: tuple[BlobInput, ...] = ()
    #: True for ``cardinality="many"``: the handler gets the received batch as a list.
    many: bool = False
    #: What the trigger parameter receives: the QueueMessage, or its body as ``str`` or ``bytes``.
    trigger_kind: DataKind = "object"
    #: True when the handler has a parameter named ``context`` for the invocation's :class:`worker.Context`.
    wants_context: bool = False
    #: The folder of the handler's module (``context.function_directory``).
    directory: str = ""
    #: The retry policy given in code (``@app.retry``); host.yaml's ``functions.<name>.retry`` wins over it.
    retry: RetryPolicy | None = None
    #: The decorator's other keyword arguments, each an option of the part of the host that reads it and declares
    #: it (a middleware's ``function_options``, the listener's ``channel``, the dispatcher's ``checkpoints``); one
    #: that nothing declares is refused at start (:func:`worker.ops.preflight.problems`).
    extras: Mapping[str, Any] = field(default_factory=dict)
    #: Settings given with the function's code (a SAM template's BatchSize, Timeout ...), by FunctionOptions field;
    #: host.yaml's ``functions.<name>`` section wins over them, and they over the global settings.
    settings: Mapping[str, Any] = field(default_factory=dict)

    def extra(self, name: str, default: Any = None) -> Any:
        """The option ``name`` as the decorator gave it, or ``default``."""
        return self.extras.get(name, default)

    def __getattr__(self, name: str) -> Any:
        """Deprecated: an option as an attribute (``spec.spark``); use :meth:`extra`."""
        if name.startswith("_") or name not in _FORMER_FIELDS:
            raise AttributeError(name)
        warnings.warn(
            f"FunctionSpec.{name} is deprecated; use FunctionSpec.extra({name!r})", DeprecationWarning, stacklevel=2
        )
        return self.extras.get(name, _FORMER_FIELDS[name])

    @property
    def has_blob_bindings(self) -> bool:
        """Whether an invocation needs the message's binding data (for blob paths)."""
        return bool(self.inputs) or any(isinstance(b, BlobOutput) for b in self.outputs)


class LeaseKeeper(Protocol):
    """What renews a lease (the host's lease scheduler), as a lease's message sees it: the one way to change the
    message while it is held, so that the change and the renewals take turns on one receipt."""

    #: The event loop the keeper runs on; a handler's thread hands its calls to it.
    loop: asyncio.AbstractEventLoop | None

    async def checkpoint(self, lease: Lease, content: str) -> None:
        """Replace the message's content (wire text) while ``lease`` holds it; raises :class:`CheckpointFailed`."""


#: Seconds kept between the end of a visibility asked for and the message's expiry: the service counts from when
#: it reads the request, a little after this clock.
EXPIRY_MARGIN = 0.5
#: Guards the first creation of a lease's events, which a handler's thread and the event loop may ask for at once.
_EVENTS = threading.Lock()


@dataclass(eq=False, slots=True, weakref_slot=True)
class Lease:
    """The hold one worker has on one received message.

    ``pop_receipt`` changes at each renewal and checkpoint; whoever deletes,
    releases or updates the message must take ``lock`` and use the receipt
    current at that moment.

    Its ``lost`` and ``cancelled`` events are made when first asked for: most
    messages end without anyone waiting on either, and two events (each a
    condition, a lock and a deque) were a fifth of the objects the host made
    per message, all of them work for the garbage collector.
    """

    backend: QueueBackend | None
    queue: str
    message_id: str
    pop_receipt: str | None
    function: str = ""
    dequeue_count: int = 0
    invocation_id: str = ""
    #: Seconds each renewal extends it by (the function's leaseDuration); 0: the scheduler's own.
    duration: float = 0.0
    #: time.monotonic() at which the lease ends unless renewed.
    expires_at: float = 0.0
    #: time.time() at which the service drops the message (its time to live; on OCI Queue its queue's retention):
    #: no update may hide it past then. None: never, or not known.
    message_expires: float | None = None
    acquired_at: float = field(default_factory=time.monotonic)
    renewals: int = 0
    #: Renewals failed in a row (storage trouble); only the first of a run is logged as a warning.
    failed_renewals: int = 0
    _lost: threading.Event | None = field(default=None, init=False, repr=False)
    _cancelled: threading.Event | None = field(default=None, init=False, repr=False)
    #: Called (on the event loop) once when the lease is lost.
    on_lost: Callable[[], None] | None = None
    #: Set once completion has begun; the scheduler then leaves the lease alone.
    finished: bool = False
    #: When its next renewal is due (time.monotonic()); heap entries with another due time are stale.
    due: float = 0.0
    #: Renewed only while a completion that storage failed is retried (see :meth:`LeaseScheduler.resume`).
    completing: bool = False
    #: What renews it (set when the scheduler takes it on); None for a lease built outside a host.
    keeper: LeaseKeeper | None = None
    #: The message's text as last checkpointed under this lease (what the queue now holds); None: as received.
    content: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def lost(self) -> threading.Event:
        """Set when another receiver owns the message (the handler's ``message.lease_lost``)."""
        return self._event("_lost")

    @property
    def cancelled(self) -> threading.Event:
        """Set when the host gives up on the invocation (the handler's ``message.cancelled``)."""
        return self._event("_cancelled")

    def _event(self, slot: str) -> threading.Event:
        event: threading.Event | None = getattr(self, slot)
        if event is None:
            with _EVENTS:  # checked again under the lock: the other thread may have made it meanwhile
                event = getattr(self, slot)
                if event is None:
                    event = threading.Event()
                    setattr(self, slot, event)
        return event

    @property
    def is_lost(self) -> bool:
        """Whether ``lost`` is set, without making the event."""
        return self._lost is not None and self._lost.is_set()

    @property
    def is_cancelled(self) -> bool:
        """Whether ``cancelled`` is set, without making the event."""
        return self._cancelled is not None and self._cancelled.is_set()

    def seconds_left(self) -> float:
        """What is left of the lease by our own clock, in seconds; below 0 once it has run out unrenewed."""
        return self.expires_at - time.monotonic()

    def holds(self) -> bool:
        """Whether the lease is still ours by our own clock: until then nobody else can receive the message.

        So a message found gone meanwhile was deleted with our receipt, by an earlier attempt of ours
        whose answer was lost (or its time to live ran out), not by another worker.
        """
        return self.seconds_left() > 0

    def within_expiry(self, seconds: float) -> float:
        """``seconds``, or what the message has left before it expires if that is less (never below 0): the longest
        visibility any update of it may ask for.

        OCI Queue's visibility "can't extend beyond the message's retention", and Azure refuses a visibility past a
        message's time to live. What is left is taken short by :data:`EXPIRY_MARGIN` and down to a whole number of
        the backend's ``visibility_resolution`` (a whole-second service rounds a visibility up), so that the service
        never sees a visibility past the expiry. The message may so show again up to that much before it expires.
        """
        if self.message_expires is None:
            return seconds
        resolution = self.backend.limits.visibility_resolution if self.backend is not None else 0.0
        left = self.message_expires - time.time() - EXPIRY_MARGIN
        if resolution > 0:
            left = math.floor(left / resolution) * resolution
        return max(0.0, min(seconds, left))

    def log_fields(self) -> dict[str, object]:
        """What every log line about this lease's message carries."""
        return {
            "function": self.function,
            "queue": self.queue,
            "message_id": self.message_id,
            "dequeue_count": self.dequeue_count,
            "invocation_id": self.invocation_id,
        }

    @classmethod
    def detached(cls, message_id: str, pop_receipt: str | None) -> Lease:
        """A lease no scheduler renews: for messages built outside the host (handler unit tests)."""
        return cls(backend=None, queue="", message_id=message_id, pop_receipt=pop_receipt)


class Outcome(enum.Enum):
    """What an attempt came to: the handler's word, or the host's where it gave the attempt up.

    Not yet what becomes of the message: its :class:`Fate` follows from the outcome, its dequeue count and its
    queue (:func:`worker.runtime.verdict.fate`): a failure, say, is RETRIED, or POISONED on the last attempt. On a
    poison queue, which has no poison queue of its own, a failure or poison is LEFT.
    """

    #: The handler returned (and its outputs were written): DELETED.
    SUCCEEDED = "succeeded"
    #: The handler raised or ran past functionTimeout: RETRIED, or POISONED on the last attempt.
    FAILED = "failed"
    #: The message must not be tried again (undecodable, past maxDequeueCount at receive, or asked for): POISONED.
    POISON = "poison"
    #: The host gave it up for a reason that is not the message's fault (shutdown, a lost lease): RELEASED.
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    reason: str = ""
    #: POISON asked for by the handler (``raise worker.Poison``, ``msg.fail(..., poison=True)``).
    requested: bool = False
    #: SUCCEEDED for a message dropped unhandled (``msg.drop``: a Lambda event filter matched none of it).
    filtered: bool = False
    #: What the handler raised, for tracing's exception event; not part of what the result says. Its traceback holds
    #: the handler's frames: keep a Result no longer than its message's completion.
    exception: BaseException | None = field(default=None, compare=False, repr=False)


class Fate(enum.Enum):
    """What becomes of a message once its attempt is over, in one vocabulary: what completion is to do with it
    (:func:`worker.runtime.verdict.fate`, one of the first five) and what it did (``after_completion``'s ``done``).

    The two differ only where completion could not do what was decided (the last three), or where the backend's
    poison policy hands poison to the service's own dead-letter queue: it is then RELEASED for the service to move.
    """

    #: Its attempt succeeded: deleted.
    DELETED = "deleted"
    #: Given up by the host (shutdown, interrupt): visible again at once, the attempt not counted as a failure.
    RELEASED = "released"
    #: Failed with attempts left: visible again after the retry delay.
    RETRIED = "retried"
    #: Out of circulation, as the backend's poison policy says.
    POISONED = "poisoned"
    #: Failed on a poison queue, which has no poison queue of its own: left invisible until its lease ends, as in
    #: Functions.
    LEFT = "left"
    #: The lease was lost before completion began: nothing done.
    SKIPPED = "skipped"
    #: The message changed hands during completion.
    LEASE_LOST = "lease lost"
    #: Storage refused for good; the message comes back when its lease ends.
    ERROR = "error"


#: Deprecated: :class:`Fate`'s former name (``worker.Done`` warns).
Done = Fate


@dataclass(frozen=True, slots=True)
class Finished:
    """A message whose invocation is over, with what the completion needs to know of it."""

    function: str
    invocation_id: str
    backend: QueueBackend
    queue: str
    raw: RawMessage
    lease: Lease
    #: The options of the message's function (maxDequeueCount, visibilityTimeout, retry).
    options: FunctionOptions
    #: The logger every line about this message goes to, bound to function, queue, invocation and message ids and
    #: dequeue count (the invocation's own for a single message: one bind per message, not two).
    log: structlog.typing.FilteringBoundLogger

    @property
    def config(self) -> FunctionOptions:
        """Deprecated: :attr:`options`."""
        warnings.warn("Finished.config is deprecated; use Finished.options", DeprecationWarning, stacklevel=2)
        return self.options

"""The queue protocol every backend implements: Azure Storage Queue semantics, each service's own limits.

The host speaks only this protocol; ``tests/conformance`` holds every backend to it.
Where services differ, :class:`Limits` and :class:`Capabilities` say so: the host never assumes Azure's.
Message content is wire text, the string the service stores.
Encoding (base64 or none) happens above this layer, so size limits apply to what is stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

#: Time-to-live a message gets when the sender names none (7 days), in seconds.
DEFAULT_TTL_SECONDS = 7 * 24 * 3600
#: A time-to-live of -1 means the message never expires.
NEVER_EXPIRES = -1


class QueueError(Exception):
    """Base of every error a backend raises on purpose."""


class QueueNotFound(QueueError):
    """The queue does not exist (Azure: 404 QueueNotFound)."""


class MessageNotFound(QueueError):
    """The message is gone: deleted, expired, or never existed (Azure: 404 MessageNotFound)."""


class PopReceiptMismatch(QueueError):
    """The pop receipt is stale: someone received or updated the message since (Azure: 400)."""


class MessageTooLarge(QueueError):
    """The message text is over the backend's ``Limits.max_message_bytes`` (Azure: 413 RequestBodyTooLarge)."""


class InvalidArgument(QueueError):
    """An argument is out of the range the service accepts (Azure: 400 OutOfRangeQueryParameterValue)."""


class Unsupported(InvalidArgument):
    """The backend's service has no such feature (e.g. a per-message time to live on OCI Queue)."""


class UnusableFile(QueueError):
    """The embedded queue's file exists but is not a SQLite database this host can use (refused, never overwritten)."""


class StorageGone(QueueError):
    """The storage this backend opened is no longer what its path names: the embedded queue's file was deleted or
    replaced while the worker ran. Not transient: retrying would write into a file nobody reads, so the worker stops
    and its supervisor starts it again on the file now there."""


class TransientError(QueueError):
    """Storage could not be reached or answered 5xx/408/429; the same call may succeed later."""


class OverLimit(TransientError):
    """The service holds back for now: a limit of what may be in flight is reached (SQS's OverLimit: 120,000
    messages received and not yet deleted). Not an outage: it passes as held messages complete, so it is told as a
    warning while the caller backs off."""


class OutcomeUnknown(TransientError):
    """A call that must not be made twice (a put) failed after its request had left for the service: it may have
    taken effect. The backend does not send it again, since that could store the message twice; the caller
    decides (a failed queue output fails its attempt, which is retried as a whole: outputs are at-least-once)."""


def _seconds(value: float) -> str:
    """A duration as a person reads it in a limit: 7 days, 12 hours, 30 seconds."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if value >= size and value % size == 0:
            return f"{value // size:g} {unit}"
    return f"{value:g}s"


#: A function's options bounded by a service's limits: (option, the Limits field, what the limit counts).
_BOUNDED = (
    ("batch_size", "max_batch", "messages a receive returns"),
    ("visibility_timeout", "max_visibility", "seconds a message may stay hidden"),
    ("lease_duration", "max_visibility", "seconds a message may stay hidden"),
)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one backend's service accepts. The host checks config and calls against these, never one service's numbers.

    ``visibility_resolution`` is how much shorter than asked a visibility may
    turn out (the service's clock granularity); ``long_poll`` the longest a
    receive may wait on the server for a message, 0 for a service that
    answers at once (the listener then polls with back-off).
    """

    max_batch: int
    max_visibility: float
    max_message_bytes: int
    visibility_resolution: float
    long_poll: float
    name_pattern: re.Pattern[str]
    name_rule: str

    def bounds(self) -> Iterator[tuple[str, float, str]]:
        """Each function option the service bounds (batch size, visibility timeout, lease), with its limit here and
        what the limit counts."""
        for option, limit_field, meaning in _BOUNDED:
            yield option, getattr(self, limit_field), meaning

    def exceeded(self, options: object, service: str, key_of: Callable[[str], str]) -> list[str]:
        """A line for each of a function's options that asks more than the service takes, naming the setting by
        ``key_of(option)``: found at start by ``worker run`` and by a host built in code alike, rather than at every
        receive. Where ``options`` says which values the user gave (its ``given``), only those are held to the limit:
        a default past it takes the limit instead (``FunctionOptions.within``)."""
        given = getattr(options, "given", None)
        found = []
        for option, limit, meaning in self.bounds():
            value = getattr(options, option)
            if value > limit and (given is None or option in given):
                found.append(f"{key_of(option)} is {value:g}, more than {service} takes: at most {limit:g} {meaning}")
        return found

    def check_name(self, queue: str) -> None:
        """Raise InvalidArgument unless ``queue`` is a name the service accepts."""
        if not self.name_pattern.fullmatch(queue):
            raise InvalidArgument(f"queue name {queue!r} is not valid: use {self.name_rule}")

    def check_count(self, n: int) -> None:
        """Receive and peek take 1 to ``max_batch`` messages."""
        if not 1 <= n <= self.max_batch:
            raise InvalidArgument(f"number of messages must be between 1 and {self.max_batch}, got {n}")

    def check_visibility(self, seconds: float, low: float) -> None:
        """Visibility timeouts run from ``low`` to ``max_visibility``."""
        if not low <= seconds <= self.max_visibility:
            raise InvalidArgument(
                f"visibility timeout must be between {low:g}s and {_seconds(self.max_visibility)}, got {seconds:g}s"
            )

    def check_size(self, content: str) -> None:
        """Raise MessageTooLarge when ``content`` is over ``max_message_bytes`` as UTF-8."""
        size = len(content.encode("utf-8"))
        if size > self.max_message_bytes:
            raise MessageTooLarge(
                f"message is {size} bytes; the limit is {self.max_message_bytes} bytes "
                f"({self.max_message_bytes // 1024} KiB)"
            )

    def check_put(self, content: str, visibility_timeout: float, time_to_live: float | None) -> float:
        """Check a put as the service would, before any request; returns the time to live to use."""
        self.check_size(content)
        ttl = DEFAULT_TTL_SECONDS if time_to_live is None else time_to_live
        if ttl != NEVER_EXPIRES and ttl < 1:
            raise InvalidArgument(f"time to live must be at least 1 second or -1 (never), got {ttl:g}")
        self.check_visibility(visibility_timeout, 0)
        if ttl != NEVER_EXPIRES and visibility_timeout >= ttl:
            raise InvalidArgument("visibility timeout must be shorter than the time to live")
        return ttl


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What one backend's service can do beyond the protocol's core (receive, update, delete, put, count)."""

    #: The service moves a message to its own dead-letter queue after a delivery limit set on the queue.
    dead_letter: bool
    #: ``peek`` shows messages without receiving them (OCI Queue's only "peek" counts as a delivery).
    peek: bool
    #: ``put`` takes a time to live and an initial invisibility per message.
    message_options: bool
    #: ``create_queue`` is quick, so the host may create ``<queue>-poison`` on first use.
    creates_queues: bool
    #: ``update`` hands out a new receipt, so the old one stops working.
    new_receipt_on_update: bool
    #: ``update`` can replace the message's content (Azure's Update Message); OCI Queue's sets visibility only.
    #: Resumable work (``QueueMessage.checkpoint``) needs it.
    updates_content: bool
    #: A queue has channels: ``put`` and ``receive`` take ``channel``.
    channels: bool = False
    #: A message carries string properties beside its content (``put``'s ``properties``, ``RawMessage.properties``):
    #: where a producer's trace context travels. Azure Storage queue messages have none.
    message_properties: bool = False


#: Azure's queue name rule: 3-63 of lowercase letters, digits and single hyphens, alphanumeric at both ends.
AZURE_NAME = re.compile(r"(?=.{3,63}\Z)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]")
AZURE_NAME_RULE = "3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit"

#: Errors that mean "the lease on this message is no longer ours".
LeaseGone = (MessageNotFound, PopReceiptMismatch)


@dataclass(frozen=True, slots=True)
class RawMessage:
    """A message as the service returns it. ``pop_receipt`` is None for peeked messages."""

    id: str
    content: str
    dequeue_count: int
    insertion_time: datetime
    expiration_time: datetime | None
    time_next_visible: datetime | None
    pop_receipt: str | None
    #: What the sender put beside the content (``Capabilities.message_properties``); empty elsewhere.
    properties: Mapping[str, str] = field(default_factory=dict)
    #: What the service says of the message beyond the protocol (SQS's system attributes); empty elsewhere.
    service_attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Receipt:
    """What an update returns: the new pop receipt and when the message is visible again."""

    pop_receipt: str
    time_next_visible: datetime


class QueueBackend(Protocol):
    """One storage account (or one SQLite file) holding named queues.

    All times are UTC. Visibility and TTL are seconds (floats accepted).
    """

    #: What the service accepts: batch, visibility, size, names, clock resolution, long-poll wait.
    limits: Limits
    #: What the service can do beyond the core: dead-lettering, peek, per-message options, quick queue creation.
    capabilities: Capabilities
    #: Poison goes to the service's own dead-letter queue (OCI Queue by default): the host releases a message it
    #: would poison until the service moves it, instead of copying it to ``<queue>-poison``.
    service_dead_letters: bool
    #: The service's name in traces (OpenTelemetry's ``messaging.system``).
    messaging_system: str

    async def create_queue(self, queue: str) -> None:
        """Create the queue; creating one that exists is not an error."""

    async def delete_queue(self, queue: str) -> None:
        """Delete the queue and its messages; a missing queue is not an error."""

    async def list_queues(self) -> list[str]:
        """Names of all queues, sorted."""

    async def put(
        self,
        queue: str,
        content: str,
        *,
        visibility_timeout: float = 0,
        time_to_live: float | None = None,
        channel: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> RawMessage:
        """Add a message, invisible for ``visibility_timeout`` seconds, expiring after ``time_to_live``.

        ``time_to_live`` None means :data:`DEFAULT_TTL_SECONDS` (or the queue's own
        retention where messages have no options); -1 means never.
        ``channel`` puts it on that channel of the queue; ``properties`` go beside
        the content. Raises QueueNotFound, MessageTooLarge, InvalidArgument, and
        Unsupported for options the service lacks (``capabilities.message_options``,
        ``capabilities.channels``, ``capabilities.message_properties``).
        """

    async def receive(
        self, queue: str, max_messages: int, visibility_timeout: float, *, wait: float = 0, channel: str | None = None
    ) -> list[RawMessage]:
        """Take up to ``max_messages`` visible messages (of ``channel`` only, if given), hiding each for
        ``visibility_timeout``.

        Increments each message's dequeue count and gives it a new pop receipt.
        Expired messages are never returned. With ``wait`` (up to ``limits.long_poll``
        seconds), an empty queue is waited on: the call returns as soon as a
        message is visible, or empty when the wait ends; cancelling it loses
        nothing and hides nothing once ``close`` has returned (what it took is
        given back, or released as a service that still answers the request
        hands it over). Raises QueueNotFound, InvalidArgument.
        """

    async def update(
        self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float, content: str | None = None
    ) -> Receipt:
        """Set the message's visibility to now + ``visibility_timeout``; the receipt it returns is the one to use next.

        Where ``capabilities.new_receipt_on_update`` the old receipt stops working.
        ``content`` (wire text, held to ``limits.max_message_bytes``) replaces
        the message's content in the same call, so that a later receive reads
        it; the dequeue count is left alone. None leaves the content as it is.

        Raises MessageNotFound, PopReceiptMismatch, InvalidArgument,
        MessageTooLarge, and Unsupported for content where the service cannot
        change it (``capabilities.updates_content``).
        """

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """Delete the message. Raises MessageNotFound, PopReceiptMismatch."""

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        """Up to ``max_messages`` visible messages, unchanged and without pop receipts.

        Raises Unsupported where the service cannot look without receiving (``capabilities.peek``).
        """

    async def approximate_count(self, queue: str) -> int:
        """Messages in the queue, visible or not. Raises QueueNotFound."""

    async def close(self) -> None:
        """Release connections; the backend is not used afterwards."""


@runtime_checkable
class DeadLetters(Protocol):
    """A backend whose queues have dead-letter queues of the service's own (OCI Queue)."""

    async def dead_letter_limit(self, queue: str) -> int:
        """Deliveries after which the service moves a message to the dead-letter queue; 0: the queue has none."""

    async def dead_letter_count(self, queue: str) -> int:
        """Messages in the queue's dead-letter queue."""

    async def purge_dead_letters(self, queue: str) -> None:
        """Delete every message of the queue's dead-letter queue."""


@runtime_checkable
class RedrivePolicies(Protocol):
    """A backend whose queues may carry a dead-letter rule of their own (SQS's redrive policy), with which where the
    host sends poison must agree."""

    async def poison_problem(self, queue: str, max_dequeue_count: int) -> str | None:
        """Why poison of ``queue`` cannot go where the connection sends it, the queue's own rule saying otherwise;
        None where the two agree."""


@runtime_checkable
class PoisonByQueue(Protocol):
    """A backend where each queue's own dead-letter rule may say where its poison goes (SQS without ``poison=``):
    the service's dead-letter queue for a queue that has one, ``<queue>-poison`` for the rest."""

    def dead_letters_for(self, queue: str) -> bool:
        """Whether poison of ``queue`` is left to the service, as last looked up (:meth:`look_up_dead_letters`)."""

    async def look_up_dead_letters(self, queue: str) -> bool:
        """Look at ``queue``'s own rule now, and remember it for :meth:`dead_letters_for`."""


@dataclass(frozen=True, slots=True)
class MessageCounts:
    """A queue's messages split as the service can tell: visible to a receive now, and held invisible (in flight or
    delayed)."""

    visible: int
    invisible: int


@runtime_checkable
class CountsByVisibility(Protocol):
    """A backend that can tell a queue's visible messages from its invisible ones (the embedded queue, OCI Queue);
    Azure Storage's count is one number."""

    async def message_counts(self, queue: str) -> MessageCounts:
        """The queue's messages, visible and invisible. Raises QueueNotFound."""


def check_no_channel(channel: str | None, service: str) -> None:
    """Raise Unsupported for a channel on a service whose queues have none."""
    if channel is not None:
        raise Unsupported(f"{service} queues have no channels (asked for channel {channel!r})")


def check_target(operation: str, queue: str, message_id: str, pop_receipt: str) -> None:
    """Refuse a delete or visibility change that names no message or no receipt, before any request is made.

    No such call is a request for one message: on Azure Storage a DELETE of ``<queue>/messages`` without an id is
    Clear Messages, which deletes every message of the queue. Every backend calls this first in ``update`` and
    ``delete``, whatever built the call (a bug, a changed dependency).
    """
    if not (message_id and isinstance(message_id, str)):
        raise InvalidArgument(f"a {operation} in queue {queue!r} without its message id was refused before it was sent")
    if not (pop_receipt and isinstance(pop_receipt, str)):
        raise InvalidArgument(
            f"a {operation} of message {message_id} in queue {queue!r} without its pop receipt was "
            "refused before it was sent"
        )


def check_no_properties(properties: Mapping[str, str] | None, service: str) -> None:
    """Raise Unsupported for message properties on a service whose messages have none."""
    if properties:
        raise Unsupported(f"{service} messages have no properties (asked for {', '.join(sorted(properties))})")


@dataclass(frozen=True)
class Attempt:
    """The message whose attempt is putting messages now: its queue and id, and how many puts it made to each queue."""

    queue: str
    message_id: str
    puts: dict[str, int] = field(default_factory=dict)

    def next_put(self, target: str) -> int:
        """The ordinal of this attempt's next put to ``target`` (0, 1, ...): the same in every attempt that puts the
        same outputs in the same order."""
        n = self.puts.get(target, 0)
        self.puts[target] = n + 1
        return n


#: Set by the host around an attempt's outputs (:func:`writing_outputs_of`): a service that drops repeated puts
#: (SQS FIFO queues, by deduplication id) derives their ids from it, so that a retried attempt's outputs are not
#: stored twice.
_WRITING_FOR: ContextVar[Attempt | None] = ContextVar("writing_outputs_of", default=None)


@contextmanager
def writing_outputs_of(queue: str, message_id: str) -> Iterator[None]:
    """Within the block, puts in this task are the outputs of an attempt on message ``message_id`` of ``queue``."""
    token = _WRITING_FOR.set(Attempt(queue, message_id))
    try:
        yield
    finally:
        _WRITING_FOR.reset(token)


def current_attempt() -> Attempt | None:
    """The attempt whose outputs are being put in this task, if any."""
    return _WRITING_FOR.get()


async def put_creating(backend: QueueBackend, queue: str, content: str, **options: Any) -> RawMessage:
    """``backend.put``; a queue that does not exist is made on first need where the service makes queues quickly
    (``capabilities.creates_queues``), and must exist elsewhere (QueueNotFound)."""
    try:
        return await backend.put(queue, content, **options)
    except QueueNotFound:
        if not backend.capabilities.creates_queues:
            raise
        await backend.create_queue(queue)
        return await backend.put(queue, content, **options)

"""The queue protocol every backend implements, with Azure Storage Queue semantics.

The host never talks to a storage SDK directly: it speaks this protocol, so the
embedded SQLite queue and Azure Storage Queues behave the same way and one
conformance suite (``tests/conformance``) holds both to it.

Message content is *wire text*: the string the service stores. Encoding a
handler's bytes (base64 or none) happens above this layer, exactly as in the
Azure SDKs, so the 64 KiB limit applies to what is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

#: Largest message text either backend stores, as in Azure Storage Queues.
MAX_MESSAGE_BYTES = 64 * 1024
#: Most messages one receive or peek returns.
MAX_BATCH = 32
#: Longest visibility timeout the service accepts (7 days), in seconds.
MAX_VISIBILITY_SECONDS = 7 * 24 * 3600
#: Time-to-live a message gets when the sender names none (7 days), in seconds.
DEFAULT_TTL_SECONDS = 7 * 24 * 3600
#: A time-to-live of -1 means the message never expires.
NEVER_EXPIRES = -1
#: Azure's queue name rule: 3-63 of lowercase letters, digits and single hyphens, alphanumeric at both ends.
QUEUE_NAME = re.compile(r"(?=.{3,63}\Z)[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]")


class QueueError(Exception):
    """Base of every error a backend raises on purpose."""


class QueueNotFound(QueueError):
    """The queue does not exist (Azure: 404 QueueNotFound)."""


class MessageNotFound(QueueError):
    """The message is gone: deleted, expired, or never existed (Azure: 404 MessageNotFound)."""


class PopReceiptMismatch(QueueError):
    """The pop receipt is stale: someone received or updated the message since (Azure: 400)."""


class MessageTooLarge(QueueError):
    """The message text is over :data:`MAX_MESSAGE_BYTES` (Azure: 413 RequestBodyTooLarge)."""


class InvalidArgument(QueueError):
    """An argument is out of the range the service accepts (Azure: 400 OutOfRangeQueryParameterValue)."""


class UnusableFile(QueueError):
    """The embedded queue's file exists but is not a SQLite database this host can use (refused, never overwritten)."""


class TransientError(QueueError):
    """Storage could not be reached or answered 5xx/408/429; the same call may succeed later."""


def check_queue_name(queue: str) -> None:
    """Raise InvalidArgument unless ``queue`` is a name Azure Storage accepts."""
    if not QUEUE_NAME.fullmatch(queue):
        raise InvalidArgument(
            f"queue name {queue!r} is not valid: use 3-63 lowercase letters, digits and single hyphens, "
            "starting and ending with a letter or digit"
        )


def check_put(content: str, visibility_timeout: float, time_to_live: float | None) -> float:
    """Check a put as the service would, before any request; returns the time to live to use."""
    size = len(content.encode("utf-8"))
    if size > MAX_MESSAGE_BYTES:
        raise MessageTooLarge(f"message is {size} bytes; the limit is {MAX_MESSAGE_BYTES} bytes (64 KiB)")
    ttl = DEFAULT_TTL_SECONDS if time_to_live is None else time_to_live
    if ttl != NEVER_EXPIRES and ttl < 1:
        raise InvalidArgument(f"time to live must be at least 1 second or -1 (never), got {ttl:g}")
    check_visibility(visibility_timeout, 0)
    if ttl != NEVER_EXPIRES and visibility_timeout >= ttl:
        raise InvalidArgument("visibility timeout must be shorter than the time to live")
    return ttl


def check_visibility(seconds: float, low: float) -> None:
    """Receive takes 1 s to 7 days; put and update take 0 s to 7 days."""
    if not low <= seconds <= MAX_VISIBILITY_SECONDS:
        raise InvalidArgument(f"visibility timeout must be between {low:g}s and 7 days, got {seconds:g}s")


def check_count(n: int) -> None:
    """Receive and peek take 1 to 32 messages."""
    if not 1 <= n <= MAX_BATCH:
        raise InvalidArgument(f"number of messages must be between 1 and {MAX_BATCH}, got {n}")


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


@dataclass(frozen=True, slots=True)
class Receipt:
    """What an update returns: the new pop receipt and when the message is visible again."""

    pop_receipt: str
    time_next_visible: datetime


class QueueBackend(Protocol):
    """One storage account (or one SQLite file) holding named queues.

    All times are UTC. Visibility and TTL are seconds (floats accepted).
    """

    #: How much shorter than asked a visibility timeout may turn out (the service's time resolution).
    visibility_resolution: float
    #: Longest a receive may wait for a message (``wait``); 0 for a service that answers at once (Azure Storage),
    #: whose listener then polls with back-off instead.
    long_poll: float

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
    ) -> RawMessage:
        """Add a message, invisible for ``visibility_timeout`` seconds, expiring after ``time_to_live``.

        ``time_to_live`` None means :data:`DEFAULT_TTL_SECONDS`; -1 means never.
        Raises QueueNotFound, MessageTooLarge, InvalidArgument.
        """

    async def receive(
        self, queue: str, max_messages: int, visibility_timeout: float, *, wait: float = 0
    ) -> list[RawMessage]:
        """Take up to ``max_messages`` visible messages, hiding each for ``visibility_timeout``.

        Increments each message's dequeue count and gives it a new pop receipt.
        Expired messages are never returned. With ``wait`` (up to ``long_poll``
        seconds), an empty queue is waited on: the call returns as soon as a
        message is visible, or empty when the wait ends; cancelling it loses
        nothing. Raises QueueNotFound, InvalidArgument.
        """

    async def update(self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float) -> Receipt:
        """Set the message's visibility to now + ``visibility_timeout``; rotate its pop receipt.

        Raises MessageNotFound, PopReceiptMismatch, InvalidArgument.
        """

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """Delete the message. Raises MessageNotFound, PopReceiptMismatch."""

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        """Up to ``max_messages`` visible messages, unchanged and without pop receipts."""

    async def approximate_count(self, queue: str) -> int:
        """Messages in the queue, visible or not. Raises QueueNotFound."""

    async def close(self) -> None:
        """Release connections; the backend is not used afterwards."""

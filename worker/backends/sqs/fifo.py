"""The two ids a put to an SQS FIFO queue carries: its message group and its deduplication id.

SQS needs both without content-based deduplication, and drops a repeated id within five minutes.
An attempt's output gets an id from its trigger message, its queue, its ordinal and its text.
So a retried attempt puts the same ids, and SQS keeps one of each.
Its group is the trigger message's id: one attempt's outputs keep their order.
Other puts (``worker send``, a requeued poison message) get an id of their own and the group ``default``.
"""

from __future__ import annotations

import hashlib
import uuid

from worker.backends.queues import current_attempt

#: The group of a put that is no attempt's output.
DEFAULT_GROUP = "default"


def group_and_deduplication(queue: str, content: str) -> tuple[str, str]:
    """``MessageGroupId`` and ``MessageDeduplicationId`` (each at most 128 characters) for a put to FIFO ``queue``."""
    attempt = current_attempt()
    if attempt is None:
        return DEFAULT_GROUP, uuid.uuid4().hex
    ordinal = attempt.next_put(queue)
    key = "\n".join(
        (attempt.queue, attempt.message_id, queue, str(ordinal), hashlib.sha256(content.encode("utf-8")).hexdigest())
    )
    return attempt.message_id[:128], hashlib.sha256(key.encode("utf-8")).hexdigest()

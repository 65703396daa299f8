"""The two ids a put to an SQS FIFO queue carries: its message group and its deduplication id.

SQS requires both on a FIFO queue without content-based deduplication, and drops a put whose deduplication id it
saw in the last five minutes. An output of a handler's attempt gets an id derived from that attempt's trigger
message (its queue and id), the output's queue, its ordinal among the attempt's puts there and its text: a retried
attempt that puts the same outputs puts the same ids, so SQS keeps one of each. Its group is the trigger message's
id, so one attempt's outputs keep their order while other messages' outputs go on beside them. A put that is no
attempt's output (``worker send``, a poison message put back) gets an id of its own and the group ``default``.
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

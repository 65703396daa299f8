"""The retry policy of a function: the delay before a failed message's next attempt."""

from __future__ import annotations

from worker.middleware import Middleware
from worker.model import Finished


class RetryDelay(Middleware):
    """A failed message is released with the policy's delay for its attempt instead of visibilityTimeout.

    The attempt is the message's dequeue count, so the delays grow across
    workers and restarts: the queue, not this process, remembers them.
    """

    def retry_delay(self, item: Finished, delay: float) -> float:
        policy = item.options.retry
        return delay if policy is None else policy.delay(item.raw.dequeue_count)

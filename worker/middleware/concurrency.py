"""maxConcurrency: at most N invocations of one function at once, enforced where messages are received."""

from __future__ import annotations

from worker.middleware import Middleware
from worker.model import FunctionSpec
from worker.settings.config import FunctionOptions


class ConcurrencyLimit(Middleware):
    """Holds a function's receives back while it runs ``maxConcurrency`` invocations.

    The cap is applied before the receive, not before the handler: a message
    received but left waiting would hold a lease (and count a dequeue) while
    another worker could have run it. One invocation is one message, or one
    batch for ``cardinality="many"``.
    """

    def receive_limit(self, function: FunctionSpec, options: FunctionOptions, running: int, room: int) -> int:
        cap = options.max_concurrency
        if cap is None:
            return room
        free = cap - running
        if free <= 0:
            return 0
        return room if function.many else min(room, free)

"""The host's counters and handler-time histogram, kept from the hooks (what ``/metrics`` shows)."""

from __future__ import annotations

from worker.invocation import Invocation
from worker.middleware import Middleware
from worker.model import Fate, Finished, FunctionSpec, Outcome, Result
from worker.observability.metrics import Metrics

#: The counters each completion adds to.
_COUNTED: dict[Fate, tuple[str, ...]] = {
    Fate.DELETED: ("succeeded",),
    Fate.RELEASED: ("released",),
    Fate.RETRIED: ("failed", "retried"),
    Fate.LEFT: ("failed",),
    Fate.POISONED: ("poisoned",),
    Fate.SKIPPED: ("completions_skipped",),
    Fate.LEASE_LOST: ("leases_lost",),
    Fate.ERROR: ("storage_errors",),
}


class Counting(Middleware):
    """received, succeeded, failed, retried, released, poisoned, ... by function; handler seconds."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def after_receive(self, function: FunctionSpec, count: int) -> None:
        self.metrics.inc("received", function.name, count)

    def after_invocation(self, invocation: Invocation, result: Result) -> None:
        if invocation.handler_seconds is not None:
            self.metrics.handler_seconds.observe(invocation.function.name, invocation.handler_seconds)

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        if done is Fate.DELETED and result.filtered:  # dropped unhandled by the function's filters
            self.metrics.inc("filtered", item.function)
            return
        for name in _COUNTED[done]:
            self.metrics.inc(name, item.function)
        if done is Fate.POISONED:
            if result.outcome is Outcome.FAILED:  # its last attempt failed
                self.metrics.inc("failed", item.function)
            elif result.requested:  # the handler asked for it (worker.Poison, msg.fail(poison=True))
                self.metrics.inc("poison_requested", item.function)

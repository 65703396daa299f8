"""Functions' "Executing" and "Executed" lines for each invocation (``worker.invocationLogs``)."""

from __future__ import annotations

import time

import structlog

from worker.invocation import Invocation
from worker.middleware import Middleware
from worker.model import Outcome, Result
from worker.observability.logs import info_enabled

log = structlog.get_logger("worker.runtime.dispatcher")


class InvocationLogs(Middleware):
    """An INFO line when an invocation starts and one when it ends, with outcome and duration."""

    def before_invocation(self, invocation: Invocation) -> None:
        if not info_enabled():
            return
        invocation.log.info("Executing", reason="new queue message detected", messages=len(invocation.deliveries))

    def after_invocation(self, invocation: Invocation, result: Result) -> None:
        if not info_enabled():
            return
        outcomes = {result.outcome.value}
        if result.outcome is Outcome.SUCCEEDED and any(m.failure for m in invocation.messages):
            outcomes.add(Outcome.FAILED.value)
        duration = (time.monotonic() - invocation.began) * 1000
        invocation.log.info("Executed", outcome=",".join(sorted(outcomes)), duration_ms=round(duration, 1))

"""One retry policy for every remote queue backend: what is retried, how long, and what the host hears of it.

A backend says which of its SDK's failures are transient, how to name one
for counters, and how to tell people what went wrong; this module does the
rest, the same way for every service. Transient failures (the network,
timeouts, 5xx, 408, 429) are retried with jittered exponential back-off for a
bounded time, logged once per incident rather than once per call, and counted
(``on_retry``). What still fails surfaces as :class:`TransientError`, which
the host treats as "try later", never as fatal; every other failure is mapped
onto the protocol's errors by the backend.

A call that is not idempotent (a put: neither OCI's PutMessages nor Azure's Put
Message takes a retry token, and the OCI SDK does not retry PutMessages by
default for that reason) is retried only after a failure whose request never
left this machine (refused, not resolved, a TLS handshake that failed, a
connect timeout). Any other failure may have come after the service did the
work, so it surfaces at once as :class:`OutcomeUnknown` instead of being sent
again and done twice.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, stop_after_delay
from tenacity.wait import wait_random_exponential

from worker.backends.queues import OutcomeUnknown, QueueError, TransientError

T = TypeVar("T")

#: Attempts of one storage call before it surfaces as TransientError, and the time they may take in all.
RETRY_ATTEMPTS = 5
RETRY_BUDGET_SECONDS = 15.0
#: Back-off before the first retry is random up to this many seconds, doubling at each retry, capped at the max.
RETRY_FIRST_WAIT = 0.2
RETRY_MAX_WAIT = 4.0


class Incident:
    """Logs a storage outage once when it starts and once when it ends, and counts the failed calls."""

    def __init__(self, on_retry: Callable[[str], None] | None, failure_kind: Callable[[BaseException], str],
                 log: Any) -> None:
        self.on_retry = on_retry
        self.failure_kind = failure_kind
        self.log = log
        self.started: float | None = None
        self.failures = 0

    def failed(self, exc: BaseException | None) -> None:
        kind = self.failure_kind(exc) if exc else "unknown"
        self.failures += 1
        if self.on_retry is not None:
            self.on_retry(kind)
        if self.started is None:
            self.started = time.monotonic()
            self.log.warning("storage call failed; retrying with back-off", error=kind)

    def after_attempt(self, state: RetryCallState) -> None:
        """tenacity's ``after`` hook: called after each failed retry."""
        self.failed(state.outcome.exception() if state.outcome else None)

    def succeeded(self) -> None:
        if self.started is not None:
            self.log.info(
                "storage reachable again",
                outage_seconds=round(time.monotonic() - self.started, 3), failed_calls=self.failures,
            )
            self.started = None
            self.failures = 0


class Retrier:
    """Runs a backend's storage calls under the retry policy; one per backend, as its outage state is shared.

    ``is_transient`` says which failures the same call may get past later;
    ``failure_kind`` names a failure for ``on_retry`` and the log (``HTTP 503 ServerBusy``, ``ConnectionError``);
    ``request_left`` whether a failed call's request may have reached the service (False only where it provably
    did not: nothing of it was sent), which decides whether a call that is not idempotent may be retried.
    """

    def __init__(
        self,
        *,
        is_transient: Callable[[BaseException], bool],
        failure_kind: Callable[[BaseException], str],
        request_left: Callable[[BaseException], bool],
        on_retry: Callable[[str], None] | None,
        log: Any,
    ) -> None:
        self.is_transient = is_transient
        self.request_left = request_left
        self.incident = Incident(on_retry, failure_kind, log)

    async def call(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        unreachable: Callable[[BaseException], str],
        protocol_error: Callable[[BaseException], QueueError | None],
        unsure: Callable[[BaseException], str] | None = None,
    ) -> T:
        """Run one storage call with the retry policy; map what still fails onto the protocol's errors.

        What is still transient after the retries becomes TransientError with the text of ``unreachable``
        (the endpoint and the cause); anything else becomes ``protocol_error``'s error, or is raised as it
        is when that gives None (not a service's answer: the backend's own errors, bugs).

        ``unsure`` marks a call that is not idempotent: a transient failure whose request may have reached the
        service is not retried but raised at once as OutcomeUnknown with ``unsure``'s text.

        The first attempt is made directly: building a retry loop costs more than a no-op message's
        whole handling, and almost every call succeeds at once.
        """
        started = time.monotonic()

        def may_retry(exc: BaseException) -> bool:
            return self.is_transient(exc) and (unsure is None or not self.request_left(exc))

        try:
            try:
                result = await call()
            except Exception as exc:
                if not may_retry(exc):
                    raise
                self.incident.failed(exc)
                result = await self._retry(call, started, may_retry)
        except Exception as exc:
            if self.is_transient(exc):
                if unsure is not None and self.request_left(exc):
                    raise OutcomeUnknown(unsure(exc)) from None
                raise TransientError(unreachable(exc)) from None
            error = protocol_error(exc)
            if error is None:
                raise
            raise error from None
        self.incident.succeeded()
        return result

    async def _retry(
        self, call: Callable[[], Awaitable[T]], started: float, may_retry: Callable[[BaseException], bool]
    ) -> T:
        """Attempts 2 to RETRY_ATTEMPTS of a call whose first attempt failed transiently, with back-off before each."""
        await asyncio.sleep(random.uniform(0, RETRY_FIRST_WAIT))
        retrying = AsyncRetrying(
            retry=retry_if_exception(may_retry),
            # The n-th retry waits up to RETRY_FIRST_WAIT * 2**n, doubling on from the wait above.
            wait=wait_random_exponential(multiplier=2 * RETRY_FIRST_WAIT, max=RETRY_MAX_WAIT),
            stop=stop_after_attempt(RETRY_ATTEMPTS - 1)
            | stop_after_delay(max(0.0, RETRY_BUDGET_SECONDS - (time.monotonic() - started))),
            after=self.incident.after_attempt,
            reraise=True,
        )

        async def attempt() -> T:  # tenacity awaits only coroutine functions; ``call`` may return a plain future
            return await call()

        return await retrying(attempt)

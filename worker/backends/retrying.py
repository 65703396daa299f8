"""One retry policy for every remote queue backend: what is retried, how long, and what the host hears.

A backend says which failures are transient and how to name them; this module does the rest.
Transient failures back off (jittered, exponential) within :data:`RETRY_BUDGET_SECONDS`, logged once per incident.
What still fails is a :class:`TransientError`: "try later", never fatal.
Refusals worth a few more tries (``worth_retrying``: OCI's 401) get :data:`REFUSAL_ATTEMPTS`.
A service's ``retry-after`` is waited, but never past the budget.
A put is not idempotent: it is retried only when it provably did nothing, else it is :class:`OutcomeUnknown`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, stop_before_delay
from tenacity.wait import wait_random_exponential

from worker.backends.queues import OutcomeUnknown, QueueError, TransientError

T = TypeVar("T")

#: Attempts of one storage call before it surfaces as TransientError, and the time they may take in all.
RETRY_ATTEMPTS = 5
RETRY_BUDGET_SECONDS = 15.0
#: Back-off before the first retry is random up to this many seconds, doubling at each retry, capped at the max.
RETRY_FIRST_WAIT = 0.2
RETRY_MAX_WAIT = 4.0
#: Attempts of a call refused in a way worth a few more tries (``worth_retrying``): a signer may fetch a new token
#: after a 401; a refusal that persists past these is the backend's to report.
REFUSAL_ATTEMPTS = 3


class Incident:
    """Logs a storage outage once when it starts and once when it ends, and counts the failed calls."""

    def __init__(
        self, on_retry: Callable[[str], None] | None, failure_kind: Callable[[BaseException], str], log: Any
    ) -> None:
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
                outage_seconds=round(time.monotonic() - self.started, 3),
                failed_calls=self.failures,
            )
            self.started = None
            self.failures = 0


class Retrier:
    """Runs a backend's storage calls under the retry policy; one per backend, as its outage state is shared.

    ``is_transient`` says which failures the same call may get past later;
    ``worth_retrying`` which refusals get :data:`REFUSAL_ATTEMPTS` before they are reported as they are;
    ``failure_kind`` names a failure for ``on_retry`` and the log (``HTTP 503 ServerBusy``, ``ConnectionError``);
    ``may_have_acted`` whether a failed call may have been carried out (False only where it provably was not:
    nothing of it was sent, or the answer says nothing was done), which decides whether a call that is not
    idempotent may be retried; ``retry_after`` the seconds a failure asks to wait before the next attempt.
    """

    def __init__(
        self,
        *,
        is_transient: Callable[[BaseException], bool],
        failure_kind: Callable[[BaseException], str],
        may_have_acted: Callable[[BaseException], bool],
        on_retry: Callable[[str], None] | None,
        log: Any,
        worth_retrying: Callable[[BaseException], bool] = lambda exc: False,
        retry_after: Callable[[BaseException], float | None] = lambda exc: None,
    ) -> None:
        self.is_transient = is_transient
        self.worth_retrying = worth_retrying
        self.may_have_acted = may_have_acted
        self.retry_after = retry_after
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

        ``unsure`` marks a call that is not idempotent: a failure that may have been carried out
        (``may_have_acted``) is not retried but raised at once as OutcomeUnknown with ``unsure``'s text.

        The first attempt is made directly: building a retry loop costs more than a no-op message's
        whole handling, and almost every call succeeds at once.
        """
        started = time.monotonic()
        try:
            try:
                result = await call()
            except Exception as exc:

                def may_retry(exc: BaseException) -> bool:  # made only once a call has failed
                    retried = self.is_transient(exc) or self.worth_retrying(exc)
                    return retried and (unsure is None or not self.may_have_acted(exc))

                if not may_retry(exc):
                    raise
                self.incident.failed(exc)
                result = await self._retry(call, started, may_retry, exc)
        except Exception as exc:
            if self.is_transient(exc):
                if unsure is not None and self.may_have_acted(exc):
                    raise OutcomeUnknown(unsure(exc)) from None
                raise TransientError(unreachable(exc)) from None
            error = protocol_error(exc)
            if error is None:
                raise
            raise error from None
        if self.incident.started is not None:  # the first call to succeed after an outage says so
            self.incident.succeeded()
        return result

    async def _retry(
        self,
        call: Callable[[], Awaitable[T]],
        started: float,
        may_retry: Callable[[BaseException], bool],
        first: BaseException,
    ) -> T:
        """Attempts 2 to RETRY_ATTEMPTS of a call whose first attempt failed, with back-off before each.

        Each wait is the back-off or what the failure's ``retry-after`` asks, whichever is longer; a wait that
        would take the call past its budget is not waited: the last failure is raised instead.
        """
        pause = max(random.uniform(0, RETRY_FIRST_WAIT), self.retry_after(first) or 0.0)
        if time.monotonic() - started + pause >= RETRY_BUDGET_SECONDS or self._spent(first, 1):
            raise first
        await asyncio.sleep(pause)
        backoff = wait_random_exponential(multiplier=2 * RETRY_FIRST_WAIT, max=RETRY_MAX_WAIT)

        def wait(state: RetryCallState) -> float:
            # The n-th retry waits up to RETRY_FIRST_WAIT * 2**n, doubling on from the wait above, or longer if asked.
            failure = state.outcome.exception() if state.outcome else None
            return max(backoff(state), (self.retry_after(failure) if failure else None) or 0.0)

        limits = stop_after_attempt(RETRY_ATTEMPTS - 1) | stop_before_delay(
            max(0.0, RETRY_BUDGET_SECONDS - (time.monotonic() - started))
        )

        def stop(state: RetryCallState) -> bool:
            # Out of attempts or time, or the refusals are spent.
            if limits(state):
                return True
            failure = state.outcome.exception() if state.outcome else None
            return failure is not None and self._spent(failure, state.attempt_number + 1)

        retrying = AsyncRetrying(
            retry=retry_if_exception(may_retry),
            wait=wait,
            stop=stop,
            after=self.incident.after_attempt,
            reraise=True,
        )

        async def attempt() -> T:  # tenacity awaits only coroutine functions; ``call`` may return a plain future
            return await call()

        return await retrying(attempt)

    def _spent(self, failure: BaseException, attempts: int) -> bool:
        """Whether ``attempts`` made so far use up what a refusal worth a few more tries gets."""
        return not self.is_transient(failure) and self.worth_retrying(failure) and attempts >= REFUSAL_ATTEMPTS

"""How the OCI backend reads a failed call: transient or not, a refusal worth a few more tries, whether it may
have been carried out, how long it asks to wait, which protocol error a service answer is, and what to tell people.

The SDK raises ``oci.exceptions.ServiceError`` for an answer and wraps the
network's failures (its vendored ``requests``, or the installed one from its
sign-in helpers) in ``RequestException``; both are read here, the network
causes as every remote backend names them (:mod:`worker.backends.failures`).
The vendored copy is a private module of the SDK: an SDK without it is read
with the installed ``requests`` alone, after one warning.
"""

from __future__ import annotations

import email.utils
import re
import time
from urllib.parse import urlsplit

import oci

from worker.backends.failures import describe_network_failure, first_line
from worker.backends.queues import (
    InvalidArgument,
    MessageNotFound,
    MessageTooLarge,
    PopReceiptMismatch,
    QueueError,
    QueueNotFound,
)
from worker.dependencies import fall_back

try:  # the SDK vendors its own copy of requests; its sign-in helpers may raise the installed one's errors
    import requests as installed_requests
except ImportError:  # pragma: no cover - requests comes with azure-core
    installed_requests = None  # type: ignore[assignment]
try:
    from oci._vendor.requests import exceptions as vendored_requests
except ImportError:  # an SDK that no longer vendors requests sends with the installed one, read below
    vendored_requests = None
    fall_back("oci", "oci._vendor.requests", "its network failures are read as the installed requests' errors")

_TRANSIENT_STATUS = frozenset({408, 429})
#: Refusals OCI's API error table (https://docs.oracle.com/iaas/Content/API/References/apierrors.htm) marks
#: "Yes, with backoff". 409 IncorrectState (a queue UPDATING, as while a purge runs) and LockConflict pass with
#: time, so they are transient; the SDK's default retry retries the same 409s (``RETRYABLE_STATUSES_AND_CODES`` in
#: oci/retry/retry_checkers.py, used by ``DEFAULT_RETRY_STRATEGY`` in oci/retry/__init__.py). 401 NotAuthenticated
#: is worth a few tries (a signer fetches a new token after one) but, if it persists, is a refused sign-in, not an
#: outage (:func:`worth_retrying`). 404 NotAuthorizedOrNotFound is marked so too, but here it is a lost lease or a
#: queue gone, which no wait mends.
_TRANSIENT_CONFLICTS = frozenset({"IncorrectState", "LockConflict"})
#: Answers that say nothing was done: 429 (a throttle refuses the request before any work: RFC 6585, section 4,
#: "too many requests"), 503 (RFC 9110, section 15.6.4: "unable to handle the request"), 401 (not signed in) and
#: the 409s above (refused for the resource's state). 500, 502 and 504 may come after the work was done.
_NOTHING_DONE_STATUS = frozenset({401, 429, 503})
_REQUEST_ERRORS: tuple[type[BaseException], ...] = tuple(
    module.RequestException
    for module in (vendored_requests, getattr(installed_requests, "exceptions", None))
    if module is not None
)
#: ``requests`` errors that a later attempt cannot get past: the request itself is malformed.
_PERMANENT_REQUEST_ERRORS: tuple[type[BaseException], ...] = tuple(
    getattr(module, name)
    for module in (vendored_requests, getattr(installed_requests, "exceptions", None))
    if module is not None
    for name in ("InvalidURL", "MissingSchema", "InvalidSchema", "URLRequired", "InvalidHeader", "InvalidJSONError")
    if hasattr(module, name)
)
_TOO_LARGE_CODES = frozenset({"RequestEntityTooLarge", "PayloadTooLarge", "MessageTooLarge"})


def receipt_refused(exc: oci.exceptions.ServiceError) -> bool:
    """Whether an UpdateMessage or DeleteMessage answer says its receipt names no current delivery.

    Oracle documents no answer for a stale or foreign receipt. Its API errors page
    (https://docs.oracle.com/iaas/Content/API/References/apierrors.htm) has two that fit: 404 (a path
    component, as the receipt is, not found, NotAuthorizedOrNotFound, or not allowed, InvalidParameter) and
    400 InvalidParameter ("a parameter is invalid"), whose message need not name the receipt. The backend
    checks every other parameter of these calls before sending, so either answer means the lease is gone.
    """
    return bool(exc.status == 404 or (exc.status == 400 and exc.code == "InvalidParameter"))


def _inner(exc: BaseException) -> BaseException:
    """The ``requests`` error an ``oci.exceptions.RequestException`` wraps (the SDK passes it as its argument)."""
    if isinstance(exc, (oci.exceptions.RequestException, oci.exceptions.ConnectTimeout)) and exc.args:
        first = exc.args[0]
        if isinstance(first, BaseException):
            return first
    return exc


def is_transient(exc: BaseException) -> bool:
    """True for failures the same call may get past later: 408, 429, 5xx but 501 (as the SDK's retry: not
    implemented stays so), the network, timeouts."""
    if isinstance(exc, oci.exceptions.ServiceError):
        return (
            exc.status in _TRANSIENT_STATUS
            or (exc.status >= 500 and exc.status != 501)
            or (exc.status == 409 and str(exc.code or "") in _TRANSIENT_CONFLICTS)
        )
    inner = _inner(exc)
    if isinstance(inner, _PERMANENT_REQUEST_ERRORS):
        return False
    return isinstance(inner, (*_REQUEST_ERRORS, TimeoutError, ConnectionError))


def worth_retrying(exc: BaseException) -> bool:
    """401 NotAuthenticated: OCI says to retry it with back-off (see :data:`_TRANSIENT_CONFLICTS`), and a signer
    fetches a new token after one; a 401 that persists is reported as a refused sign-in."""
    return isinstance(exc, oci.exceptions.ServiceError) and exc.status == 401 and exc.code == "NotAuthenticated"


def may_have_acted(exc: BaseException) -> bool:
    """Whether a failed call may have been carried out: an answer unless it says nothing was done (see
    :data:`_NOTHING_DONE_STATUS`); for a network failure, whether any byte of the request was sent
    (``request_sent``, noted by :func:`worker.backends.oci.calls.sending`).

    A failure without that note came before the request was made (looking the queue up, signing in).
    """
    if isinstance(exc, oci.exceptions.ServiceError):
        refused = exc.status in _NOTHING_DONE_STATUS or (exc.status == 409 and str(exc.code or "") in _TRANSIENT_CONFLICTS)
        return not refused
    return bool(getattr(exc, "request_sent", False))


def retry_after(exc: BaseException) -> float | None:
    """The seconds an answer's ``retry-after`` header asks to wait (RFC 9110, section 10.2.3: seconds or a date)."""
    headers = getattr(exc, "headers", None) if isinstance(exc, oci.exceptions.ServiceError) else None
    value = str((headers or {}).get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


#: A region in an OCI host name: ``cell-1.queue.messaging.us-ashburn-1.oci.oraclecloud.com``.
_REGION_IN_HOST = re.compile(r"(?:^|\.)([a-z]{2,3}-[a-z]+-\d+)(?:\.|$)")


def region_of(endpoint: str | None) -> str | None:
    """The region an endpoint's host names, if it names one."""
    host = urlsplit(endpoint).hostname if endpoint and "://" in endpoint else endpoint
    match = _REGION_IN_HOST.search(host or "")
    return match.group(1) if match else None


def failure_kind(exc: BaseException) -> str:
    """A short name for a failure, for counters' labels: status and code, or the exception's type."""
    if isinstance(exc, oci.exceptions.ServiceError):
        return f"HTTP {exc.status} {exc.code or ''}".strip()
    return type(_inner(exc)).__name__


def describe(exc: BaseException) -> str:
    """What went wrong, for people: "HTTP 503 ServiceUnavailable", "connection refused", "timed out" ..."""
    if isinstance(exc, oci.exceptions.ServiceError):
        return f"HTTP {exc.status} {exc.code or ''}".strip() + (f": {first_line(exc.message)}" if exc.message else "")
    return describe_network_failure(_inner(exc))


def origin(url: str | None) -> str | None:
    """``scheme://host[:port]`` of a URL, never its path or query."""
    if not url:
        return None
    parts = urlsplit(url.split(" ", 1)[-1])  # ServiceError.request_endpoint is "METHOD URL"
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


def answer_error(
    exc: oci.exceptions.ServiceError,
    queue: str,
    message_id: str | None,
    *,
    put: bool,
    stale_receipt: bool,
    endpoint: str,
    identity: str,
    compartment: str,
    max_message_bytes: int,
    region_hint: str = "",
) -> QueueError:
    """The protocol's error for a service answer that is not transient.

    ``message_id`` is given for the calls that take a receipt (update, delete): a refused receipt
    (:func:`receipt_refused`) is a lost lease, PopReceiptMismatch where ``stale_receipt`` (a later delivery of
    the message replaced the receipt the call used), else MessageNotFound. ``region_hint`` ends the text of a
    queue not found (see ``OciBackend._region_hint``).
    """
    status, code = exc.status, str(exc.code or "")
    text = f"{code} {exc.message or ''}".lower()
    subject = f"message {message_id} in queue {queue!r}" if message_id else f"queue {queue!r}"
    answer = " ".join(part for part in (f"HTTP {status}", code) if part)
    if exc.message:
        answer += f": {first_line(exc.message)}"
    if status == 401:
        return QueueError(f"sign-in was refused by {endpoint} ({identity}): {answer}")
    if message_id and receipt_refused(exc):
        if stale_receipt:
            return PopReceiptMismatch(f"receipt for {subject} is stale: it was delivered again since ({answer})")
        return MessageNotFound(f"{subject} is gone, or its receipt is no longer current ({answer})")
    if status == 404:
        return QueueNotFound(
            f"queue {queue!r} does not exist in compartment {compartment}, or this identity may not use it ({answer})"
            f"{region_hint}"
        )
    if (
        status == 413
        or code in _TOO_LARGE_CODES
        or (put and status == 400 and any(word in text for word in ("too large", "size", "exceed")))
    ):
        return MessageTooLarge(f"message is larger than the service accepts ({max_message_bytes} bytes): {answer}")
    if message_id and status in (400, 409) and "receipt" in text:
        return PopReceiptMismatch(f"receipt for {subject} is stale ({answer})")
    if status == 400:
        return InvalidArgument(f"OCI Queue refused the request for {subject}: {answer}")
    return QueueError(f"OCI Queue call for {subject} failed: {answer}")

"""How the SQS backend reads a failed botocore call: transient or not, which protocol error, what to tell people.

A service answer is a ``ClientError`` with the query API's error code (``AWS.SimpleQueueService.NonExistentQueue``).
botocore prefers that code even where the JSON protocol sends its own beside it.
Network and sign-in failures are botocore's own exceptions (``EndpointConnectionError``, ``NoCredentialsError``).
Network causes read as on every remote backend (:mod:`worker.backends.failures`).
"""

from __future__ import annotations

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from worker.backends.failures import describe_network_failure, first_line
from worker.backends.queues import (
    InvalidArgument,
    MessageNotFound,
    MessageTooLarge,
    OverLimit,
    QueueError,
    QueueNotFound,
    TransientError,
)

#: Codes of answers a later attempt may get past: throttling and the service's own trouble.
_TRANSIENT_CODES = frozenset(
    {
        "RequestThrottled",
        "ThrottlingException",
        "Throttling",
        "KmsThrottled",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
#: A limit of the service reached for now, most often the in-flight messages of a queue (the query code, and the
#: JSON protocol's shape name).
OVER_LIMIT = frozenset({"OverLimit", "AWS.SimpleQueueService.OverLimit"})
#: A queue that does not exist (the query code, and the JSON protocol's shape name).
_NO_QUEUE = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
#: CreateQueue's refusal of a name whose queue was deleted within the last 60 s (the query code, and the JSON
#: protocol's shape name). SQS frees the name after 60 s and does not say how much of it is left.
QUEUE_DELETED_RECENTLY = frozenset({"AWS.SimpleQueueService.QueueDeletedRecently", "QueueDeletedRecently"})
#: How long SQS refuses a deleted queue's name (the API Reference's CreateQueue).
RECREATE_AFTER_SECONDS = 60
#: A receipt handle that names no current delivery: the message was deleted, received again, or its handle is not
#: one (SQS answers each of these on ChangeMessageVisibility; DeleteMessage answers only the last).
RECEIPT_GONE = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "AWS.SimpleQueueService.ReceiptHandleIsInvalid",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "InvalidReceiptHandle",
    }
)
#: SQS's answer to a value it refuses, whichever the value: it means a lost lease where it names the receipt handle.
INVALID_VALUE = frozenset({"InvalidParameterValue", "AWS.SimpleQueueService.InvalidParameterValue"})


def lease_gone(code: str, text: str) -> str | None:
    """Why an answer means the lease on a message is lost, or None where it does not.

    The codes of :data:`RECEIPT_GONE`; InvalidParameterValue naming the receipt handle ("Value ... for parameter
    ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.",
    SQS's answer once another consumer received the message); and InvalidParameterValue naming the visibility
    timeout as past the total the message may have ("Total VisibilityTimeout for the message is beyond the limit"):
    the API Reference's ChangeMessageVisibility says a change past the maximum "is rejected", and the message is
    every consumer's once what it has runs out.
    """
    if code in RECEIPT_GONE:
        return "its receipt handle is no longer current"
    if code in INVALID_VALUE:
        folded = text.replace(" ", "").lower()
        if "receipthandle" in folded:
            return "its receipt handle is no longer current"
        if "visibilitytimeout" in folded and ("beyondthelimit" in folded or "maximum" in folded):
            return "it reached SQS's 12-hour visibility maximum"
    return None


def error_code(exc: BaseException) -> str:
    """The answer's error code, or "" for what is not an answer."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "")
    return ""


def status(exc: BaseException) -> int:
    """The answer's HTTP status, or 0 for what is not an answer."""
    if isinstance(exc, ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return 0


def is_transient(exc: BaseException) -> bool:
    """True for failures the same call may get past later: throttling, 5xx, the network, timeouts."""
    if isinstance(exc, ClientError):
        return error_code(exc) in _TRANSIENT_CODES or status(exc) >= 500 or status(exc) in (408, 429)
    return isinstance(exc, (HTTPClientError, BotocoreConnectionError, TimeoutError, ConnectionError))


def may_have_acted(exc: BaseException) -> bool:
    """Whether a failed call may have been carried out: any answer may have (SQS states nothing otherwise); of the
    network's failures, all but one that could not connect (botocore names those apart)."""
    return not isinstance(exc, (EndpointConnectionError, ConnectTimeoutError))


def failure_kind(exc: BaseException) -> str:
    """A short name for a failure, for counters' labels: status and code, or the exception's type."""
    if isinstance(exc, ClientError):
        return f"HTTP {status(exc)} {error_code(exc)}".strip()
    return type(exc).__name__


def describe(exc: BaseException) -> str:
    """What went wrong, for people: "HTTP 500 InternalError: ...", "connection refused", "timed out" ..."""
    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message")
        return f"HTTP {status(exc)} {error_code(exc)}".strip() + (f": {first_line(message)}" if message else "")
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return f"no AWS credentials: {first_line(exc)}"
    return describe_network_failure(exc)


def answer_error(exc: BaseException, queue: str, message_id: str | None, where: str) -> QueueError | None:
    """The protocol's error for an answer (or sign-in failure) that is not transient; None for what is neither."""
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return QueueError(f"{where}: {describe(exc)} (botocore's provider chain found none)")
    if not isinstance(exc, ClientError):
        return None
    code = error_code(exc)
    subject = f"message {message_id} in queue {queue!r}" if message_id else f"queue {queue!r}"
    if code in _NO_QUEUE:
        return QueueNotFound(f"queue {queue!r} does not exist in {where}, or this identity may not use it")
    if code in QUEUE_DELETED_RECENTLY:
        # "Try later", not an outage: the same CreateQueue succeeds once SQS frees the name, and every caller of
        # create_queue already takes TransientError so (a host's start goes on and its listener creates the queue
        # on a later poll; a completion putting to a poison queue keeps its lease and tries again). It is not
        # retried within the call: the retry budget is shorter than the refusal, which SQS does not say the rest of.
        return TransientError(
            f"{where} will not create queue {queue!r} yet: a queue of that name was deleted less "
            f"than {RECREATE_AFTER_SECONDS} s ago, and SQS refuses the name until then "
            f"({describe(exc)})"
        )
    if code in OVER_LIMIT:
        return OverLimit(
            f"{where} holds back for {subject}: a limit is reached, most often the 120,000 messages a "
            f"queue may have in flight; it passes as held messages are deleted ({describe(exc)})"
        )
    if message_id and (why := lease_gone(code, str(exc.response.get("Error", {}).get("Message") or ""))):
        return MessageNotFound(f"{subject} is gone, or {why} ({describe(exc)})")
    if status(exc) in (401, 403):
        return QueueError(f"{where} refused the request for {subject}: {describe(exc)}")
    if "too long" in str(exc).lower() or "MessageTooLong" in code:
        return MessageTooLarge(f"message is larger than {where} accepts: {describe(exc)}")
    if status(exc) == 400:
        return InvalidArgument(f"{where} refused the request for {subject}: {describe(exc)}")
    return QueueError(f"{where} call for {subject} failed: {describe(exc)}")


def entry_error(failed: dict[str, str], queue: str, message_id: str, where: str) -> QueueError:
    """The protocol's error for one entry a batch request failed (its ``Failed`` item: Code, Message, SenderFault)."""
    code, text = failed.get("Code", ""), failed.get("Message") or ""
    answer = f"{code}: {first_line(text)}" if text else code
    subject = f"message {message_id} in queue {queue!r}"
    if why := lease_gone(code, text):
        return MessageNotFound(f"{subject} is gone, or {why} ({answer})")
    if not failed.get("SenderFault", True) or code in _TRANSIENT_CODES:
        return TransientError(f"{where} failed the entry for {subject}; it may succeed later ({answer})")
    return InvalidArgument(f"{where} refused the entry for {subject} ({answer})")

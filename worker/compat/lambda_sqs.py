"""A Lambda function's SQS handler, called as Lambda calls it: the event, the context, what its answer means.

:func:`lambda_handler` makes a ``cardinality="many"`` host handler that reads answers as Lambda does.
Without ``ReportBatchItemFailures``, a return succeeds the whole batch.
With it, ``batchItemFailures`` names failed records: they fail by ``QueueMessage.fail``, the rest are deleted.
An exception, or an answer Lambda cannot read, fails the whole batch.
Unlike Lambda, the host renews every record's visibility while the handler runs.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from worker.compat.lambda_filters import matches_any
from worker.message import QueueMessage

#: Lambda's answer type that turns on partial batch responses.
REPORT_BATCH_ITEM_FAILURES = "ReportBatchItemFailures"


@dataclass(frozen=True)
class LambdaFunction:
    """One Lambda function's SQS event source, as the host runs it."""

    name: str
    handler: Callable[[dict[str, Any], Any], Any]
    queue: str
    queue_arn: str
    region: str
    #: The function's Timeout, seconds: what ``get_remaining_time_in_millis`` counts down from.
    timeout: float
    memory_mb: int
    #: ``FunctionResponseTypes: [ReportBatchItemFailures]``.
    reports_failures: bool
    #: The event source's ``FilterCriteria`` patterns (:mod:`worker.compat.lambda_filters`); none: every record.
    filters: tuple[dict[str, Any], ...] = ()


class LambdaContext:
    """The context object Lambda's Python runtime passes, with the same attributes and method."""

    def __init__(self, function: LambdaFunction, account: str) -> None:
        self.function_name = function.name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{function.region}:{account}:function:{function.name}"
        self.memory_limit_in_mb = str(function.memory_mb)
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function.name}"
        self.log_stream_name = f"{datetime.now(UTC):%Y/%m/%d}/[$LATEST]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self._deadline = time.monotonic() + function.timeout

    def get_remaining_time_in_millis(self) -> int:
        """What is left of the function's Timeout, as Lambda counts it from the invocation's start."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _milliseconds(when: datetime | None) -> str:
    return str(int(when.timestamp() * 1000)) if when is not None else ""


def sqs_record(message: QueueMessage, function: LambdaFunction) -> dict[str, Any]:
    """One record of Lambda's SQS event, from a received message."""
    body = message.get_body().decode("utf-8")
    attributes = dict(message.service_attributes) or {
        "ApproximateReceiveCount": str(message.dequeue_count),
        "SentTimestamp": _milliseconds(message.insertion_time),
    }
    return {
        "messageId": message.id,
        "receiptHandle": message.pop_receipt,
        "body": body,
        "attributes": attributes,
        "messageAttributes": {
            name: {"stringValue": value, "stringListValues": [], "binaryListValues": [], "dataType": "String"}
            for name, value in message.properties.items()
        },
        "md5OfBody": hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": function.queue_arn,
        "awsRegion": function.region,
    }


class BatchFailed(Exception):
    """The whole batch failed, as Lambda would fail it: the handler's answer is not one Lambda can read."""


def failed_ids(answer: Any, batch_ids: set[str]) -> set[str]:
    """The message ids a partial batch response names. Raises BatchFailed where Lambda fails the whole batch.

    Success: None, an empty mapping, an empty or null ``batchItemFailures``. Whole failure: another type, an item
    that is not a mapping with an ``itemIdentifier`` of the batch (empty, null, unknown).
    """
    if answer is None:
        return set()
    if not isinstance(answer, Mapping):
        raise BatchFailed(f"the handler returned {type(answer).__name__}, not a batch response")
    items = answer.get("batchItemFailures")
    if not items:
        return set()
    if not isinstance(items, list):
        raise BatchFailed("batchItemFailures is not a list")
    found = set()
    for item in items:
        identifier = item.get("itemIdentifier") if isinstance(item, Mapping) else None
        if not isinstance(identifier, str) or identifier not in batch_ids:
            raise BatchFailed(f"batchItemFailures names {identifier!r}, which is no message of the batch")
        found.add(identifier)
    return found


def lambda_handler(function: LambdaFunction, account: str) -> Callable[[list[QueueMessage]], None]:
    """A host handler (``cardinality="many"``, sync: it runs on the host's handler threads, as a Lambda handler is
    blocking code) that calls ``function``'s handler with each batch as Lambda would."""

    def records(messages: list[QueueMessage]) -> None:
        kept = []
        for message in messages:
            record = sqs_record(message, function)
            if matches_any(function.filters, record):
                kept.append((message, record))
            else:  # deleted unhandled, as Lambda deletes what its filters drop
                message.drop("matched none of the event source's FilterCriteria")
        if not kept:
            return
        messages = [message for message, _ in kept]
        event = {"Records": [record for _, record in kept]}
        answer = function.handler(event, LambdaContext(function, account))
        if not function.reports_failures:
            return
        failed = failed_ids(answer, {message.id for message in messages})
        for message in messages:
            if message.id in failed:
                message.fail("named in the handler's batchItemFailures")

    records.__name__ = records.__qualname__ = function.name
    return records

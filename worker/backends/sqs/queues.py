"""Amazon SQS through botocore, which is synchronous: every call runs in a thread.

botocore's clients are thread-safe: one serves every thread (why not aiobotocore: ARCHITECTURE.md).
Retries are the shared policy's (:mod:`worker.backends.retrying`); errors read in :mod:`worker.backends.sqs.errors`.
The receipt is the receipt handle, the dequeue count ``ApproximateReceiveCount``, properties string attributes.
Updates are cut at 12 hours from the receive (:func:`within_cap`); one at that cap is a lost lease.
SQS answers stale handles ambiguously, so a book of handles (:mod:`worker.backends.receipts`) answers first.
FIFO queues take one message a receive (:mod:`worker.backends.sqs.fifo`); see also :mod:`worker.backends.sqs.batches`.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import botocore.loaders
import botocore.session
import structlog
from botocore.config import Config

from worker.backends.blocking import BlockingCalls
from worker.backends.failures import CONNECT_TIMEOUT
from worker.backends.queues import (
    InvalidArgument,
    MessageCounts,
    MessageNotFound,
    MessageTooLarge,
    QueueError,
    QueueNotFound,
    RawMessage,
    Receipt,
    Unsupported,
    check_no_channel,
    check_target,
)
from worker.backends.receipts import Receipts
from worker.backends.retrying import Retrier
from worker.backends.sqs import errors
from worker.backends.sqs.batches import Batcher, Entry
from worker.backends.sqs.connection import (
    BY_QUEUE,
    MAX_LONG_POLL,
    RELEASE_MARGIN,
    SQS_CAPABILITIES,
    SQS_LIMITS,
    SqsConnection,
    is_fifo,
)
from worker.backends.sqs.fifo import group_and_deduplication

log = structlog.get_logger("worker.backends.sqs.queues")

T = TypeVar("T")

#: Threads for calls; long polls hold one each for up to 20 s, so there are enough for many functions' polls.
THREADS = 32
#: The visibility cap: no message is hidden past this long after the receive that handed it out.
CAP = timedelta(seconds=SQS_LIMITS.max_visibility)
#: The system attributes a receive asks for: the receive count and times the protocol reports, and the rest
#: (SenderId, MessageGroupId ...) for handlers written for SQS (``RawMessage.service_attributes``).
SYSTEM_ATTRIBUTES = ["All"]


@functools.cache
def _models() -> botocore.loaders.Loader:
    """botocore's reader of its service models, shared by every backend of the process: each session would read
    and parse SQS's model again (a sixth of a second), and the model never changes while the process runs."""
    return botocore.loaders.create_loader()


def within_cap(visibility: int, received: datetime, now: datetime) -> int:
    """The visibility SQS accepts now for a message whose current receive was called at ``received``:
    ``visibility``, cut to the 12-hour cap; 0 when the cap is reached (the message is visible to everyone then,
    whoever holds it)."""
    return max(0, min(visibility, math.floor((received + CAP - now).total_seconds())))


def _seconds(value: float) -> int:
    """SQS takes whole seconds: round up, so a lease is never shorter than asked (as for Azure and OCI)."""
    return math.ceil(value)


def _when(milliseconds: str | None) -> datetime | None:
    return datetime.fromtimestamp(int(milliseconds) / 1000, UTC) if milliseconds else None


def _attribute_bytes(properties: Mapping[str, str]) -> int:
    """What message attributes add to a message's size, as SQS counts it: each name, type and value."""
    return sum(len(k.encode()) + len("String") + len(v.encode()) for k, v in properties.items())


class SqsBackend:
    """Queues of one SQS region (or endpoint); implements :class:`worker.backends.queues.QueueBackend`."""

    limits = SQS_LIMITS
    capabilities = SQS_CAPABILITIES
    messaging_system = "aws_sqs"

    def __init__(self, connection: SqsConnection, on_retry: Callable[[str], None] | None = None) -> None:
        self.connection = connection
        if connection.long_poll != MAX_LONG_POLL:
            self.limits = replace(SQS_LIMITS, long_poll=float(connection.long_poll))
        #: ``poison=service`` leaves poison to the queue's redrive policy; without ``poison=``, each queue's own
        #: redrive policy decides (:meth:`dead_letters_for`).
        self.service_dead_letters = connection.poison == "service"
        #: Whether each queue has a redrive policy, by name, as last looked up (``poison`` not given).
        self._redrives: dict[str, bool] = {}
        self._retrier = Retrier(
            is_transient=errors.is_transient,
            failure_kind=errors.failure_kind,
            may_have_acted=errors.may_have_acted,
            on_retry=on_retry,
            log=log,
        )
        self._lock = threading.Lock()
        self._client: Any = None
        #: Queue URLs by name, looked up once.
        self._urls: dict[str, str] = {}
        #: Each queue's MessageRetentionPeriod (when its messages expire), by name, looked up once.
        self._retention: dict[str, timedelta] = {}
        self._receipts = Receipts()
        #: When the receive that handed out each handle was called, for the 12-hour cap, by receipt handle.
        self._received_at: dict[str, datetime] = {}
        self._calls = BlockingCalls(repr(self), "sqs", THREADS, logger=log)
        self._deletes = Batcher(self._delete_one, self._delete_batch)
        self._visibilities = Batcher(self._change_one, self._change_batch)

    def __repr__(self) -> str:
        return f"SqsBackend({self.connection.describe()})"

    # -- the client and calls ---------------------------------------------------------------------------------

    def client(self) -> Any:
        """The one botocore client (made in the calling thread, as it reads config files), retries off."""
        with self._lock:
            if self._client is None:
                session = botocore.session.Session(profile=self.connection.profile)
                session.register_component("data_loader", _models())
                self._client = session.create_client(
                    "sqs",
                    region_name=self.connection.region,
                    endpoint_url=self.connection.endpoint,
                    config=Config(
                        retries={"total_max_attempts": 1},
                        connect_timeout=CONNECT_TIMEOUT,
                        read_timeout=MAX_LONG_POLL + 10,
                        max_pool_connections=THREADS,
                        user_agent_extra="queueworker",
                    ),
                )
            return self._client

    def _url(self, queue: str) -> str:
        """The queue's URL (blocking; looked up once)."""
        url = self._urls.get(queue)
        if url is None:
            url = self._urls[queue] = self.client().get_queue_url(QueueName=queue)["QueueUrl"]
        return url

    def _kept_for(self, queue: str) -> timedelta:
        """How long the queue keeps a message (blocking; looked up once): SQS has no per-message time to live."""
        kept = self._retention.get(queue)
        if kept is None:
            got = self.client().get_queue_attributes(QueueUrl=self._url(queue), AttributeNames=["MessageRetentionPeriod"])[
                "Attributes"
            ]
            kept = self._retention[queue] = timedelta(seconds=int(got["MessageRetentionPeriod"]))
        return kept

    async def _call(
        self,
        fn: Callable[[], T],
        queue: str,
        *,
        message_id: str | None = None,
        put: bool = False,
        release: Callable[[T], None] | None = None,
    ) -> T:
        """One blocking call in a thread under the shared retry policy; failures read as the protocol's errors."""

        def protocol_error(exc: BaseException) -> QueueError | None:
            if errors.error_code(exc) in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
                self._forget(queue)
            if put and "shorter than" in str(exc):
                return MessageTooLarge(f"message is larger than queue {queue!r} accepts: {errors.describe(exc)}")
            return errors.answer_error(exc, queue, message_id, self.connection.describe())

        return await self._retrier.call(
            lambda: self._calls.run(fn, release=release),
            unreachable=lambda exc: f"{self.connection.describe()} unreachable for queue {queue!r}: {errors.describe(exc)}",
            protocol_error=protocol_error,
            unsure=(
                lambda exc: (
                    f"put to queue {queue!r} on {self.connection.describe()} failed after its request "
                    f"was sent ({errors.describe(exc)}): the message may have been stored, so it is not "
                    "sent again"
                )
            )
            if put
            else None,
        )

    # -- queues -----------------------------------------------------------------------------------------------

    async def create_queue(self, queue: str) -> None:
        """Create the queue (FIFO where its name says so) taking the largest messages SQS allows; one that exists is
        left as it is (CreateQueue would refuse other attributes than its own). Within 60 s of a delete of its name
        SQS refuses it: TransientError, "try later" (:data:`worker.backends.sqs.errors.QUEUE_DELETED_RECENTLY`)."""
        self.limits.check_name(queue)
        attributes = {"MaximumMessageSize": str(self.limits.max_message_bytes)}
        if is_fifo(queue):
            attributes["FifoQueue"] = "true"

        def create() -> None:
            try:
                self._url(queue)
            except Exception as exc:
                if not isinstance(errors.answer_error(exc, queue, None, ""), QueueNotFound):
                    raise
                self._urls[queue] = self.client().create_queue(QueueName=queue, Attributes=attributes)["QueueUrl"]

        await self._call(create, queue)

    async def delete_queue(self, queue: str) -> None:
        def delete() -> None:
            try:
                self.client().delete_queue(QueueUrl=self._url(queue))
            except Exception as exc:
                if not isinstance(errors.answer_error(exc, queue, None, ""), QueueNotFound):
                    raise
            finally:
                self._forget(queue)

        await self._call(delete, queue)

    def _forget(self, queue: str) -> None:
        """Drop what is known of a queue that is gone: it may be made again under the same name, with another URL."""
        self._urls.pop(queue, None)
        self._retention.pop(queue, None)

    async def list_queues(self) -> list[str]:
        def names() -> list[str]:
            found: list[str] = []
            for page in self.client().get_paginator("list_queues").paginate(PaginationConfig={"PageSize": 1000}):
                found.extend(url.rsplit("/", 1)[-1] for url in page.get("QueueUrls", []))
            return sorted(found)

        return await self._call(names, "*")

    async def queue_attributes(self, queue: str) -> dict[str, str]:
        """The queue's attributes (RedrivePolicy, FifoQueue, VisibilityTimeout ...), as SQS gives them."""
        return await self._call(
            lambda: dict(
                self.client().get_queue_attributes(QueueUrl=self._url(queue), AttributeNames=["All"])["Attributes"]
            ),
            queue,
        )

    # -- messages ---------------------------------------------------------------------------------------------

    async def put(
        self,
        queue: str,
        content: str,
        *,
        visibility_timeout: float = 0,
        time_to_live: float | None = None,
        channel: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> RawMessage:
        """Properties go as String message attributes; a put to a FIFO queue carries a group and a deduplication id
        (:func:`worker.backends.sqs.fifo.group_and_deduplication`)."""
        check_no_channel(channel, "Amazon SQS")
        self.limits.check_visibility(visibility_timeout, 0)
        if visibility_timeout > 0 or time_to_live is not None:
            raise Unsupported(
                "Amazon SQS has no per-message time to live, and its per-message delay is for standard "
                "queues only: a message is kept for its queue's retention period"
            )
        properties = dict(properties or {})
        size = len(content.encode("utf-8")) + _attribute_bytes(properties)
        if size > self.limits.max_message_bytes:
            raise MessageTooLarge(
                f"message is {size} bytes with its attributes; the limit is "
                f"{self.limits.max_message_bytes} bytes ({self.limits.max_message_bytes // 1024} KiB)"
            )
        request: dict[str, Any] = {"MessageBody": content}
        if properties:
            request["MessageAttributes"] = {k: {"DataType": "String", "StringValue": v} for k, v in properties.items()}
        if is_fifo(queue):
            request["MessageGroupId"], request["MessageDeduplicationId"] = group_and_deduplication(queue, content)

        def send() -> tuple[str, timedelta]:
            kept = self._kept_for(queue)
            return self.client().send_message(QueueUrl=self._url(queue), **request)["MessageId"], kept

        message_id, kept = await self._call(send, queue, put=True)
        now = datetime.now(UTC)
        return RawMessage(
            id=message_id,
            content=content,
            dequeue_count=0,
            insertion_time=now,
            expiration_time=now + kept,
            time_next_visible=now,
            pop_receipt=None,
            properties=properties,
        )

    async def receive(
        self, queue: str, max_messages: int, visibility_timeout: float, *, wait: float = 0, channel: str | None = None
    ) -> list[RawMessage]:
        """With ``wait`` > 0 the service holds the request until a message is visible (up to ``limits.long_poll``);
        a FIFO queue is asked one message a request (see the module's docstring)."""
        check_no_channel(channel, "Amazon SQS")
        self.limits.check_count(max_messages)
        self.limits.check_visibility(visibility_timeout, 1)
        visibility = _seconds(visibility_timeout)
        wait_seconds = int(min(max(wait, 0), self.limits.long_poll))
        fifo = is_fifo(queue)

        def get() -> tuple[str, list[dict[str, Any]], timedelta]:
            url, kept = self._url(queue), self._kept_for(queue)
            taken: list[dict[str, Any]] = []
            while len(taken) < max_messages:
                answer = self.client().receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=1 if fifo else max_messages,
                    VisibilityTimeout=visibility,
                    WaitTimeSeconds=0 if taken else wait_seconds,
                    MessageSystemAttributeNames=SYSTEM_ATTRIBUTES,
                    MessageAttributeNames=["All"],
                )
                got = answer.get("Messages", [])
                taken.extend(got)
                if not fifo or not got:
                    break
            return url, taken, kept

        now = datetime.now(UTC)
        _, messages, kept = await self._call(get, queue, release=self._release)
        received = []
        for message in messages:
            attributes = message.get("Attributes", {})
            receipt = message["ReceiptHandle"]
            self._receipts.received(queue, message["MessageId"], receipt)
            self._received_at[receipt] = now  # when ReceiveMessage was called: its visibility began no earlier
            sent = _when(attributes.get("SentTimestamp")) or now
            received.append(
                RawMessage(
                    id=message["MessageId"],
                    content=message["Body"],
                    dequeue_count=int(attributes.get("ApproximateReceiveCount", "1")),
                    insertion_time=sent,
                    expiration_time=sent + kept,
                    time_next_visible=now + timedelta(seconds=visibility),
                    pop_receipt=receipt,
                    properties={
                        k: v["StringValue"] for k, v in message.get("MessageAttributes", {}).items() if "StringValue" in v
                    },
                    service_attributes=attributes,
                )
            )
        while len(self._received_at) > self._receipts.size:
            del self._received_at[next(iter(self._received_at))]
        return received

    def _release(self, got: tuple[str, list[dict[str, Any]], timedelta]) -> None:
        """Make messages whose receiver has gone visible again at once (in a thread), reading each entry's result."""
        url, messages, _ = got
        if not messages:
            return
        try:
            answer = self.client().change_message_visibility_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for i, m in enumerate(messages)
                ],
            )
            failed = answer.get("Failed", [])
            log.info("messages of a cancelled receive released", queue_url=url, count=len(messages) - len(failed))
            for entry in failed:
                log.warning(
                    "a message of a cancelled receive could not be released; it returns when its lease ends",
                    queue_url=url,
                    code=entry.get("Code"),
                    error=entry.get("Message"),
                )
        except Exception as exc:
            log.warning(
                "messages of a cancelled receive could not be released; they return when their lease ends",
                queue_url=url,
                count=len(messages),
                error=errors.describe(exc),
            )

    async def update(
        self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float, content: str | None = None
    ) -> Receipt:
        """ChangeMessageVisibility, within the 12-hour cap (:func:`within_cap`); the receipt handle stays the same."""
        check_target("visibility change", queue, message_id, pop_receipt)
        if content is not None:
            raise Unsupported(
                "Amazon SQS cannot change a message's content: ChangeMessageVisibility sets the visibility only"
            )
        self.limits.check_visibility(visibility_timeout, 0)
        self._receipts.check(queue, message_id, pop_receipt)
        asked = _seconds(visibility_timeout)
        received = self._received_at.get(pop_receipt)
        now = datetime.now(UTC)
        visibility = asked if received is None else within_cap(asked, received, now)
        if asked > 0 and visibility == 0:
            why = (
                f"it reached SQS's 12-hour visibility cap (received {received:%Y-%m-%d %H:%M:%S} UTC), so it is "
                "visible to every consumer"
            )
            self._receipts.lost(pop_receipt, why)
            raise MessageNotFound(f"message {message_id} in queue {queue!r}: {why}")
        try:
            await self._visibilities.submit(
                queue, {"message_id": message_id, "ReceiptHandle": pop_receipt, "VisibilityTimeout": visibility}
            )
        except MessageNotFound as exc:
            self._receipts.lost(pop_receipt, f"SQS refused it ({exc})")
            raise
        return Receipt(pop_receipt, now + timedelta(seconds=visibility))

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """DeleteMessage, or a DeleteMessageBatch with other deletes of the queue made meanwhile (see
        :mod:`worker.backends.sqs.batches`)."""
        check_target("delete", queue, message_id, pop_receipt)
        self._receipts.check(queue, message_id, pop_receipt)
        await self._deletes.submit(queue, {"message_id": message_id, "ReceiptHandle": pop_receipt})
        self._receipts.deleted(queue, message_id)
        self._received_at.pop(pop_receipt, None)

    # -- deletes and visibility changes, alone or in batches ---------------------------------------------------

    async def _delete_one(self, queue: str, entry: Entry) -> None:
        await self._call(
            lambda: self.client().delete_message(QueueUrl=self._url(queue), ReceiptHandle=entry["ReceiptHandle"]),
            queue,
            message_id=entry["message_id"],
        )

    async def _change_one(self, queue: str, entry: Entry) -> None:
        await self._call(
            lambda: self.client().change_message_visibility(
                QueueUrl=self._url(queue), ReceiptHandle=entry["ReceiptHandle"], VisibilityTimeout=entry["VisibilityTimeout"]
            ),
            queue,
            message_id=entry["message_id"],
        )

    async def _delete_batch(self, queue: str, entries: list[Entry]) -> list[BaseException | None]:
        return await self._batch(queue, entries, "delete_message_batch", ("ReceiptHandle",))

    async def _change_batch(self, queue: str, entries: list[Entry]) -> list[BaseException | None]:
        return await self._batch(queue, entries, "change_message_visibility_batch", ("ReceiptHandle", "VisibilityTimeout"))

    async def _batch(
        self, queue: str, entries: list[Entry], operation: str, fields: tuple[str, ...]
    ) -> list[BaseException | None]:
        """One batch request; each entry's result read from the answer's ``Failed`` list (None: it succeeded)."""
        request = [{"Id": str(i), **{name: entry[name] for name in fields}} for i, entry in enumerate(entries)]
        answer = await self._call(
            lambda: getattr(self.client(), operation)(QueueUrl=self._url(queue), Entries=request), queue
        )
        failed = {item["Id"]: item for item in answer.get("Failed", [])}
        return [
            None
            if str(i) not in failed
            else errors.entry_error(failed[str(i)], queue, entry["message_id"], self.connection.describe())
            for i, entry in enumerate(entries)
        ]

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        raise Unsupported("Amazon SQS cannot show messages without receiving them: every receive counts")

    async def approximate_count(self, queue: str) -> int:
        counts = await self.message_counts(queue)
        return counts.visible + counts.invisible

    async def message_counts(self, queue: str) -> MessageCounts:
        """Visible: ``ApproximateNumberOfMessages``; invisible: those in flight and those delayed."""
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        got = await self._call(
            lambda: self.client().get_queue_attributes(QueueUrl=self._url(queue), AttributeNames=names)["Attributes"], queue
        )
        return MessageCounts(
            visible=int(got.get(names[0], 0)), invisible=int(got.get(names[1], 0)) + int(got.get(names[2], 0))
        )

    # -- the queue's redrive policy (dead-letter queue) ---------------------------------------------------------

    async def dead_letter_limit(self, queue: str) -> int:
        """The redrive policy's ``maxReceiveCount``; 0 where the queue has none."""
        policy = (await self.queue_attributes(queue)).get("RedrivePolicy")
        return int(json_field(policy, "maxReceiveCount") or 0) if policy else 0

    async def dead_letter_queue(self, queue: str) -> str | None:
        """The name of the queue's dead-letter queue (from its redrive policy's ARN), or None."""
        policy = (await self.queue_attributes(queue)).get("RedrivePolicy")
        arn = json_field(policy, "deadLetterTargetArn") if policy else None
        return str(arn).rsplit(":", 1)[-1] if arn else None

    def dead_letters_for(self, queue: str) -> bool:
        """Whether the queue's redrive policy takes its poison: always with ``poison=service``, never with
        ``poison=host``, and without ``poison=`` where the queue had one when last looked at (at start)."""
        if self.connection.poison == BY_QUEUE:
            return self._redrives.get(queue, False)
        return self.service_dead_letters

    async def look_up_dead_letters(self, queue: str) -> bool:
        """Read the queue's redrive policy now (without ``poison=``) and remember whether it has one."""
        if self.connection.poison == BY_QUEUE:
            self._redrives[queue] = await self.dead_letter_limit(queue) > 0
        return self.dead_letters_for(queue)

    async def poison_problem(self, queue: str, max_dequeue_count: int) -> str | None:
        """Without ``poison=`` there is none: the queue's redrive policy, if it has one, takes its poison, else the
        host does. With ``poison=host`` the queue must have no redrive policy (SQS would move a message the host means
        to copy to ``<queue>-poison``, or keep one the host has given up on); with ``poison=service`` it must have one
        whose ``maxReceiveCount`` is the function's ``maxDequeueCount``."""
        if self.connection.poison == BY_QUEUE:
            await self.look_up_dead_letters(queue)
            return None
        limit = await self.dead_letter_limit(queue)
        if not self.service_dead_letters:
            if limit:
                return (
                    f"queue {queue!r} has a redrive policy (to {await self.dead_letter_queue(queue)!r} after "
                    f"{limit} receives), and poison=host would copy its poison to {queue!r}'s poison queue "
                    "after maxDequeueCount as well: leave poison= out of the connection (or give it "
                    "poison=service) to use the policy, or remove the policy"
                )
            return None
        if not limit:
            return (
                f"queue {queue!r} has no redrive policy, so with poison=service a poison message would come back "
                "for ever: give it one, or leave poison= out of the connection to keep poison in "
                f"{queue!r}'s poison queue"
            )
        if limit != max_dequeue_count:
            return (
                f"queue {queue!r}'s redrive policy moves a message after {limit} receives, but maxDequeueCount is "
                f"{max_dequeue_count}: make them equal"
            )
        return None

    async def dead_letter_count(self, queue: str) -> int:
        target = await self.dead_letter_queue(queue)
        if target is None:
            raise InvalidArgument(f"queue {queue!r} has no redrive policy, so no dead-letter queue")
        return await self.approximate_count(target)

    async def purge_dead_letters(self, queue: str) -> None:
        target = await self.dead_letter_queue(queue)
        if target is None:
            raise InvalidArgument(f"queue {queue!r} has no redrive policy, so no dead-letter queue")
        await self._call(lambda: self.client().purge_queue(QueueUrl=self._url(target)), target)

    async def close(self) -> None:
        """Refuse new calls; wait (up to a long poll's whole wait and :data:`RELEASE_MARGIN`) until every cancelled
        receive has ended and its messages are released; then drop the threads and the client."""
        await self._calls.close(self.limits.long_poll + RELEASE_MARGIN)
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def json_field(text: str, key: str) -> Any:
    """One field of a JSON attribute value (a redrive policy); None where the text is not a JSON object."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value.get(key) if isinstance(value, dict) else None

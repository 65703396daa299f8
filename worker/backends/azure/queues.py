"""Azure Storage Queues through azure-storage-queue's asyncio client.

The SDK's retries are off: the shared policy (:mod:`worker.backends.retrying`) replaces them.
Azure's error codes map onto the protocol's errors, so "lease lost" reads the same on every backend.
Message text passes untouched: messageEncoding applies above this layer.
A receive cancelled under way runs on; what it brings is released (:mod:`worker.backends.releasing`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any, TypeVar
from urllib.parse import urlsplit

import structlog
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.storage.queue import QueueMessage as SdkMessage
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from worker.backends.azure.connection import AZURE_CAPABILITIES, AZURE_LIMITS, DEV_QUEUE_ENDPOINT, AzureConnection
from worker.backends.azure.errors import (
    READ_TIMEOUT,
    Transport,
    describe_failure,
    env_settings_wanted,
    error_code,
    failure_kind,
    is_transient,
    may_have_acted,
)
from worker.backends.azure.messages import Messages, fast_path_problem, queue_messages, sdk_raw, unsettled
from worker.backends.failures import CONNECT_TIMEOUT, ConnectionStringError
from worker.backends.queues import (
    InvalidArgument,
    MessageNotFound,
    MessageTooLarge,
    PopReceiptMismatch,
    QueueError,
    QueueNotFound,
    RawMessage,
    Receipt,
    check_no_channel,
    check_no_properties,
    check_target,
)
from worker.backends.releasing import CancelledReceives, release_now
from worker.backends.retrying import RETRY_ATTEMPTS as RETRY_ATTEMPTS  # re-exported: the fault tests count attempts
from worker.backends.retrying import Retrier

log = structlog.get_logger("worker.backends.azure.queues")

#: Set to 0 to use the SDK's public receive and delete even where the fast path proves itself (a switch for a
#: suspected fault of the fast path, and for the tests, which run both).
FAST_PATH_ENV = "WORKER_AZURE_FAST_PATH"

T = TypeVar("T")


def _protocol_error(exc: AzureError, queue: str, message_id: str | None = None) -> QueueError:
    """The protocol's error for an SDK error that is not transient."""
    code = error_code(exc) if isinstance(exc, HttpResponseError) else ""
    status = getattr(exc, "status_code", None)
    subject = f"message {message_id} in queue {queue!r}" if message_id else f"queue {queue!r}"
    if code == "QueueNotFound":
        return QueueNotFound(f"queue {queue!r} does not exist")
    if code == "MessageNotFound":
        return MessageNotFound(f"{subject} is gone")
    if code == "PopReceiptMismatch":
        return PopReceiptMismatch(f"pop receipt for {subject} is stale")
    if code == "RequestBodyTooLarge" or status == 413:
        return MessageTooLarge(f"message is larger than the service accepts ({AZURE_LIMITS.max_message_bytes} bytes)")
    if status == 404:
        return (MessageNotFound if message_id else QueueNotFound)(f"{subject} was not found")
    if status == 400 or code in {"OutOfRangeInput", "OutOfRangeQueryParameterValue", "InvalidResourceName"}:
        return InvalidArgument(f"storage refused the request for {subject}: {describe_failure(exc)}")
    return QueueError(f"storage call for {subject} failed: {describe_failure(exc)}")


def _seconds(value: float) -> int:
    """Azure takes whole seconds: round up, so a lease is never shorter than asked."""
    return math.ceil(value)


class QueueTransport(Transport):
    """The queue service's transport: no DELETE or PUT of a message leaves without its id and receipt
    (:func:`~worker.backends.azure.messages.unsettled`), whoever built the request (the fast path or the SDK)."""

    def __init__(self, endpoint: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._base = urlsplit(endpoint).path.strip("/")

    async def send(self, request: Any, **kwargs: Any) -> Any:
        if problem := unsettled(self._base, request.method, request.url):
            raise InvalidArgument(problem)
        return await super().send(request, **kwargs)


class AzureBackend:
    """Queues of one storage account; implements :class:`worker.backends.queues.QueueBackend`."""

    limits = AZURE_LIMITS
    capabilities = AZURE_CAPABILITIES
    service_dead_letters = False
    messaging_system = "azure_queue"

    def __init__(self, connection: AzureConnection, on_retry: Callable[[str], None] | None = None) -> None:
        self.connection = connection
        endpoint = connection.queue_endpoint
        if endpoint is None:  # the registry refuses such a connection for queues before it gets here
            raise ConnectionStringError("connection string has no QueueEndpoint (nor an AccountName to derive one from)")
        self._service = QueueServiceClient(
            endpoint,
            credential=connection.credential(),
            retry_total=0,
            transport=QueueTransport(
                endpoint,
                connection_timeout=CONNECT_TIMEOUT,
                read_timeout=READ_TIMEOUT,
                use_env_settings=env_settings_wanted(),
            ),
        )
        #: Get Messages and Delete Message beside the SDK's generated layer, where that proves itself at start.
        self.fast_path = self._fast_path()
        self._queues: dict[str, QueueClient] = {}
        #: Get Messages and Delete Message per queue (worker.backends.azure.messages).
        self._messages: dict[str, Messages] = {}
        self._retrier = Retrier(
            is_transient=is_transient, failure_kind=failure_kind, may_have_acted=may_have_acted, on_retry=on_retry, log=log
        )
        self._cancelled = CancelledReceives()

    def __repr__(self) -> str:
        return f"AzureBackend({self.connection.describe()})"

    def _queue(self, name: str) -> QueueClient:
        client = self._queues.get(name)
        if client is None:
            client = self._queues[name] = self._service.get_queue_client(name)
        return client

    def _fast_path(self) -> bool:
        if os.environ.get(FAST_PATH_ENV, "1") == "0":
            return False
        if (problem := fast_path_problem(self._service.get_queue_client("messages"))) is None:
            return True
        log.warning(
            "the SDK's requests are not laid out as the fast path expects; using its public receive and delete",
            problem=problem,
            azure_storage_queue=version("azure-storage-queue"),
            azure_core=version("azure-core"),
        )
        return False

    def _requests(self, queue: str) -> Messages:
        requests = self._messages.get(queue)
        if requests is None:
            requests = self._messages[queue] = queue_messages(self._queue(queue), self.fast_path)
        return requests

    async def _call(
        self, call: Callable[[], Awaitable[T]], queue: str, message_id: str | None = None, *, put: bool = False
    ) -> T:
        """Run one storage call with the shared retry policy; map what still fails onto the protocol's errors.

        ``put``: the call stores a message (Put Message has no retry token); it is sent again only after a
        failure that sent nothing of it.
        """
        return await self._retrier.call(
            call,
            unreachable=lambda exc: self._unreachable(queue, exc),
            protocol_error=lambda exc: _protocol_error(exc, queue, message_id) if isinstance(exc, AzureError) else None,
            unsure=(lambda exc: self._unsure_put(queue, exc)) if put else None,
        )

    def _unsure_put(self, queue: str, exc: BaseException) -> str:
        return (
            f"put to queue {queue!r} on storage {self.connection.queue_endpoint} failed after its request was sent "
            f"({describe_failure(exc)}): the message may have been stored (Put Message takes no retry token), so this "
            "call does not repeat it; sending it again may store it twice"
        )

    def _unreachable(self, queue: str, exc: BaseException) -> str:
        """Why storage could not be used: its endpoint and the cause (refused, not resolved, TLS, sign-in ...)."""
        cause = describe_failure(exc)
        hint = ""
        if self.connection.queue_endpoint == DEV_QUEUE_ENDPOINT and cause == "connection refused":
            # UseDevelopmentStorage=true, as every local.settings.json template has it, with no emulator running.
            hint = (
                "; nothing listens on the storage emulator's port: start Azurite, or use sqlite:///<file> "
                "for the embedded queue"
            )
        return f"storage {self.connection.queue_endpoint} unreachable for queue {queue!r}: {cause}{hint}"

    # -- queues -----------------------------------------------------------------------------------------------

    async def create_queue(self, queue: str) -> None:
        self.limits.check_name(queue)

        async def create() -> None:
            try:
                await self._queue(queue).create_queue()
            except ResourceExistsError:
                pass

        await self._call(create, queue)

    async def delete_queue(self, queue: str) -> None:
        async def delete() -> None:
            try:
                await self._queue(queue).delete_queue()
            except ResourceNotFoundError:
                pass

        await self._call(delete, queue)

    async def list_queues(self) -> list[str]:
        async def names() -> list[str]:
            return sorted([q.name async for q in self._service.list_queues()])

        return await self._call(names, "(all)")

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
        check_no_channel(channel, "Azure Storage")
        check_no_properties(properties, "Azure Storage")
        self.limits.check_put(content, visibility_timeout, time_to_live)
        ttl = None if time_to_live is None else (-1 if time_to_live == -1 else _seconds(time_to_live))

        async def send() -> SdkMessage:
            return await self._queue(queue).send_message(
                content, visibility_timeout=_seconds(visibility_timeout) or None, time_to_live=ttl
            )

        return sdk_raw(await self._call(send, queue, put=True), content)

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float,
        *,
        wait: float = 0,
        channel: str | None = None,
    ) -> list[RawMessage]:
        """``wait`` is ignored: the service cannot wait (``limits.long_poll`` is 0)."""
        check_no_channel(channel, "Azure Storage")
        self.limits.check_count(max_messages)
        self.limits.check_visibility(visibility_timeout, 1)

        requests, seconds = self._requests(queue), _seconds(visibility_timeout)

        async def receive() -> list[RawMessage]:
            return await requests.receive(max_messages, seconds)

        return await self._cancelled.run(
            self._call(receive, queue), lambda got: release_now(self, queue, got, "messages of a cancelled receive", log)
        )

    async def update(
        self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float, content: str | None = None
    ) -> Receipt:
        check_target("visibility change", queue, message_id, pop_receipt)
        self.limits.check_visibility(visibility_timeout, 0)
        if content is not None:
            self.limits.check_size(content)

        async def update() -> SdkMessage:
            return await self._queue(queue).update_message(
                message_id, pop_receipt, content, visibility_timeout=_seconds(visibility_timeout)
            )

        updated = await self._call(update, queue, message_id)
        return Receipt(updated.pop_receipt or "", updated.next_visible_on or datetime.now(UTC))

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        check_target("delete", queue, message_id, pop_receipt)
        requests = self._requests(queue)
        attempts = 0

        async def delete() -> None:
            nonlocal attempts
            attempts += 1
            try:
                await requests.delete(message_id, pop_receipt)
            except ResourceNotFoundError as exc:
                # A retried delete that finds nothing: the first attempt deleted it and its answer was lost.
                if attempts == 1 or error_code(exc) != "MessageNotFound":
                    raise

        await self._call(delete, queue, message_id)

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        self.limits.check_count(max_messages)

        async def peek() -> list[SdkMessage]:
            return await self._queue(queue).peek_messages(max_messages=max_messages)

        return [sdk_raw(m) for m in await self._call(peek, queue)]

    async def approximate_count(self, queue: str) -> int:
        async def count() -> int:
            properties = await self._queue(queue).get_queue_properties()
            return int(properties.approximate_message_count or 0)

        return await self._call(count, queue)

    async def close(self) -> None:
        """Wait for the releases of cancelled receives (:data:`worker.backends.releasing.RELEASE_WAIT` at most), then
        close the clients."""
        await self._cancelled.wait()
        for client in self._queues.values():
            await client.close()
        await self._service.close()
        await self.connection.close()

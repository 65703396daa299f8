"""OCI Queue through the official SDK (``oci.queue``), which is synchronous: every call runs in a thread.

The SDK's retries and circuit breaker are off; the shared policy applies (:mod:`worker.backends.retrying`).
This module holds threads, clients and messages; sign-in is ``auth``, the control plane ``admin`` (mixed in).
Each thread has its own clients (``requests`` sessions are not shared); calls run by :mod:`worker.backends.blocking`.
A cancelled receive runs on; what it brings is released, and :meth:`OciBackend.close` waits for that.
A ``queueName`` is an ACTIVE queue's display name in the compartment, or its OCID.
OCI has no per-message TTL, initial invisibility or peek; its own dead-letter queue is used.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import oci
import structlog

from worker.backends.blocking import BlockingCalls
from worker.backends.failures import first_line
from worker.backends.oci.admin import QueueAdmin
from worker.backends.oci.auth import client_kwargs, identity, sign_in
from worker.backends.oci.calls import sending, track_sending
from worker.backends.oci.connection import OCI_CAPABILITIES, OCI_LIMITS, PROFILE_AUTH, RELEASE_MARGIN, OciConnection
from worker.backends.oci.errors import (
    answer_error,
    describe,
    failure_kind,
    is_transient,
    may_have_acted,
    origin,
    region_of,
    retry_after,
    worth_retrying,
)
from worker.backends.queues import (
    InvalidArgument,
    MessageCounts,
    MessageNotFound,
    MessageTooLarge,
    QueueError,
    RawMessage,
    Receipt,
    Unsupported,
    check_no_properties,
    check_target,
)
from worker.backends.receipts import Receipts
from worker.backends.retrying import Retrier

log = structlog.get_logger("worker.backends.oci.queues")

T = TypeVar("T")

#: Threads for ordinary calls (everything but long polls), each with its own clients.
THREADS = 8


def _seconds(value: float) -> int:
    """OCI takes whole seconds: round up, so a lease is never shorter than asked (as for Azure)."""
    return math.ceil(value)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _raw(message: Any) -> RawMessage:
    return RawMessage(
        id=str(message.id),
        content=message.content,
        dequeue_count=message.delivery_count or 0,
        insertion_time=_utc(message.created_at) or datetime.now(UTC),
        expiration_time=_utc(message.expire_after),
        time_next_visible=_utc(message.visible_after),
        pop_receipt=message.receipt,
    )


class OciBackend(QueueAdmin):
    """Queues of one OCI compartment; implements :class:`worker.backends.queues.QueueBackend`."""

    limits = OCI_LIMITS
    capabilities = OCI_CAPABILITIES
    messaging_system = "oci_queue"

    def __init__(self, connection: OciConnection, on_retry: Callable[[str], None] | None = None) -> None:
        self.connection = connection
        self.limits = connection.limits
        #: ``poison=service`` leaves poison to the queue's own dead-letter queue.
        self.service_dead_letters = connection.poison == "service"
        self._retrier = Retrier(
            is_transient=is_transient,
            worth_retrying=worth_retrying,
            failure_kind=failure_kind,
            may_have_acted=may_have_acted,
            retry_after=retry_after,
            on_retry=on_retry,
            log=log,
        )
        self._local = threading.local()
        self._lock = threading.Lock()
        self._auth: tuple[dict[str, Any], Any] | None = None
        self._clients: list[Any] = []
        self._admin_endpoint = connection.admin_endpoint
        #: Queue OCIDs by display name.
        self._ids: dict[str, str] = {}
        #: Messages endpoints by queue OCID.
        self._endpoints: dict[str, str] = {}
        self._receipts = Receipts()
        self._calls = BlockingCalls(
            repr(self),
            "oci-queue",
            THREADS,
            logger=log,
            on_error=self._note_endpoint,
            on_thread_exit=self._drop_thread_clients,
        )

    def __repr__(self) -> str:
        return f"OciBackend({self.connection.describe()})"

    # -- sign-in and clients (in the calling thread: these block) -------------------------------------------

    def _sign_in(self) -> tuple[dict[str, Any], Any]:
        """The SDK config and signer, made once: reading the key, or asking the instance or resource for a token."""
        with self._lock:
            if self._auth is None:
                if self.connection.auth not in PROFILE_AUTH:  # a failure names where it signed in
                    self._local.endpoint = f"OCI sign-in ({self.connection.auth.replace('_', ' ')})"
                self._auth = sign_in(self.connection)
            return self._auth

    def _messages(self, endpoint: str) -> Any:
        """This thread's data-plane client for one messages endpoint."""
        clients = getattr(self._local, "messages", None)
        if clients is None:
            clients = self._local.messages = {}
        client = clients.get(endpoint)
        if client is None:
            config, signer = self._sign_in()
            client = oci.queue.QueueClient(config, service_endpoint=endpoint, **client_kwargs(signer, self.limits.long_poll))
            track_sending(client)
            self._keep(client)
            clients[endpoint] = client
        self._local.endpoint = endpoint
        return client

    def _on_queue(self, queue: str, call: Callable[[Any, str], T], *, receipt: bool = False) -> T:
        """``call(client, queue_id)``: one data-plane call at the queue's own messages endpoint (blocking).

        A 404 there may mean the queue is served elsewhere now (the endpoint cached was another cell's): the
        endpoint is looked up again, and if it moved the call is made once more at the new one. Otherwise the 404
        stands (a queue GetQueue no longer finds answers its own 404 from there), marked ``queue_gone``.

        For a call with a ``receipt`` a 404 is far more often the receipt's (a lost lease): one GetStats at the
        same endpoint tells, so that a burst of lost leases costs data-plane calls, not the control plane's.
        """
        queue_id = self._resolve(queue)
        endpoint = self._messages_endpoint(queue_id)
        client = self._messages(endpoint)
        try:
            return call(client, queue_id)
        except oci.exceptions.ServiceError as exc:
            if exc.status != 404 or (receipt and _serves(client, queue_id)):
                raise
            try:
                moved = self._messages_endpoint(queue_id, refresh=True)
            except oci.exceptions.ServiceError as lookup:
                lookup.queue_gone = lookup.status == 404
                raise
            if moved == endpoint:
                exc.queue_gone = True
                raise
        return call(self._messages(moved), queue_id)

    def _admin(self) -> Any:
        """This thread's control-plane client (queues: list, create, delete, purge, work requests)."""
        client = getattr(self._local, "admin", None)
        if client is None:
            config, signer = self._sign_in()
            extra = {"service_endpoint": self.connection.admin_endpoint} if self.connection.admin_endpoint else {}
            try:
                client = oci.queue.QueueAdminClient(config, **extra, **client_kwargs(signer, self.limits.long_poll))
            except (ValueError, KeyError, oci.exceptions.ClientError) as exc:
                where = (
                    "OCI_RESOURCE_PRINCIPAL_REGION in the environment (OKE does not set it)"
                    if self.connection.auth in ("resource_principal", "oke_workload_identity")
                    else "a region in the profile"
                )
                raise QueueError(
                    f"no OCI Queue admin endpoint: give adminEndpoint= in the connection or {where} "
                    f"({type(exc).__name__}: {first_line(exc)})"
                ) from None
            self._admin_endpoint = client.base_client.endpoint
            self._keep(client)
            self._local.admin = client
        self._local.endpoint = self._admin_endpoint
        return client

    def _keep(self, client: Any) -> None:
        with self._lock:
            self._clients.append(client)

    def _drop_thread_clients(self) -> None:
        """Close this thread's clients (a long-poll thread that ends)."""
        messages = getattr(self._local, "messages", None) or {}
        admin = getattr(self._local, "admin", None)
        self._local.messages = self._local.admin = None
        for client in [*messages.values(), *([admin] if admin is not None else [])]:
            with self._lock:
                if client in self._clients:
                    self._clients.remove(client)
            _close_client(client)

    # -- running calls ------------------------------------------------------------------------------------------

    def _note_endpoint(self, exc: BaseException) -> None:
        """In a failed call's thread: the endpoint this thread called last, for the error, unless the SDK named one."""
        if getattr(exc, "oci_endpoint", None) is None:
            try:
                exc.oci_endpoint = getattr(self._local, "endpoint", None)  # type: ignore[attr-defined]
            except AttributeError:  # pragma: no cover - exceptions with __slots__
                pass

    async def _call(
        self,
        fn: Callable[[], T],
        queue: str,
        *,
        message_id: str | None = None,
        receipt: str | None = None,
        put: bool = False,
        long: bool = False,
        release: Callable[[T], None] | None = None,
    ) -> T:
        """Run one blocking SDK call in a thread under the shared retry policy; map failures onto the protocol's.

        ``put``: the call stores a message, which no retry token makes safe to repeat; it is sent again only
        after a failure that sent nothing of it.
        """
        return await self._retrier.call(
            lambda: self._calls.run(fn, long=long, release=release),
            unreachable=lambda exc: self._unreachable(queue, exc),
            protocol_error=lambda exc: self._protocol_error(exc, queue, message_id, receipt, put),
            unsure=(lambda exc: self._unsure_put(queue, exc)) if put else None,
        )

    def _protocol_error(
        self, exc: BaseException, queue: str, message_id: str | None, receipt: str | None, put: bool
    ) -> QueueError | None:
        """The protocol's error for a service answer that is not transient; None for what is not an answer."""
        if not isinstance(exc, oci.exceptions.ServiceError):
            return None
        queue_gone = exc.status == 404 and (message_id is None or getattr(exc, "queue_gone", False))
        if queue_gone:  # it may have been deleted and made again under the same name, elsewhere
            self._endpoints.pop(self._ids.pop(queue, queue), None)
        stale = bool(message_id and receipt and self._receipts.replaced(queue, message_id, receipt))
        return answer_error(
            exc,
            queue,
            message_id,
            put=put,
            stale_receipt=stale,
            endpoint=self._endpoint(exc),
            identity=identity(self.connection),
            compartment=self.connection.compartment_id,
            max_message_bytes=self.limits.max_message_bytes,
            region_hint=self._region_hint(),
        )

    def _region_hint(self) -> str:
        """Why a queue may not be found: the connection's messages endpoint names another region than the one signed
        in to, whose admin endpoint is where queues are looked up by default. Empty when they agree or either is
        unknown."""
        endpoint_region = region_of(self.connection.messages_endpoint)
        signed_in = (self._auth[0].get("region") if self._auth else None) or None
        if not endpoint_region or not signed_in or endpoint_region == signed_in:
            return ""
        return (
            f"; the connection's messages endpoint is in region {endpoint_region}, but the sign-in's region is "
            f"{signed_in}: sign in to {endpoint_region} (a profile or principal of that region), or give "
            f"adminEndpoint= of {endpoint_region}"
        )

    def _endpoint(self, exc: BaseException) -> str:
        """Which endpoint a failed call went to: the one the SDK names, else the client's, else the messages one."""
        return (
            origin(getattr(exc, "request_endpoint", None))
            or getattr(exc, "oci_endpoint", None)
            or self.connection.messages_endpoint
        )

    def _unsure_put(self, queue: str, exc: BaseException) -> str:
        return (
            f"put to queue {queue!r} on OCI Queue {self._endpoint(exc)} failed after its request was sent "
            f"({describe(exc)}): the message may have been stored (PutMessages takes no retry token), so this call "
            "does not repeat it; sending it again may store it twice"
        )

    def _unreachable(self, queue: str, exc: BaseException) -> str:
        """Why OCI Queue could not be used: its endpoint and the cause (refused, not resolved, TLS, 503 ...)."""
        return f"OCI Queue {self._endpoint(exc)} unreachable for queue {queue!r}: {describe(exc)}"

    # -- messages -----------------------------------------------------------------------------------------------

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
        # OCI Queue's message metadata holds custom properties only beside a channel ID (its model requires one), so
        # this backend does not carry them yet (``capabilities.message_properties`` is off).
        check_no_properties(properties, "OCI Queue")
        self.limits.check_size(content)
        self.limits.check_visibility(visibility_timeout, 0)
        if visibility_timeout > 0 or time_to_live is not None:
            raise Unsupported(
                "OCI Queue has no per-message delay or time to live: a message is visible at once and kept for "
                "the queue's retention period"
            )
        metadata = oci.queue.models.MessageMetadata(channel_id=channel) if channel is not None else None
        details = oci.queue.models.PutMessagesDetails(
            messages=[oci.queue.models.PutMessagesDetailsEntry(content=content, metadata=metadata)]
        )

        def send() -> Any:
            with sending():
                return self._on_queue(queue, lambda client, queue_id: client.put_messages(queue_id, details)).data.messages[
                    0
                ]

        try:
            sent = await self._call(send, queue, put=True)
        except InvalidArgument as exc:
            size = len(content.encode("utf-8"))
            if isinstance(exc, Unsupported) or size <= OCI_LIMITS.max_message_bytes:
                raise
            # The service's wording for a message too large is not documented (the test server's names no size
            # word): a put refused as invalid after passing every check here, past the 256 KiB a queue takes without
            # LARGE_MESSAGES, is read as too large for this queue.
            raise MessageTooLarge(
                f"OCI Queue refused a message of {size} bytes for queue {queue!r}, more than the "
                f"{OCI_LIMITS.max_message_bytes} bytes a queue takes without the LARGE_MESSAGES capability; this "
                f"connection's maxMessageBytes is {self.limits.max_message_bytes} ({exc})"
            ) from None
        now = datetime.now(UTC)
        return RawMessage(
            id=str(sent.id),
            content=content,
            dequeue_count=0,
            insertion_time=now,
            expiration_time=_utc(sent.expire_after),
            time_next_visible=now,
            pop_receipt=None,
        )

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float,
        *,
        wait: float = 0,
        channel: str | None = None,
    ) -> list[RawMessage]:
        """With ``wait`` > 0 the service holds the request until a message is visible (up to ``limits.long_poll``).

        ``channel`` takes messages of that channel only (GetMessages' ``channelFilter``).
        """
        self.limits.check_count(max_messages)
        self.limits.check_visibility(visibility_timeout, 1)
        visibility = _seconds(visibility_timeout)
        # Always explicit: left out, the service waits for the queue's own long-poll timeout.
        timeout = int(min(max(wait, 0), self.limits.long_poll))

        def get() -> tuple[str, list[Any]]:
            return self._on_queue(
                queue,
                lambda client, queue_id: (
                    queue_id,
                    list(
                        client.get_messages(
                            queue_id,
                            visibility_in_seconds=visibility,
                            timeout_in_seconds=timeout,
                            limit=max_messages,
                            **({"channel_filter": channel} if channel is not None else {}),
                        ).data.messages
                        or []
                    ),
                ),
            )

        _, messages = await self._call(get, queue, long=timeout > 0, release=self._release)
        received = [_raw(m) for m in messages]
        for message in received:
            if message.pop_receipt:
                self._receipts.received(queue, message.id, message.pop_receipt)
        return received

    def _release(self, got: tuple[str, list[Any]]) -> None:
        """Make messages whose receiver has gone visible again at once (in a thread), so none waits out its lease."""
        queue_id, messages = got
        if not messages:
            return
        entries = [oci.queue.models.UpdateMessagesDetailsEntry(receipt=m.receipt, visibility_in_seconds=0) for m in messages]
        try:
            result = (
                self._messages(self._messages_endpoint(queue_id))
                .update_messages(queue_id, oci.queue.models.UpdateMessagesDetails(entries=entries))
                .data
            )
        except Exception as exc:
            log.warning(
                "messages of a cancelled receive could not be released; they return when their lease ends",
                queue_id=queue_id,
                count=len(messages),
                error=describe(exc),
            )
            return
        # UpdateMessages answers 200 when some entries failed: each result carries its own errorCode.
        failed = [
            (message, entry)
            for message, entry in zip(messages, result.entries or [], strict=False)
            if entry.error_code is not None
        ]
        if not failed and not (result.client_failures or result.server_failures):
            log.info("messages of a cancelled receive released", queue_id=queue_id, count=len(messages))
            return
        log.warning(
            "some messages of a cancelled receive could not be released; they return when their lease ends",
            queue_id=queue_id,
            released=len(messages) - len(failed),
            not_released=len(failed),
            client_failures=result.client_failures,
            server_failures=result.server_failures,
            errors=sorted({f"{entry.error_code} {first_line(entry.error_message or '')}".strip() for _, entry in failed}),
            message_ids=[str(message.id) for message, _ in failed],
        )

    async def update(
        self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float, content: str | None = None
    ) -> Receipt:
        """OCI keeps the receipt across updates (``capabilities.new_receipt_on_update`` is False), and its
        UpdateMessage takes a visibility only: new content is refused before any request."""
        check_target("visibility change", queue, message_id, pop_receipt)
        if content is not None:
            raise Unsupported("OCI Queue cannot change a message's content: its UpdateMessage sets the visibility only")
        self.limits.check_visibility(visibility_timeout, 0)
        self._check_owner(queue, message_id, pop_receipt)
        details = oci.queue.models.UpdateMessageDetails(visibility_in_seconds=_seconds(visibility_timeout))

        def update() -> Any:
            return self._on_queue(
                queue, lambda client, queue_id: client.update_message(queue_id, pop_receipt, details), receipt=True
            ).data

        updated = await self._call(update, queue, message_id=message_id, receipt=pop_receipt)
        return Receipt(pop_receipt, _utc(updated.visible_after) or datetime.now(UTC))

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """A retried delete whose receipt is refused raises that refusal (MessageNotFound): an earlier attempt may
        have deleted it, or the lease ran out and another consumer holds the message now. Only the lease's own
        clock tells which (:meth:`worker.runtime.completion.CompletionProcessor._delete`), so the refusal is not
        taken for a success here."""
        check_target("delete", queue, message_id, pop_receipt)
        self._check_owner(queue, message_id, pop_receipt)

        def delete() -> None:
            self._on_queue(queue, lambda client, queue_id: client.delete_message(queue_id, pop_receipt), receipt=True)

        await self._call(delete, queue, message_id=message_id, receipt=pop_receipt)
        self._receipts.deleted(queue, message_id)

    def _check_owner(self, queue: str, message_id: str, pop_receipt: str) -> None:
        """Refuse a receipt this backend knows to be another message's: OCI would act on that other message."""
        owner = self._receipts.owner(pop_receipt)
        if owner is not None and owner != message_id:
            raise MessageNotFound(
                f"message {message_id} in queue {queue!r} has no delivery with this receipt (it is message {owner}'s)"
            )

    async def peek(self, queue: str, max_messages: int = 1) -> list[RawMessage]:
        raise Unsupported(
            "OCI Queue cannot show messages without receiving them: its visibility-0 receive counts as a delivery"
        )

    async def approximate_count(self, queue: str) -> int:
        def count() -> int:
            stats = self._on_queue(queue, lambda client, queue_id: client.get_stats(queue_id)).data.queue
            return int(stats.visible_messages or 0) + int(stats.in_flight_messages or 0)

        return await self._call(count, queue)

    async def message_counts(self, queue: str) -> MessageCounts:
        def count() -> MessageCounts:
            stats = self._on_queue(queue, lambda client, queue_id: client.get_stats(queue_id)).data.queue
            return MessageCounts(visible=int(stats.visible_messages or 0), invisible=int(stats.in_flight_messages or 0))

        return await self._call(count, queue)

    async def close(self) -> None:
        """Refuse new calls; wait (up to a long poll's whole wait and :data:`RELEASE_MARGIN`) until every cancelled
        receive has ended and its messages are released; then drop the threads and clients.

        A long poll cancelled at shutdown is still open at the service, which may hand it messages up to its
        end; closing before it answers would leave them hidden for their whole visibility, a delivery counted.
        """
        await self._calls.close(self.limits.long_poll + RELEASE_MARGIN)
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            _close_client(client)


def _serves(client: Any, queue_id: str) -> bool:
    """Whether ``client``'s messages endpoint still serves the queue (GetStats answers); any failure but a 404
    counts as yes, so that an unclear probe never costs a control-plane call."""
    try:
        client.get_stats(queue_id)
    except oci.exceptions.ServiceError as exc:
        return bool(exc.status != 404)
    except Exception:
        return True
    return True


def _close_client(client: Any) -> None:
    try:
        client.base_client.session.close()
    except Exception:  # pragma: no cover - closing is best effort
        pass

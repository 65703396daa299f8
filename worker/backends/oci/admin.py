"""OCI Queue's control plane for the backend: queue names to OCIDs and messages endpoints, create, delete, list, the
dead-letter queue.

These calls go to the admin endpoint (``QueueAdminClient``) and, for
creating, deleting and purging, wait on OCI work requests. They are mixed into
:class:`worker.backends.oci.queues.OciBackend`, whose threads, clients and
retry policy (``_call``, ``_admin``, ``_on_queue``) they run on; the messages
themselves (put, receive, update, delete) stay in that module.

Each queue's messages are served at its own messages endpoint, which "may be
different for different queues" (the SDK's ``QueueClient.get_messages``): the
one GetQueue gives as ``messagesEndpoint``, looked up once per queue and again
when the data plane no longer knows the queue there (:meth:`QueueAdmin._messages_endpoint`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import oci
import structlog

from worker.backends.oci.connection import OciConnection
from worker.backends.queues import InvalidArgument, Limits, QueueError, QueueNotFound

log = structlog.get_logger("worker.backends.oci.admin")

T = TypeVar("T")

#: How long creating or deleting a queue (an OCI work request) may take before it is reported as stuck.
WORK_REQUEST_SECONDS = 300.0
#: Polling a work request: the first pause, doubled up to the longest.
WORK_REQUEST_FIRST_POLL = 0.5
WORK_REQUEST_MAX_POLL = 5.0

OCID_PREFIX = "ocid1.queue."


class QueueAdmin:
    """The backend's queue-level operations; see the module docstring for what the backend provides."""

    connection: OciConnection
    limits: Limits
    #: Queue OCIDs by display name (the backend's; dropped when a call finds the queue gone).
    _ids: dict[str, str]
    #: Messages endpoints by queue OCID (GetQueue's ``messagesEndpoint``).
    _endpoints: dict[str, str]

    async def _call(self, fn: Callable[[], T], queue: str) -> T:
        raise NotImplementedError

    def _admin(self) -> Any:
        raise NotImplementedError

    def _on_queue(self, queue: str, call: Callable[[Any, str], T], *, receipt: bool = False) -> T:
        raise NotImplementedError

    def _region_hint(self) -> str:
        raise NotImplementedError

    def _list(self, **filters: Any) -> list[Any]:
        """Queue summaries of the compartment matching ``filters``, all pages (blocking)."""
        admin = self._admin()
        found: list[Any] = []
        page = None
        while True:
            response = admin.list_queues(compartment_id=self.connection.compartment_id, page=page, **filters)
            found.extend(response.data.items or [])
            page = response.next_page
            if not page:
                return found

    def _resolve(self, queue: str) -> str:
        """The OCID of ``queue``: as given, or the one ACTIVE queue of that display name (blocking)."""
        if queue.startswith(OCID_PREFIX):
            return queue
        queue_id = self._ids.get(queue)
        if queue_id is None:
            matches = [q for q in self._list(display_name=queue, lifecycle_state="ACTIVE") if q.display_name == queue]
            if not matches:
                raise QueueNotFound(
                    f"queue {queue!r} does not exist in compartment {self.connection.compartment_id} "
                    f"(no ACTIVE queue has that display name){self._region_hint()}"
                )
            if len(matches) > 1:
                raise QueueError(
                    f"{len(matches)} ACTIVE queues are named {queue!r} in compartment "
                    f"{self.connection.compartment_id} ({', '.join(sorted(q.id for q in matches))}): "
                    "name the queue by its OCID"
                )
            queue_id = self._ids[queue] = matches[0].id
        return queue_id

    def _messages_endpoint(self, queue_id: str, *, refresh: bool = False) -> str:
        """Where the queue's messages are served: GetQueue's ``messagesEndpoint``, cached unless ``refresh`` (blocking)."""
        endpoint = None if refresh else self._endpoints.get(queue_id)
        if endpoint is None:
            found = self._admin().get_queue(queue_id).data
            if not found.messages_endpoint:  # a queue still CREATING may have none yet
                raise QueueError(
                    f"queue {queue_id} has no messages endpoint yet (lifecycle state {found.lifecycle_state}): "
                    "its messages cannot be reached until it has one"
                )
            endpoint = self._endpoints[queue_id] = str(found.messages_endpoint)
        return endpoint

    # -- queues -------------------------------------------------------------------------------------------------

    async def create_queue(self, queue: str) -> None:
        self.limits.check_name(queue)
        if queue.startswith(OCID_PREFIX):
            try:
                await self._call(lambda: self._admin().get_queue(queue).data, queue)
            except QueueNotFound:
                raise InvalidArgument(f"no queue has the OCID {queue!r}: a queue is created by its display name") from None
            return

        def existing() -> list[Any]:
            states = ("ACTIVE", "CREATING", "UPDATING")
            return [q for q in self._list(display_name=queue) if q.display_name == queue and q.lifecycle_state in states]

        found = await self._call(existing, queue)
        if any(q.lifecycle_state == "ACTIVE" for q in found):
            return
        if not found:
            details = oci.queue.models.CreateQueueDetails(display_name=queue, compartment_id=self.connection.compartment_id)
            token = uuid.uuid4().hex  # one token for every attempt: a retried create makes one queue, not two
            response = await self._call(lambda: self._admin().create_queue(details, opc_retry_token=token), queue)
            work_request = response.headers.get("opc-work-request-id")
            if work_request:
                await self._wait_for(work_request, queue, "creating")
        await self._wait_active(queue)
        log.info("queue created", queue=queue, compartment=self.connection.compartment_id)

    async def _wait_active(self, queue: str) -> None:
        """Wait until ``queue`` resolves to an ACTIVE queue (creation reported done, or under way elsewhere)."""
        deadline = time.monotonic() + WORK_REQUEST_SECONDS
        pause = WORK_REQUEST_FIRST_POLL
        while True:
            try:
                await self._call(lambda: self._resolve(queue), queue)
                return
            except QueueNotFound:
                if time.monotonic() > deadline:
                    raise QueueError(f"queue {queue!r} did not become ACTIVE within {WORK_REQUEST_SECONDS:g}s") from None
            await asyncio.sleep(pause)
            pause = min(pause * 2, WORK_REQUEST_MAX_POLL)

    async def _wait_for(self, work_request: str, queue: str, doing: str) -> None:
        """Wait for an OCI work request (creating, deleting or purging a queue) to succeed."""
        deadline = time.monotonic() + WORK_REQUEST_SECONDS
        pause = WORK_REQUEST_FIRST_POLL
        while True:
            state = await self._call(lambda: self._admin().get_work_request(work_request).data, queue)
            status = state.status
            if status == "SUCCEEDED":
                return
            if status in ("FAILED", "CANCELED", "CANCELING"):
                why = await self._work_request_error(work_request, queue)
                raise QueueError(f"{doing} queue {queue!r} failed: work request {work_request} is {status}{why}")
            if time.monotonic() > deadline:
                raise QueueError(
                    f"{doing} queue {queue!r} did not finish within {WORK_REQUEST_SECONDS:g}s: work request "
                    f"{work_request} is {status} ({state.percent_complete or 0:g}% complete)"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, WORK_REQUEST_MAX_POLL)

    async def _work_request_error(self, work_request: str, queue: str) -> str:
        """The first error a failed work request reports, as ": <message>", or "" when it gives none."""
        try:
            errors = await self._call(lambda: self._admin().list_work_request_errors(work_request).data, queue)
        except QueueError:
            return ""
        items = getattr(errors, "items", None) or []
        return f": {items[0].message}" if items and getattr(items[0], "message", None) else ""

    async def delete_queue(self, queue: str) -> None:
        try:
            queue_id = await self._call(lambda: self._resolve(queue), queue)
            response = await self._call(lambda: self._admin().delete_queue(queue_id), queue)
        except QueueNotFound:
            return
        finally:
            self._endpoints.pop(self._ids.pop(queue, queue), None)
        work_request = response.headers.get("opc-work-request-id")
        if work_request:
            await self._wait_for(work_request, queue, "deleting")

    async def list_queues(self) -> list[str]:
        def names() -> list[str]:
            return sorted(q.display_name for q in self._list(lifecycle_state="ACTIVE"))

        return await self._call(names, "(all)")

    # -- the service's dead-letter queue ------------------------------------------------------------------------

    async def dead_letter_limit(self, queue: str) -> int:
        """Deliveries after which the service moves a message to the queue's dead-letter queue; 0: it has none."""

        def limit() -> int:
            return int(self._admin().get_queue(self._resolve(queue)).data.dead_letter_queue_delivery_count or 0)

        return await self._call(limit, queue)

    async def dead_letter_count(self, queue: str) -> int:
        """Messages in the queue's dead-letter queue, visible or not."""

        def count() -> int:
            stats = self._on_queue(queue, lambda client, queue_id: client.get_stats(queue_id)).data.dlq
            if stats is None:
                return 0
            return int(stats.visible_messages or 0) + int(stats.in_flight_messages or 0)

        return await self._call(count, queue)

    async def purge_dead_letters(self, queue: str) -> None:
        """Delete every message of the queue's dead-letter queue (and wait for the service to finish)."""
        details = oci.queue.models.PurgeQueueDetails(purge_type="DLQ")
        response = await self._call(lambda: self._admin().purge_queue(self._resolve(queue), details), queue)
        work_request = response.headers.get("opc-work-request-id")
        if work_request:
            await self._wait_for(work_request, queue, "purging the dead letters of")

"""Get Messages and Delete Message sent straight to a queue client's own pipeline: the worker's hot path.

Every message the host handles arrives in a Get Messages answer and ends in
one Delete Message. The SDK's ``QueueClient`` builds both through its generated
layer before the pipeline runs, and reads the answers back through it:

- a delete builds a case-insensitive dict for the headers and another for the
  parameters, runs the serializer for each value, parses the URL and joins it
  again, and deserializes the answer's headers into a dict that is then
  dropped: at 10 ms of latency about 0.07 ms of CPU per message
  (``bench/throughput.py``), a tenth of all the worker spends on one;
- a receive's answer becomes a generated model per message (a mapping behind
  field descriptors, each date through ``email.utils``), then an SDK
  ``QueueMessage``, then the protocol's ``RawMessage``: about 34 us of CPU per
  message, against about 6 us for reading the same XML with ElementTree into
  ``RawMessage`` directly.

:class:`MessageRequests` builds the same requests itself: the same method, URL
(the queue's address, a SAS token's query kept, then the operation's
parameters) and headers, byte for byte the SDK's, and reads a Get Messages
answer into the same values the SDK reads (tests/unit/test_azure_messages.py
compares both against the installed SDK). It sends them through the queue
client's own pipeline, so the credential's signing, the SDK's headers, retries
and transport are unchanged, and a refusal becomes the exception the SDK raises
(``process_storage_error``, as ``receive_messages`` and ``delete_message`` do).
One header differs in its value, not its form: the SDK gives each request an
``x-ms-client-request-id`` of ``str(uuid.uuid1())``, which asks the ``uuidd``
daemon over a socket every time (about 10 us where none runs, as in containers);
these requests carry a UUID-shaped id of their own, random per queue client
and counted per request, which the SDK takes as a caller's id.

The generated client and its configuration are private attributes of the SDK's
``QueueClient``. If a future SDK moves them, the Azure backend refuses to open
(it builds one at start for that reason), naming the SDK's version, and the test
above fails first. Nothing falls back to a path that is tested less.
"""

from __future__ import annotations

import itertools
import re
import uuid
from datetime import UTC, datetime
from urllib.parse import quote
from xml.etree import ElementTree

from azure.core import AsyncPipelineClient
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ResourceNotModifiedError,
    map_error,
)
from azure.core.rest import AsyncHttpResponse, HttpRequest
from azure.storage.queue import VERSION as sdk_version
from azure.storage.queue._shared.response_handlers import process_storage_error
from azure.storage.queue.aio import QueueClient

from worker.backends.queues import RawMessage

#: The generated operations' own mapping of statuses to exception types.
_ERRORS = {
    401: ClientAuthenticationError,
    404: ResourceNotFoundError,
    409: ResourceExistsError,
    304: ResourceNotModifiedError,
}

#: Text that ``quote(text, safe="")`` changes only by percent-encoding ``+``, ``/`` and ``=``: message ids (GUIDs) and
#: pop receipts (base64), i.e. every id and receipt Azure Storage hands out.
_PLAIN_OR_BASE64 = re.compile(r"[A-Za-z0-9_.~+/=-]*")

#: An RFC 1123 date as Azure Storage writes them ("Sat, 28 Nov 2026 23:21:12 GMT"): the pattern the SDK's generated
#: layer reads (on anything else its message model is left unread and reading it fails), with the fields captured.
_RFC1123 = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun),\s(\d{2})\s"
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s(\d{4})\s(\d{2}):(\d{2}):(\d{2})\sGMT"
)
_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}


def _quote(text: str) -> str:
    """``quote(text, safe="")``, the same text: for a receipt in a fifth of quote's time (one per message)."""
    if _PLAIN_OR_BASE64.fullmatch(text):
        return text.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    return quote(text, safe="")


class _Dates(dict[str, datetime]):
    """RFC 1123 dates read as the SDK reads them (``email.utils.parsedate_to_datetime``), each text once per answer:
    the messages of one answer mostly share their seconds (all of them their next-visible time)."""

    def __missing__(self, text: str) -> datetime:
        match = _RFC1123.match(text)
        if match is None:
            raise ValueError(f"Invalid datetime string: {text}")  # the SDK's own words for it
        day, month, year, hour, minute, second = match.groups()
        date = self[text] = datetime(int(year), _MONTHS[month], int(day), int(hour), int(minute), int(second),
                                     tzinfo=UTC)
        return date


def raw_message(
    message_id: str, content: str, dequeue_count: int | None, inserted_on: datetime | None,
    expires_on: datetime | None, next_visible_on: datetime | None, pop_receipt: str | None,
) -> RawMessage:
    """The protocol's message from Azure's fields, whether the SDK read them or :func:`received` did: a missing count
    reads as 0, a missing insertion time as now, and the year 9999's expiry (a message that never expires) as none."""
    return RawMessage(
        id=message_id,
        content=content,
        dequeue_count=dequeue_count or 0,
        insertion_time=inserted_on or datetime.now(UTC),
        expiration_time=None if expires_on is None or expires_on.year >= 9999 else expires_on,
        time_next_visible=next_visible_on,
        pop_receipt=pop_receipt,
    )


def _message(element: ElementTree.Element, dates: _Dates) -> RawMessage:
    """One ``QueueMessage`` element of a Get Messages answer, read as the SDK reads it."""
    inserted, expires, visible = (element.findtext("InsertionTime"), element.findtext("ExpirationTime"),
                                  element.findtext("TimeNextVisible"))
    count = element.findtext("DequeueCount")
    return raw_message(
        element.findtext("MessageId"),  # type: ignore[arg-type]  # always present, as for the SDK
        element.findtext("MessageText"),  # type: ignore[arg-type]
        int(count) if count else None,
        None if inserted is None else dates[inserted],
        None if expires is None else dates[expires],
        None if visible is None else dates[visible],
        element.findtext("PopReceipt"),
    )


def received(text: str) -> list[RawMessage]:
    """The messages of a Get Messages answer's body, in its order."""
    dates = _Dates()
    return [_message(element, dates) for element in ElementTree.fromstring(text).iterfind("QueueMessage")]


class MessageRequests:
    """Get Messages and Delete Message for one queue client, sent through its pipeline."""

    def __init__(self, client: QueueClient) -> None:
        try:
            generated = client._client  # the SDK's generated client: its pipeline and the queue's URL and version
            pipeline, url, version = generated._client, generated._config.url, generated._config.version
        except AttributeError as exc:
            pipeline = exc
        if not isinstance(pipeline, AsyncPipelineClient):
            raise RuntimeError(
                f"azure-storage-queue {sdk_version} is not laid out as this worker expects (the queue client's "
                f"generated client and configuration: {pipeline!r}); install a version the worker was tested with"
            )
        self._pipeline = pipeline
        self._version = version
        base, _, query = url.partition("?")  # a SAS token rides in the queue URL's query
        self._messages = f"{base.rstrip('/')}/messages"
        self._prefix = f"{self._messages}/"
        self._query = f"?{query}&" if query else "?"
        #: x-ms-client-request-id: a random UUID's first 24 characters, then a count in its last 12 hex digits.
        self._id_prefix = str(uuid.uuid4())[:24]
        self._ids = itertools.count(1)
        #: A request made by HttpRequest itself, whose state each delete's request copies (see :meth:`delete_request`).
        self._template = HttpRequest("DELETE", self._prefix, headers={"x-ms-version": version})
        if not isinstance(getattr(self._template, "__dict__", None), dict):
            raise RuntimeError(f"azure-core's HttpRequest keeps no __dict__ here (azure-storage-queue {sdk_version}); "
                               "install a version the worker was tested with")

    def receive_request(self, count: int, visibility_timeout: int) -> HttpRequest:
        """The Get Messages request, as the SDK's generated layer builds it (one per batch: made plainly)."""
        return HttpRequest(
            "GET", f"{self._messages}{self._query}numofmessages={count}&visibilitytimeout={visibility_timeout}",
            headers={"x-ms-version": self._version, "Accept": "application/xml"},
        )

    def delete_request(self, message_id: str, pop_receipt: str) -> HttpRequest:
        """The Delete Message request, as the SDK's generated layer builds it.

        Copied from the template with the message's URL and headers of its own (the pipeline adds to them), not
        made by ``HttpRequest()``, whose attribute hooks and body handling cost three times as much.
        """
        request: HttpRequest = object.__new__(HttpRequest)
        state = request.__dict__
        state.update(self._template.__dict__)
        state["url"] = f"{self._prefix}{_quote(message_id)}{self._query}popreceipt={_quote(pop_receipt)}"
        state["headers"] = self._template.headers.copy()
        return request

    def request_id(self) -> str:
        """The next request's ``x-ms-client-request-id``: unique, and shaped as the SDK's own."""
        return f"{self._id_prefix}{next(self._ids):012x}"

    async def receive(self, count: int, visibility_timeout: int) -> list[RawMessage]:
        """Up to ``count`` messages leased for ``visibility_timeout`` seconds; raises what ``receive_messages``
        raises for the same answer."""
        response = await self._pipeline.send_request(self.receive_request(count, visibility_timeout),
                                                     client_request_id=self.request_id())
        if response.status_code != 200:
            _raise_for(response)
        return received(response.text())

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        """Delete the message; raises what ``QueueClient.delete_message`` raises for the same answer."""
        response = await self._pipeline.send_request(self.delete_request(message_id, pop_receipt),
                                                     client_request_id=self.request_id())
        if response.status_code != 204:
            _raise_for(response)


def _raise_for(response: AsyncHttpResponse) -> None:
    """The exception the SDK raises for a refused request: its generated layer's, then ``process_storage_error``."""
    try:
        map_error(status_code=response.status_code, response=response, error_map=_ERRORS)
        raise HttpResponseError(response=response)
    except HttpResponseError as error:
        process_storage_error(error)

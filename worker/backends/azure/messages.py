"""Get Messages and Delete Message sent straight to the queue client's pipeline: the worker's hot path.

The SDK's generated layer costs CPU on every message (bench/README.md has the figures).
:class:`MessageRequests` builds the same requests, byte for byte, and reads answers as the SDK does.
They pass the client's own pipeline: signing, headers, retries and errors stay the SDK's.
One header differs: a cheap request id per client, not ``uuid1()``, which asks ``uuidd`` each time.
:func:`fast_path_problem` checks the SDK's private parts at start.
If anything differs, :class:`SdkMessages` (the public calls) serves, after one warning.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any, NoReturn, Protocol, cast
from urllib.parse import parse_qs, quote, urlsplit
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
from azure.storage.queue import QueueMessage as SdkMessage
from azure.storage.queue.aio import QueueClient

from worker.backends.queues import RawMessage

#: The installed azure-storage-queue's version, which the fast path's refusals name.
SDK_VERSION = version("azure-storage-queue")

#: The SDK's reading of a refused request; private: where a later SDK moves it, the fast path's self-check fails
#: and the public calls are used.
process_storage_error: Callable[[HttpResponseError], NoReturn] | None
try:
    from azure.storage.queue._shared.response_handlers import process_storage_error
except ImportError:
    process_storage_error = None


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
_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1
    )
}


def _quote(text: str) -> str:
    """``quote(text, safe="")``, the same text, with a shortcut for the receipts' usual alphabet (bench/README.md)."""
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
        date = self[text] = datetime(int(year), _MONTHS[month], int(day), int(hour), int(minute), int(second), tzinfo=UTC)
        return date


def raw_message(
    message_id: str,
    content: str,
    dequeue_count: int | None,
    inserted_on: datetime | None,
    expires_on: datetime | None,
    next_visible_on: datetime | None,
    pop_receipt: str | None,
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


def sdk_raw(message: SdkMessage, content: str | None = None) -> RawMessage:
    """The protocol's message from one the SDK read (``content``: the text put, where the answer has none)."""
    return raw_message(
        message.id,
        message.content if content is None else content,
        message.dequeue_count,
        message.inserted_on,
        message.expires_on,
        message.next_visible_on,
        message.pop_receipt,
    )


def _message(element: ElementTree.Element, dates: _Dates) -> RawMessage:
    """One ``QueueMessage`` element of a Get Messages answer, read as the SDK reads it."""
    inserted, expires, visible = (
        element.findtext("InsertionTime"),
        element.findtext("ExpirationTime"),
        element.findtext("TimeNextVisible"),
    )
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


class Messages(Protocol):
    """Get Messages and Delete Message of one queue: :class:`MessageRequests` or :class:`SdkMessages`."""

    async def receive(self, count: int, visibility_timeout: int) -> list[RawMessage]: ...

    async def delete(self, message_id: str, pop_receipt: str) -> None: ...


class RequestIds:
    """``x-ms-client-request-id`` values: a random UUID's first 24 characters, then a count in its last 12 hex digits.

    Unique, and shaped as the SDK's own ``str(uuid.uuid1())``, which asks the ``uuidd`` daemon over a socket for
    every request; the SDK takes one given as ``client_request_id`` as a caller's id.
    """

    def __init__(self) -> None:
        self._prefix = str(uuid.uuid4())[:24]
        self._ids = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._ids):012x}"


class SdkMessages:
    """Get Messages and Delete Message through the SDK's public API: where the fast path's self-check fails."""

    def __init__(self, client: QueueClient) -> None:
        self._client = client
        self._ids = RequestIds()

    async def receive(self, count: int, visibility_timeout: int) -> list[RawMessage]:
        pages = self._client.receive_messages(
            messages_per_page=count,
            max_messages=count,
            visibility_timeout=visibility_timeout,
            client_request_id=self._ids.next(),
        ).by_page()
        async for page in pages:  # one page is one request
            return [sdk_raw(m) async for m in page]
        return []

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        await self._client.delete_message(message_id, pop_receipt, client_request_id=self._ids.next())


#: The ids and receipts the self-check builds requests for: every character a URL treats specially among them.
_PROBES = (("7d3c59a8-3f5e-4f0b-9c1e-0c2b5f0e8a11", "AgAAAAMAAAAAAAAA+/=="), ("a+b/c=d?e&f#g", "plain receipt"))


def fast_path_problem(client: QueueClient) -> str | None:
    """Why :class:`MessageRequests` cannot be trusted with this SDK and azure-core, or None when its requests are
    proved right: built for known ids and receipts, read back through ``HttpRequest``'s public attributes."""
    try:
        if process_storage_error is None:
            return "azure.storage.queue._shared.response_handlers.process_storage_error is gone"
        requests = MessageRequests(client)
        problems = _request_problems(
            requests.receive_request(3, 30), "GET", "", {"numofmessages": "3", "visibilitytimeout": "30"}, requests
        )
        deletes = [requests.delete_request(message_id, receipt) for message_id, receipt in _PROBES]
        for request, (message_id, receipt) in zip(deletes, _PROBES, strict=True):
            problems += _request_problems(request, "DELETE", message_id, {"popreceipt": receipt}, requests)
        deletes[0].headers["x-ms-probe"] = "1"
        if "x-ms-probe" in deletes[1].headers or deletes[0].url == deletes[1].url:
            problems.append("two delete requests share their state")
    except Exception as exc:  # any surprise at all: the public calls are used
        return f"{type(exc).__name__}: {exc}"
    return "; ".join(problems) or None


def _request_problems(
    request: HttpRequest, method: str, message_id: str, query: dict[str, str], requests: MessageRequests
) -> list[str]:
    """How ``request`` differs from a Get Messages (no ``message_id``) or Delete Message of the queue."""
    url = urlsplit(request.url)
    path = url.path.rstrip("/") if not message_id else url.path
    wanted = "/messages" + (f"/{quote(message_id, safe='')}" if message_id else "")
    got = {key: values[0] for key, values in parse_qs(url.query).items()}
    problems = []
    if request.method != method:
        problems.append(f"{method} request built as {request.method}")
    if not path.endswith(wanted):
        problems.append(f"{method} request's path is {url.path!r}, not .../messages{wanted.removeprefix('/messages')}")
    if any(got.get(key) != value for key, value in query.items()):
        problems.append(f"{method} request's query is {url.query!r}")
    if request.headers.get("x-ms-version") != requests.version:
        problems.append(f"{method} request has no x-ms-version {requests.version}")
    return problems


_POP_RECEIPT = re.compile(r"(?:^|&)popreceipt=[^&]")


def unsettled(base: str, method: str, url: str) -> str | None:
    """Why a request of the queue service must not leave: a DELETE or PUT of ``<queue>/messages`` without a message
    id (Clear Messages deletes every message of the queue) or without a ``popreceipt``; None for any other request.
    ``base``: the endpoint's own path (``devstoreaccount1`` on the emulator, empty on Azure)."""
    if method not in ("DELETE", "PUT"):
        return None
    address, _, query = url.partition("?")
    path = address.split("/", 3)[3] if address.count("/") >= 3 else ""
    if base and path.startswith(f"{base}/"):
        path = path[len(base) + 1 :]
    parts = path.split("/")
    if len(parts) < 2 or parts[1] != "messages":
        return None
    if len(parts) < 3 or not parts[2]:
        return f"a {method} of queue {parts[0]!r}'s messages without a message id was refused before it was sent"
    if not _POP_RECEIPT.search(query):
        return f"a {method} of message {parts[2]} in queue {parts[0]!r} without its pop receipt was refused"
    return None


def queue_messages(client: QueueClient, fast: bool) -> Messages:
    """The requests of ``client``'s queue: the fast path where :func:`fast_path_problem` proved it (``fast``)."""
    return MessageRequests(client) if fast else SdkMessages(client)


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
                f"azure-storage-queue {SDK_VERSION} is not laid out as this worker expects (the "
                f"queue client's generated client and configuration: {pipeline!r}); install a version the worker was "
                "tested with"
            )
        self._pipeline = pipeline
        self.version = version
        base, _, query = url.partition("?")  # a SAS token rides in the queue URL's query
        self._messages = f"{base.rstrip('/')}/messages"
        self._prefix = f"{self._messages}/"
        self._query = f"?{query}&" if query else "?"
        self._ids = RequestIds()
        #: A request made by HttpRequest itself, whose state each delete's request copies (see :meth:`delete_request`).
        self._template = HttpRequest("DELETE", self._prefix, headers={"x-ms-version": version})
        if not isinstance(getattr(self._template, "__dict__", None), dict):
            raise RuntimeError(
                f"azure-core's HttpRequest keeps no __dict__ here (azure-storage-queue {SDK_VERSION}); "
                "install a version the worker was tested with"
            )

    def receive_request(self, count: int, visibility_timeout: int) -> HttpRequest:
        """The Get Messages request, as the SDK's generated layer builds it (one per batch: made plainly)."""
        return HttpRequest(
            "GET",
            f"{self._messages}{self._query}numofmessages={count}&visibilitytimeout={visibility_timeout}",
            headers={"x-ms-version": self.version, "Accept": "application/xml"},
        )

    def delete_request(self, message_id: str, pop_receipt: str) -> HttpRequest:
        """The Delete Message request, as the SDK's generated layer builds it.

        Copied from the template with the message's URL and headers of its own (the pipeline adds to them), not
        made by ``HttpRequest()``, whose attribute hooks and body handling cost more (bench/README.md).
        """
        request: HttpRequest = object.__new__(HttpRequest)
        state = request.__dict__
        state.update(self._template.__dict__)
        state["url"] = f"{self._prefix}{_quote(message_id)}{self._query}popreceipt={_quote(pop_receipt)}"
        # A case-insensitive dict in azure-core (typed as a MutableMapping): its own copy keeps that.
        state["headers"] = cast(Any, self._template.headers).copy()
        return request

    def request_id(self) -> str:
        """The next request's ``x-ms-client-request-id``: unique, and shaped as the SDK's own."""
        return self._ids.next()

    async def receive(self, count: int, visibility_timeout: int) -> list[RawMessage]:
        """Up to ``count`` messages leased for ``visibility_timeout`` seconds; raises what ``receive_messages``
        raises for the same answer."""
        response = await self._pipeline.send_request(
            self.receive_request(count, visibility_timeout), client_request_id=self.request_id()
        )
        if response.status_code != 200:
            _raise_for(response)
        return received(response.text())

    async def delete(self, message_id: str, pop_receipt: str) -> None:
        """Delete the message; raises what ``QueueClient.delete_message`` raises for the same answer."""
        response = await self._pipeline.send_request(
            self.delete_request(message_id, pop_receipt), client_request_id=self.request_id()
        )
        if response.status_code != 204:
            _raise_for(response)


def _raise_for(response: AsyncHttpResponse) -> None:
    """The exception the SDK raises for a refused request: its generated layer's, then ``process_storage_error``."""
    try:
        map_error(status_code=response.status_code, response=response, error_map=_ERRORS)
        raise HttpResponseError(response=response)
    except HttpResponseError as error:
        assert process_storage_error is not None  # fast_path_problem selected this path only with it
        process_storage_error(error)

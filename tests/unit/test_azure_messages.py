"""Get Messages and Delete Message beside the SDK's generated layer (worker.backends.azure.messages).

The model is the installed azure-storage-queue itself. Each request is compared
with the one its generated ``build_queue_*_request`` and ``format_url`` make,
for a shared-key client and for a SAS URL, with ids and receipts holding every
character a URL treats specially. A Get Messages answer is read both ways and
compared value for value: contents with XML escapes, a message that never
expires, fields left out; a date neither can read is refused by name. The
answers are compared on Azurite: a refused request raises the same exception
type, status and error code from both, and a good one receives or deletes.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.storage.queue import VERSION
from azure.storage.queue import QueueMessage as SdkMessage
from azure.storage.queue._generated import models as generated_models
from azure.storage.queue._generated._utils.model_base import _deserialize_xml
from azure.storage.queue._generated.operations._operations import (
    build_queue_delete_message_request,
    build_queue_receive_messages_request,
)
from azure.storage.queue.aio import QueueClient

from tests.azurite import Azurite
from worker.backends.azure.messages import MessageRequests, fast_path_problem, received, sdk_raw, unsettled

#: Azurite's well-known development account (public; the emulator's documentation prints it).
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UdGSmDTNvmqIn+yKxDuQ/HkqT9Xwm7f5fkxLh+A=="
KEYED = (
    f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
    "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;"
)
SAS_URL = "https://account.queue.core.windows.net/orders?sv=2024-08-04&ss=q&sig=a%2Bb%2Fc%3D&se=2030-01-01T00%3A00%3A00Z"
CLIENTS = pytest.mark.parametrize(
    "make",
    [
        lambda: QueueClient.from_connection_string(KEYED, "orders"),
        lambda: QueueClient.from_queue_url(SAS_URL),
    ],
    ids=["shared key", "SAS URL"],
)

IDS = ["7d3c59a8-3f5e-4f0b-9c1e-0c2b5f0e8a11", "id with space", "a+b/c=d?e&f#g%h~i", "ünïcode-✓"]
RECEIPTS = ["AgAAAAMAAAAAAAAA+/==", "AQAAAL0ZJ%2Fw=", "plain", "space and ~tilde"]
#: Message texts as they travel in the answer's XML: escapes, CDATA, blanks, an empty text and markup-like text.
CONTENTS = [
    '{"n": 1}',
    "a &amp; &lt;b&gt; &quot;c&quot; &apos;d&apos;",
    "<![CDATA[<x/> & y]]>",
    "  \n\t ",
    "",
    "ünïcode ✓ 𝄞",
    "line\r\nbreaks",
]


def sdk_request(client: QueueClient, request: HttpRequest) -> tuple[str, str, dict[str, str]]:
    """A request of the SDK's generated layer as its operation sends it to the pipeline (the URL formatted)."""
    generated = client._client
    request.url = generated._client.format_url(request.url, url=generated._config.url)
    return request.method, request.url, dict(request.headers)


@CLIENTS
def test_the_delete_request_is_the_one_the_sdk_builds(make) -> None:  # type: ignore[no-untyped-def]
    client = make()
    requests = MessageRequests(client)
    version = client._client._config.version
    for message_id in IDS:
        for receipt in RECEIPTS:
            ours = requests.delete_request(message_id, receipt)
            sdk = build_queue_delete_message_request(message_id, pop_receipt=receipt, version=version)
            assert (ours.method, ours.url, dict(ours.headers)) == sdk_request(client, sdk)
            # Copied from a template, it is in every other part what HttpRequest() makes, with headers of its own.
            made = HttpRequest(ours.method, ours.url, headers=dict(ours.headers))
            assert {k: v for k, v in vars(ours).items() if k != "headers"} == {
                k: v for k, v in vars(made).items() if k != "headers"
            }
            assert type(ours.headers) is type(made.headers)
            assert ours.headers is not requests.delete_request(message_id, receipt).headers


@CLIENTS
def test_the_receive_request_is_the_one_the_sdk_builds(make) -> None:  # type: ignore[no-untyped-def]
    client = make()
    requests = MessageRequests(client)
    version = client._client._config.version
    for count, visibility in [(1, 1), (32, 600), (16, 604800)]:
        ours = requests.receive_request(count, visibility)
        sdk = build_queue_receive_messages_request(number_of_messages=count, visibility_timeout=visibility, version=version)
        assert (ours.method, ours.url, dict(ours.headers)) == sdk_request(client, sdk)


def answer(*messages: str) -> str:
    return f'<?xml version="1.0" encoding="utf-8"?><QueueMessagesList>{"".join(messages)}</QueueMessagesList>'


def element(
    content: str | None = '{"n": 1}',
    *,
    count: str | None = "1",
    expires: str | None = "Sat, 05 Dec 2026 23:21:12 GMT",
    inserted: str | None = "Sat, 28 Nov 2026 23:21:12 GMT",
    visible: str | None = "Sat, 28 Nov 2026 23:31:12 GMT",
) -> str:
    fields = [
        ("MessageId", str(uuid.uuid4())),
        ("InsertionTime", inserted),
        ("ExpirationTime", expires),
        ("PopReceipt", "AgAAAAMAAAAAAAAA+/=="),
        ("TimeNextVisible", visible),
        ("DequeueCount", count),
        ("MessageText", content),
    ]
    return (
        "<QueueMessage>"
        + "".join(f"<{tag}>{value}</{tag}>" for tag, value in fields if value is not None)
        + "</QueueMessage>"
    )


def sdk_read(text: str) -> list:  # type: ignore[type-arg]
    """What the backend made of the same answer through the SDK: its model, its QueueMessage, then ``sdk_raw``."""
    return [
        sdk_raw(SdkMessage._from_generated(m))
        for m in _deserialize_xml(generated_models.ReceivedMessages, text).items_property or []
    ]


def test_an_answer_reads_value_for_value_as_through_the_sdk() -> None:
    text = answer(
        *(element(content) for content in CONTENTS),
        element(None),  # no MessageText at all
        element(count="7"),
        element(expires="Fri, 31 Dec 9999 23:59:59 GMT"),  # a message that never expires
        element(inserted="Mon, 01 Jan 2024 00:00:00 GMT", visible="Tue, 29 Feb 2028 12:34:56 GMT"),
        element(expires=None, visible=None, count=None),  # what a peek-like answer leaves out
    )
    ours, sdk = received(text), sdk_read(text)
    assert len(ours) == len(CONTENTS) + 5
    assert ours == sdk
    assert [m.content for m in ours[:3]] == ['{"n": 1}', "a & <b> \"c\" 'd'", "<x/> & y"]
    assert ours[-3].expiration_time is None and ours[-1].time_next_visible is None and ours[-1].dequeue_count == 0
    assert ours[-2].time_next_visible == datetime(2028, 2, 29, 12, 34, 56, tzinfo=UTC)
    assert received(answer()) == sdk_read(answer()) == []


def test_a_date_the_sdk_cannot_read_is_refused_naming_it() -> None:
    """The SDK fails on it too, though not by name: its model leaves the message unread and reading it raises."""
    text = answer(element(), element(visible="2026-11-28T23:31:12Z"))
    with pytest.raises(AttributeError):
        sdk_read(text)
    with pytest.raises(ValueError, match="^Invalid datetime string: 2026-11-28T23:31:12Z$"):
        received(text)


async def test_a_good_receive_leases_the_message_and_a_refused_one_raises_what_the_sdk_raises(
    azurite: Azurite,
) -> None:
    name = f"receives-{uuid.uuid4().hex[:12]}"
    async with QueueClient.from_connection_string(azurite.connection_string, name) as client:
        requests = MessageRequests(client)
        with pytest.raises(HttpResponseError) as sdk:  # no such queue: 404 QueueNotFound
            [m async for m in client.receive_messages(max_messages=1)]
        with pytest.raises(HttpResponseError) as ours:
            await requests.receive(1, 30)
        assert (type(ours.value), ours.value.status_code, ours.value.error_code) == (
            type(sdk.value),
            sdk.value.status_code,
            sdk.value.error_code,
        )
        assert ours.value.error_code == "QueueNotFound"

        await client.create_queue()
        texts = ['{"n": 1}', "a & <b> \"c\" 'd'", "  ", "ünïcode ✓"]
        for text in texts:
            await client.send_message(text)
        before = datetime.now(UTC).replace(microsecond=0)
        got = await requests.receive(32, 120)
        assert [m.content for m in got] == texts
        assert all(m.dequeue_count == 1 for m in got)
        assert all(before + timedelta(seconds=118) <= m.time_next_visible <= before + timedelta(seconds=125) for m in got)  # type: ignore[operator]
        assert await requests.receive(32, 120) == []  # leased: nothing is visible
        for message in got:  # each receipt is the lease's own: the SDK's delete accepts it
            await client.delete_message(message.id, message.pop_receipt)
        assert (await client.get_queue_properties()).approximate_message_count == 0
        await client.delete_queue()


async def test_a_refused_delete_raises_what_the_sdk_raises_and_a_good_one_deletes(azurite: Azurite) -> None:
    name = f"deletes-{uuid.uuid4().hex[:12]}"
    async with QueueClient.from_connection_string(azurite.connection_string, name) as client:
        await client.create_queue()
        requests = MessageRequests(client)
        await client.send_message("hello")
        [message] = [m async for m in client.receive_messages(max_messages=1)]

        refusals = [
            (message.id, "AgAAAAMAAAAAAAAA+/=="),  # a receipt that is not the message's: 400 PopReceiptMismatch
            (str(uuid.uuid4()), message.pop_receipt),  # no such message: 404 MessageNotFound
        ]
        for message_id, receipt in refusals:
            with pytest.raises(HttpResponseError) as sdk:
                await client.delete_message(message_id, receipt)
            with pytest.raises(HttpResponseError) as ours:
                await requests.delete(message_id, receipt)
            assert type(ours.value) is type(sdk.value)
            assert ours.value.status_code == sdk.value.status_code
            assert ours.value.error_code == sdk.value.error_code and ours.value.error_code
            assert str(ours.value).splitlines()[0] == str(sdk.value).splitlines()[0]

        await requests.delete(message.id, message.pop_receipt)
        assert (await client.get_queue_properties()).approximate_message_count == 0
        await client.delete_queue()


async def test_each_request_carries_an_id_of_its_own_shaped_as_the_sdks_and_storage_echoes_it(azurite: Azurite) -> None:
    """Not the SDK's ``uuid1()`` (a socket to the uuidd daemon per call), but what storage logs read alike."""
    sent: list[tuple[str, str, str | None]] = []

    def hook(response) -> None:  # type: ignore[no-untyped-def]
        sent.append(
            (
                response.http_request.method,
                response.http_request.headers["x-ms-client-request-id"],
                response.http_response.headers.get("x-ms-client-request-id"),
            )
        )

    name = f"request-ids-{uuid.uuid4().hex[:12]}"
    async with QueueClient.from_connection_string(azurite.connection_string, name, raw_response_hook=hook) as client:
        await client.create_queue()
        await client.send_message("one")
        await client.send_message("two")
        requests = MessageRequests(client)
        sent.clear()
        got = await requests.receive(32, 60)
        for message in got:
            await requests.delete(message.id, message.pop_receipt)
        await client.delete_queue()
    ours = sent[:3]
    assert [method for method, _, _ in ours] == ["GET", "DELETE", "DELETE"]
    assert all(echoed == request_id for _, request_id, echoed in ours)
    ids = [request_id for _, request_id, _ in ours]
    assert len(set(ids)) == 3 and all(str(uuid.UUID(i)) == i for i in ids)
    assert len({i[:24] for i in ids}) == 1  # one client's prefix, then its count
    assert uuid.UUID(sent[3][1]).version == 1  # the SDK's own call still names its request as it does


@pytest.mark.parametrize(
    "client",
    [SimpleNamespace(), SimpleNamespace(_client=SimpleNamespace(_client=None))],
    ids=["no generated client", "no pipeline client"],
)
def test_an_sdk_laid_out_otherwise_fails_the_fast_paths_self_check_naming_its_version(client: object) -> None:
    """What a future SDK that moved the private attributes looks like: the self-check says why, and raises nothing."""
    problem = fast_path_problem(client)  # type: ignore[arg-type]
    assert problem is not None and f"azure-storage-queue {VERSION} is not laid out as this worker expects" in problem


def test_the_installed_sdk_passes_the_fast_paths_self_check() -> None:
    assert fast_path_problem(QueueClient.from_connection_string(KEYED, "orders")) is None


def test_a_request_whose_url_ignores_the_copied_state_fails_the_self_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """An azure-core whose HttpRequest keeps ``url`` behind a property: every copied delete would name the queue's
    messages without an id (Clear Messages). The self-check sees the path, and the public calls are used."""
    monkeypatch.setattr(
        HttpRequest,
        "url",
        property(lambda self: self.__dict__.get("_url", ""), lambda self, value: self.__dict__.__setitem__("_url", value)),
        raising=False,
    )
    problem = fast_path_problem(QueueClient.from_connection_string(KEYED, "orders"))
    assert problem is not None and "DELETE request's path is '/devstoreaccount1/orders/messages/'" in problem


def test_a_moved_process_storage_error_fails_the_self_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("worker.backends.azure.messages.process_storage_error", None)
    problem = fast_path_problem(QueueClient.from_connection_string(KEYED, "orders"))
    assert problem is not None and "process_storage_error is gone" in problem


@pytest.mark.parametrize(
    ("method", "url", "refused"),
    [
        ("DELETE", "http://127.0.0.1:1/devstoreaccount1/orders/messages", "without a message id"),
        ("DELETE", "http://127.0.0.1:1/devstoreaccount1/orders/messages/", "without a message id"),
        ("DELETE", "http://127.0.0.1:1/devstoreaccount1/orders/messages?sv=1&sig=x", "without a message id"),
        ("DELETE", "http://127.0.0.1:1/devstoreaccount1/orders/messages/abc", "without its pop receipt"),
        (
            "PUT",
            "http://127.0.0.1:1/devstoreaccount1/orders/messages/abc?popreceipt=&visibilitytimeout=0",
            "without its pop receipt",
        ),
        ("DELETE", "http://127.0.0.1:1/devstoreaccount1/orders/messages/abc?popreceipt=AgA%2B", None),
        ("DELETE", "http://127.0.0.1:1/devstoreaccount1/messages", None),  # Delete Queue of a queue named "messages"
        ("DELETE", "http://127.0.0.1:1/devstoreaccount1/orders", None),  # Delete Queue
        ("GET", "http://127.0.0.1:1/devstoreaccount1/orders/messages?numofmessages=1", None),
        ("POST", "http://127.0.0.1:1/devstoreaccount1/orders/messages", None),  # Put Message
    ],
)
def test_the_transport_refuses_a_message_request_without_its_id_or_receipt(
    method: str,
    url: str,
    refused: str | None,
) -> None:
    problem = unsettled("devstoreaccount1", method, url)
    assert (problem is None) if refused is None else (problem is not None and refused in problem)
    assert unsettled("", method, url.replace("/devstoreaccount1", "")) == (None if problem is None else problem)


async def test_a_clear_messages_request_never_leaves_the_process(tmp_path: object) -> None:
    """Sent through the backend's own pipeline to a port that would refuse a connection: refused before it."""
    from tests.support import closed_port
    from worker.backends.azure.connection import parse_connection_string
    from worker.backends.azure.queues import AzureBackend
    from worker.backends.queues import InvalidArgument

    with closed_port() as port:
        endpoint = f"http://127.0.0.1:{port}/devstoreaccount1"
        backend = AzureBackend(
            parse_connection_string(
                f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};QueueEndpoint={endpoint};"
            )
        )
        client = backend._queue("orders")
        try:
            with pytest.raises(InvalidArgument, match="without a message id was refused"):
                await client._client._client.send_request(HttpRequest("DELETE", f"{endpoint}/orders/messages"))
        finally:
            await backend.close()


async def test_the_sdks_public_calls_are_used_where_switched_to_and_the_fast_path_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from worker.backends.azure.connection import parse_connection_string
    from worker.backends.azure.messages import SdkMessages
    from worker.backends.azure.queues import FAST_PATH_ENV, AzureBackend

    fast = AzureBackend(parse_connection_string(KEYED))
    monkeypatch.setenv(FAST_PATH_ENV, "0")
    public = AzureBackend(parse_connection_string(KEYED))
    try:
        assert fast.fast_path and isinstance(fast._requests("orders"), MessageRequests)
        assert not public.fast_path and isinstance(public._requests("orders"), SdkMessages)
    finally:
        await fast.close()
        await public.close()

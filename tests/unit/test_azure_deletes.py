"""Delete Message beside the SDK's generated layer (worker.backends.azure.deletes): the SDK's own request and errors.

The model is the installed azure-storage-queue itself. The request is compared
with the one its generated ``build_queue_delete_message_request`` and
``format_url`` make, for a shared-key client and for a SAS URL, with ids and
receipts holding every character a URL treats specially. The answers are
compared on Azurite: a refused delete raises the same exception type, status
and error code from both, and a good one deletes the message.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.storage.queue import VERSION
from azure.storage.queue._generated.operations._operations import build_queue_delete_message_request
from azure.storage.queue.aio import QueueClient

from tests.azurite import Azurite
from worker.backends.azure.deletes import DeleteRequests

#: Azurite's well-known development account (public; the emulator's documentation prints it).
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UdGSmDTNvmqIn+yKxDuQ/HkqT9Xwm7f5fkxLh+A=="
KEYED = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={DEV_KEY};"
         "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;")
SAS_URL = "https://account.queue.core.windows.net/orders?sv=2024-08-04&ss=q&sig=a%2Bb%2Fc%3D&se=2030-01-01T00%3A00%3A00Z"

IDS = ["7d3c59a8-3f5e-4f0b-9c1e-0c2b5f0e8a11", "id with space", "a+b/c=d?e&f#g%h~i", "ünïcode-✓"]
RECEIPTS = ["AgAAAAMAAAAAAAAA+/==", "AQAAAL0ZJ%2Fw=", "plain", "space and ~tilde"]


def sdk_request(client: QueueClient, message_id: str, pop_receipt: str) -> tuple[str, str, dict[str, str]]:
    """The request as the SDK's generated ``delete_message`` makes it before its pipeline runs."""
    generated = client._client
    request = build_queue_delete_message_request(message_id, pop_receipt=pop_receipt,
                                                 version=generated._config.version)
    request.url = generated._client.format_url(request.url, url=generated._config.url)
    return request.method, request.url, dict(request.headers)


@pytest.mark.parametrize("make", [
    lambda: QueueClient.from_connection_string(KEYED, "orders"),
    lambda: QueueClient.from_queue_url(SAS_URL),
], ids=["shared key", "SAS URL"])
def test_the_request_is_the_one_the_sdk_builds(make) -> None:  # type: ignore[no-untyped-def]
    client = make()
    deletes = DeleteRequests(client)
    for message_id in IDS:
        for receipt in RECEIPTS:
            ours = deletes.request(message_id, receipt)
            assert (ours.method, ours.url, dict(ours.headers)) == sdk_request(client, message_id, receipt)
            # Copied from a template, it is in every other part what HttpRequest() makes, with headers of its own.
            made = HttpRequest(ours.method, ours.url, headers=dict(ours.headers))
            assert {k: v for k, v in vars(ours).items() if k != "headers"} == {
                k: v for k, v in vars(made).items() if k != "headers"}
            assert type(ours.headers) is type(made.headers)
            assert ours.headers is not deletes.request(message_id, receipt).headers


async def test_a_refused_delete_raises_what_the_sdk_raises_and_a_good_one_deletes(azurite: Azurite) -> None:
    name = f"deletes-{uuid.uuid4().hex[:12]}"
    async with QueueClient.from_connection_string(azurite.connection_string, name) as client:
        await client.create_queue()
        deletes = DeleteRequests(client)
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
                await deletes.send(message_id, receipt)
            assert type(ours.value) is type(sdk.value)
            assert ours.value.status_code == sdk.value.status_code
            assert ours.value.error_code == sdk.value.error_code and ours.value.error_code
            assert str(ours.value).splitlines()[0] == str(sdk.value).splitlines()[0]

        await deletes.send(message.id, message.pop_receipt)
        assert (await client.get_queue_properties()).approximate_message_count == 0
        await client.delete_queue()


@pytest.mark.parametrize("client", [SimpleNamespace(), SimpleNamespace(_client=SimpleNamespace(_client=None))],
                         ids=["no generated client", "no pipeline client"])
def test_an_sdk_laid_out_otherwise_is_refused_naming_its_version(client: object) -> None:
    """What a future SDK that moved the private attributes looks like: refused when built, which the backend does
    at start, instead of failing every delete."""
    with pytest.raises(RuntimeError, match=f"azure-storage-queue {VERSION} is not laid out as this worker expects"):
        DeleteRequests(client)  # type: ignore[arg-type]

"""The OCI Queue test server behaves as the API reference says, driven only through the official ``oci`` SDK.

Every call goes through ``oci.queue.QueueClient`` or ``QueueAdminClient`` with a config file read by
``oci.config.from_file``, so the paths, JSON names, signatures and error bodies are the ones the SDK really uses.
The SDK's retries and circuit breaker are off: an error answer must reach the test as it was sent.
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import oci
import pytest
from cryptography.hazmat.primitives import serialization
from oci.queue import QueueAdminClient, QueueClient
from oci.queue.models import (
    CreateQueueDetails,
    DeleteMessagesDetails,
    DeleteMessagesDetailsEntry,
    MessageMetadata,
    PurgeQueueDetails,
    PutMessagesDetails,
    PutMessagesDetailsEntry,
    UpdateMessageDetails,
    UpdateMessagesDetails,
    UpdateMessagesDetailsEntry,
    UpdateQueueDetails,
)

from tests.oci.fixture import OciTestServer, new_key
from tests.oci.server import Modes

NO_SUCH_QUEUE = "ocid1.queue.oc1.iad.nosuchqueue"
#: The answer to a receipt that no longer names a current delivery, by ``Modes.stale_receipt``.
STALE_ANSWERS = {"400": (400, "InvalidParameter"), "404": (404, "NotAuthorizedOrNotFound")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    """The server in its default modes, the answers harder on a client."""
    with OciTestServer(tmp_path_factory.mktemp("oci")) as running:
        yield running


@pytest.fixture(scope="module")
def lenient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    """The server in the other modes where the reference is silent: stale receipts 404, visibility clamped, a queue
    served at any cell's endpoint."""
    modes = Modes(stale_receipt="404", retention_bound="clamp", other_cell="serve")
    with OciTestServer(tmp_path_factory.mktemp("oci-lenient"), modes) as running:
        yield running


def stale(server: OciTestServer) -> tuple[int, str]:
    """The status and code ``server`` answers a receipt that no longer names a current delivery with."""
    return STALE_ANSWERS[server.modes.stale_receipt]


def client_options(server: OciTestServer, **extra: Any) -> dict[str, Any]:
    return {
        "service_endpoint": server.endpoint,
        "retry_strategy": oci.retry.NoneRetryStrategy(),
        "circuit_breaker_strategy": oci.circuit_breaker.NoCircuitBreakerStrategy(),
        **extra,
    }


@pytest.fixture(scope="module")
def config(server: OciTestServer) -> dict[str, Any]:
    return oci.config.from_file(str(server.config_file))


@pytest.fixture(scope="module")
def admin(server: OciTestServer, config: dict[str, Any]) -> QueueAdminClient:
    return QueueAdminClient(config, **client_options(server))


def messages_client(server: OciTestServer, config: dict[str, Any], queue_id: str, **extra: Any) -> QueueClient:
    """A data-plane client at the queue's own messages endpoint, found with GetQueue as the SDK says to."""
    endpoint = QueueAdminClient(config, **client_options(server, **extra)).get_queue(queue_id).data.messages_endpoint
    return QueueClient(config, **client_options(server, service_endpoint=endpoint, **extra))


def create_queue(admin: QueueAdminClient, server: OciTestServer, name: str, **settings: Any) -> str:
    """Create a queue and follow its work request to the queue's OCID, as a real client has to."""
    response = admin.create_queue(CreateQueueDetails(display_name=name, compartment_id=server.compartment_id, **settings))
    assert response.status == 202
    work_request = admin.get_work_request(response.headers["opc-work-request-id"]).data
    assert work_request.status == "SUCCEEDED"
    assert work_request.operation_type == "CREATE_QUEUE"
    [resource] = work_request.resources
    assert resource.action_type == "CREATED"
    return str(resource.identifier)


@pytest.fixture
def queue_id(admin: QueueAdminClient, server: OciTestServer, request: pytest.FixtureRequest) -> str:
    """A fresh queue for one test, with a short default poll so a test never waits 30 s by accident."""
    return create_queue(admin, server, request.node.name, timeout_in_seconds=1)


@pytest.fixture
def messages_endpoint(admin: QueueAdminClient, queue_id: str) -> str:
    """``queue_id``'s messages endpoint (its cell), from GetQueue."""
    return str(admin.get_queue(queue_id).data.messages_endpoint)


@pytest.fixture
def client(server: OciTestServer, config: dict[str, Any], messages_endpoint: str) -> QueueClient:
    """The data-plane client for ``queue_id``."""
    return QueueClient(config, **client_options(server, service_endpoint=messages_endpoint))


def put(client: QueueClient, queue_id: str, *contents: str, channel: str | None = None) -> list[int]:
    metadata = MessageMetadata(channel_id=channel) if channel else None
    entries = [PutMessagesDetailsEntry(content=content, metadata=metadata) for content in contents]
    return [m.id for m in client.put_messages(queue_id, PutMessagesDetails(messages=entries)).data.messages]


def get(client: QueueClient, queue_id: str, **options: Any) -> list[Any]:
    options.setdefault("timeout_in_seconds", 0)
    return list(client.get_messages(queue_id, **options).data.messages)


def service_error(call: Any, *args: Any, **kwargs: Any) -> oci.exceptions.ServiceError:
    with pytest.raises(oci.exceptions.ServiceError) as caught:
        call(*args, **kwargs)
    return caught.value


# -- control plane --------------------------------------------------------------------------------------------------


def test_a_created_queue_is_active_with_the_documented_defaults(admin: QueueAdminClient, server: OciTestServer) -> None:
    queue_id = create_queue(admin, server, "defaults")
    assert queue_id.startswith("ocid1.queue.oc1.")
    queue = admin.get_queue(queue_id).data
    assert queue.lifecycle_state == "ACTIVE"
    assert (queue.display_name, queue.compartment_id) == ("defaults", server.compartment_id)
    assert queue.messages_endpoint in server.messages_endpoints
    assert (queue.visibility_in_seconds, queue.timeout_in_seconds, queue.dead_letter_queue_delivery_count) == (30, 30, 0)
    assert queue.retention_in_seconds == 86400


def test_queues_are_listed_by_display_name_and_compartment(admin: QueueAdminClient, server: OciTestServer) -> None:
    first = create_queue(admin, server, "listed")
    second = create_queue(admin, server, "listed")
    named = admin.list_queues(compartment_id=server.compartment_id, display_name="listed").data.items
    assert {q.id for q in named} == {first, second}
    assert all(q.lifecycle_state == "ACTIVE" for q in named)
    assert {q.messages_endpoint for q in named} == set(server.messages_endpoints), "queues go to each cell in turn"
    assert admin.list_queues(compartment_id="ocid1.compartment.oc1..other", display_name="listed").data.items == []
    assert [q.id for q in admin.list_queues(id=first).data.items] == [first]


def test_update_queue_changes_what_later_requests_default_to(
    admin: QueueAdminClient, client: QueueClient, queue_id: str
) -> None:
    response = admin.update_queue(
        queue_id, UpdateQueueDetails(visibility_in_seconds=120, dead_letter_queue_delivery_count=5)
    )
    assert response.status == 202
    assert admin.get_work_request(response.headers["opc-work-request-id"]).data.status == "SUCCEEDED"
    queue = admin.get_queue(queue_id).data
    assert (queue.visibility_in_seconds, queue.dead_letter_queue_delivery_count) == (120, 5)
    put(client, queue_id, "hidden for the queue's new default")
    before = time.time()
    [message] = get(client, queue_id)
    assert message.visible_after.timestamp() == pytest.approx(before + 120, abs=2)
    assert service_error(admin.update_queue, queue_id, UpdateQueueDetails(timeout_in_seconds=31)).status == 400


def test_a_deleted_queue_is_gone_for_the_data_plane(admin: QueueAdminClient, client: QueueClient, queue_id: str) -> None:
    put(client, queue_id, "dropped with the queue")
    response = admin.delete_queue(queue_id)
    assert response.status == 202
    work_request = admin.get_work_request(response.headers["opc-work-request-id"]).data
    assert (work_request.operation_type, work_request.status) == ("DELETE_QUEUE", "SUCCEEDED")
    assert admin.get_queue(queue_id).data.lifecycle_state == "DELETED"
    assert queue_id not in {q.id for q in admin.list_queues(lifecycle_state="ACTIVE").data.items}
    error = service_error(client.get_messages, queue_id, timeout_in_seconds=0)
    assert (error.status, error.code) == (404, "NotAuthorizedOrNotFound")


def test_a_long_poll_on_a_deleted_queue_ends(admin: QueueAdminClient, client: QueueClient, queue_id: str) -> None:
    errors: list[oci.exceptions.ServiceError] = []
    poller = threading.Thread(
        target=lambda: errors.append(service_error(client.get_messages, queue_id, timeout_in_seconds=10))
    )
    poller.start()
    poller.join(0.3)
    assert poller.is_alive(), "the poll on an empty queue did not wait"
    admin.delete_queue(queue_id)
    poller.join(5)
    assert not poller.is_alive() and [e.status for e in errors] == [404]


# -- messages -------------------------------------------------------------------------------------------------------


def test_put_get_update_delete_one_message(client: QueueClient, queue_id: str) -> None:
    [message_id] = put(client, queue_id, "héllo", channel="orders")
    [message] = get(client, queue_id, visibility_in_seconds=60)
    assert (message.id, message.content, message.delivery_count) == (message_id, "héllo", 1)
    assert message.metadata.channel_id == "orders"
    assert message.expire_after > message.created_at
    assert get(client, queue_id) == [], "a delivered message is hidden for its visibility timeout"
    updated = client.update_message(queue_id, message.receipt, UpdateMessageDetails(visibility_in_seconds=0)).data
    assert updated.id == message_id
    [again] = get(client, queue_id)
    assert again.delivery_count == 2 and again.receipt != message.receipt
    assert client.delete_message(queue_id, again.receipt).status == 204
    assert get(client, queue_id) == []
    assert client.get_stats(queue_id).data.queue.visible_messages == 0


def test_batches_report_each_entry(client: QueueClient, queue_id: str) -> None:
    ids = put(client, queue_id, "a", "b", "c")
    assert len(set(ids)) == 3
    assert len(get(client, queue_id, limit=2, visibility_in_seconds=60)) == 2, "get returns at most limit messages"
    [last] = get(client, queue_id, limit=20, visibility_in_seconds=60)
    assert last.id == ids[2]
    client.update_message(queue_id, last.receipt, UpdateMessageDetails(visibility_in_seconds=0))
    received = get(client, queue_id, limit=20, visibility_in_seconds=60)
    assert [m.id for m in received] == [ids[2]]
    bogus = "bm90LWEtcmVjZWlwdA"

    update = client.update_messages(
        queue_id,
        UpdateMessagesDetails(
            entries=[
                UpdateMessagesDetailsEntry(receipt=received[0].receipt, visibility_in_seconds=120),
                UpdateMessagesDetailsEntry(receipt=bogus, visibility_in_seconds=120),
            ]
        ),
    ).data
    assert (update.client_failures, update.server_failures) == (1, 0)
    assert update.entries[0].id == ids[2] and update.entries[0].error_code is None
    assert update.entries[1].error_code == 400 and update.entries[1].error_message

    delete = client.delete_messages(
        queue_id,
        DeleteMessagesDetails(
            entries=[
                DeleteMessagesDetailsEntry(receipt=received[0].receipt),
                DeleteMessagesDetailsEntry(receipt=bogus),
            ]
        ),
    ).data
    assert (delete.client_failures, delete.server_failures) == (1, 0)
    assert delete.entries[0].error_code is None and delete.entries[1].error_code == 400
    stats = client.get_stats(queue_id).data.queue
    assert (stats.visible_messages, stats.in_flight_messages, stats.size_in_bytes) == (0, 2, 2)


def test_a_message_returns_when_its_visibility_passes(client: QueueClient, queue_id: str, server: OciTestServer) -> None:
    put(client, queue_id, "comes back")
    [first] = get(client, queue_id, visibility_in_seconds=1)
    assert get(client, queue_id) == []
    stats = client.get_stats(queue_id).data.queue
    assert (stats.visible_messages, stats.in_flight_messages) == (0, 1)
    [second] = get(client, queue_id, timeout_in_seconds=5)  # the long poll wakes when the visibility lapses
    assert time.time() >= first.visible_after.timestamp() - 0.01
    assert second.id == first.id and second.delivery_count == 2
    error = service_error(client.delete_message, queue_id, first.receipt)
    assert (error.status, error.code) == stale(server), "a redelivery invalidates earlier receipts"
    client.delete_message(queue_id, second.receipt)


def test_a_long_poll_returns_as_soon_as_a_message_is_put(
    server: OciTestServer, config: dict[str, Any], client: QueueClient, queue_id: str
) -> None:
    producer = messages_client(server, config, queue_id)
    received: list[tuple[float, list[Any]]] = []

    def poll() -> None:
        messages = get(client, queue_id, timeout_in_seconds=5)
        received.append((time.monotonic(), messages))

    poller = threading.Thread(target=poll)
    poller.start()
    poller.join(0.3)
    assert poller.is_alive(), "the poll on an empty queue returned before its timeout"
    put_at = time.monotonic()
    put(producer, queue_id, "wake up")
    poller.join(5)
    [(returned_at, messages)] = received
    assert [m.content for m in messages] == ["wake up"]
    # Woken by the put, not at the poll's 5 s timeout; the margin is for a busy machine's thread scheduling.
    assert returned_at - put_at < 1.0


def test_timeouts_zero_and_queue_default(client: QueueClient, queue_id: str) -> None:
    start = time.monotonic()
    assert get(client, queue_id, timeout_in_seconds=0) == []
    assert time.monotonic() - start < 0.5
    start = time.monotonic()
    assert client.get_messages(queue_id).data.messages == []  # the queue's timeoutInSeconds: 1 s
    assert 0.9 <= time.monotonic() - start < 3


def test_channels(client: QueueClient, queue_id: str) -> None:
    put(client, queue_id, "for a", channel="a")
    assert client.list_channels(queue_id).data.items == ["a"]
    assert get(client, queue_id, channel_filter="b") == []
    [message] = get(client, queue_id, channel_filter="a")
    assert message.metadata.channel_id == "a"


def test_an_unfiltered_get_returns_one_random_channel_at_a_time(client: QueueClient, queue_id: str) -> None:
    """Without ``channelFilter``, "messages will be returned from a random non-empty channel": never a mix."""
    for channel in ("a", "b", "c"):
        put(client, queue_id, *(f"{channel}{i}" for i in range(3)), channel=channel)
    put(client, queue_id, "no channel")
    answers = []
    while batch := get(client, queue_id, limit=20, visibility_in_seconds=60):
        answers.append({m.metadata.channel_id if m.metadata else None for m in batch})
        assert len(answers[-1]) == 1, f"one answer mixed channels {answers[-1]}"
        assert len(batch) == (1 if answers[-1] == {None} else 3), "an answer holds all its channel's ready messages"
    assert sorted(str(channel) for [channel] in answers) == ["None", "a", "b", "c"]


@pytest.mark.parametrize("mode", ["404", "serve"])
def test_a_queue_is_served_at_its_own_messages_endpoint(
    mode: str, server: OciTestServer, lenient: OciTestServer, request: pytest.FixtureRequest
) -> None:
    """``--other-cell``: a queue's messages at another cell's endpoint are 404 (as an unknown queue) or served."""
    chosen = server if mode == server.modes.other_cell else lenient
    assert chosen.modes.other_cell == mode
    config = oci.config.from_file(str(chosen.config_file))
    admin = QueueAdminClient(config, **client_options(chosen))
    queue_id = create_queue(admin, chosen, request.node.name, timeout_in_seconds=0)
    own = admin.get_queue(queue_id).data.messages_endpoint
    [other] = [endpoint for endpoint in chosen.messages_endpoints if endpoint != own]
    put(QueueClient(config, **client_options(chosen, service_endpoint=own)), queue_id, "in its own cell")
    elsewhere = QueueClient(config, **client_options(chosen, service_endpoint=other))
    if mode == "404":
        for error in (service_error(elsewhere.get_stats, queue_id), service_error(get, elsewhere, queue_id)):
            assert (error.status, error.code) == (404, "NotAuthorizedOrNotFound")
    else:
        assert [m.content for m in get(elsewhere, queue_id)] == ["in its own cell"]


def test_dead_letter_after_the_delivery_count(
    admin: QueueAdminClient, config: dict[str, Any], server: OciTestServer
) -> None:
    queue_id = create_queue(admin, server, "dlq", dead_letter_queue_delivery_count=2, timeout_in_seconds=0)
    client = messages_client(server, config, queue_id)
    put(client, queue_id, "poison")
    for delivery in (1, 2):
        [message] = get(client, queue_id, visibility_in_seconds=60)
        assert message.delivery_count == delivery
        # The consumer gives up: its visibility lapses now instead of in 60 s.
        client.update_message(queue_id, message.receipt, UpdateMessageDetails(visibility_in_seconds=0))
    assert get(client, queue_id) == [], "a message at the delivery count goes to the DLQ, not to a consumer"
    stats = client.get_stats(queue_id).data
    assert (stats.queue.visible_messages, stats.queue.in_flight_messages) == (0, 0)
    assert (stats.dlq.visible_messages, stats.dlq.size_in_bytes) == (1, len("poison"))
    error = service_error(client.delete_message, queue_id, message.receipt)
    assert (error.status, error.code) == stale(server)


def test_purge_normal_dlq_and_both(admin: QueueAdminClient, config: dict[str, Any], server: OciTestServer) -> None:
    queue_id = create_queue(admin, server, "purge", dead_letter_queue_delivery_count=1, timeout_in_seconds=0)
    client = messages_client(server, config, queue_id)

    def fill() -> None:
        """One dead letter and one normal message."""
        put(client, queue_id, "dead")
        [message] = get(client, queue_id, visibility_in_seconds=0)  # its one delivery, lapsed at once
        assert message.delivery_count == 1
        put(client, queue_id, "alive")
        assert counts() == (1, 1)

    def counts() -> tuple[int, int]:
        stats = client.get_stats(queue_id).data
        return (
            stats.queue.visible_messages + stats.queue.in_flight_messages,
            stats.dlq.visible_messages + stats.dlq.in_flight_messages,
        )

    def purge(kind: str) -> None:
        response = admin.purge_queue(queue_id, PurgeQueueDetails(purge_type=kind))
        assert admin.get_work_request(response.headers["opc-work-request-id"]).data.status == "SUCCEEDED"

    fill()
    purge("DLQ")
    assert counts() == (1, 0)
    purge("NORMAL")
    assert counts() == (0, 0)
    fill()
    purge("BOTH")
    assert counts() == (0, 0)


# -- errors ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["400", "404"])
def test_receipts_that_do_not_name_a_current_delivery(
    mode: str, server: OciTestServer, lenient: OciTestServer, request: pytest.FixtureRequest
) -> None:
    """Answered as ``--stale-receipt`` says; the 400 does not say "receipt" (nothing says the service would)."""
    chosen = server if mode == server.modes.stale_receipt else lenient
    assert chosen.modes.stale_receipt == mode
    config = oci.config.from_file(str(chosen.config_file))
    admin = QueueAdminClient(config, **client_options(chosen))
    queue_id = create_queue(admin, chosen, request.node.name, timeout_in_seconds=0)
    client = messages_client(chosen, config, queue_id)
    put(client, queue_id, "x")
    [message] = get(client, queue_id, visibility_in_seconds=60)
    client.delete_message(queue_id, message.receipt)
    errors = [
        service_error(client.delete_message, queue_id, message.receipt),
        service_error(client.update_message, queue_id, message.receipt, UpdateMessageDetails(visibility_in_seconds=5)),
    ]
    assert [(error.status, error.code) for error in errors] == [STALE_ANSWERS[mode]] * 2
    assert not any("receipt" in error.message.lower() for error in errors if error.status == 400)
    error = service_error(client.delete_message, queue_id, "not-a-receipt")
    assert (error.status, error.code) == (400, "InvalidParameter")


@pytest.mark.parametrize("mode", ["refuse", "clamp"])
def test_an_update_past_the_retention_is_refused_or_clamped(
    mode: str, server: OciTestServer, lenient: OciTestServer, request: pytest.FixtureRequest
) -> None:
    """``--retention-bound``: a visibility that would end after the message expires is refused (nothing changes)
    or ends at the expiry; one that ends before it is kept as asked."""
    chosen = server if mode == server.modes.retention_bound else lenient
    assert chosen.modes.retention_bound == mode
    config = oci.config.from_file(str(chosen.config_file))
    admin = QueueAdminClient(config, **client_options(chosen))
    queue_id = create_queue(admin, chosen, request.node.name, timeout_in_seconds=0, retention_in_seconds=60)
    client = messages_client(chosen, config, queue_id)
    put(client, queue_id, "short-lived")
    [message] = get(client, queue_id, visibility_in_seconds=30)
    expires = message.expire_after.timestamp()

    kept = client.update_message(queue_id, message.receipt, UpdateMessageDetails(visibility_in_seconds=50)).data
    assert kept.visible_after.timestamp() < expires
    if mode == "refuse":
        client.update_message(queue_id, message.receipt, UpdateMessageDetails(visibility_in_seconds=0))
        error = service_error(
            client.update_message, queue_id, message.receipt, UpdateMessageDetails(visibility_in_seconds=120)
        )
        assert (error.status, error.code) == (400, "InvalidParameter")
        batch = client.update_messages(
            queue_id,
            UpdateMessagesDetails(entries=[UpdateMessagesDetailsEntry(receipt=message.receipt, visibility_in_seconds=120)]),
        ).data
        assert batch.entries[0].error_code == 400
        assert [m.id for m in get(client, queue_id)] == [message.id], "a refused update hid the message"
    else:
        clamped = client.update_message(queue_id, message.receipt, UpdateMessageDetails(visibility_in_seconds=120))
        assert clamped.data.visible_after == message.expire_after


def test_an_unknown_queue_is_not_found(admin: QueueAdminClient, client: QueueClient) -> None:
    for error in (
        service_error(client.get_messages, NO_SUCH_QUEUE, timeout_in_seconds=0),
        service_error(admin.get_queue, NO_SUCH_QUEUE),
        service_error(client.get_stats, NO_SUCH_QUEUE),
    ):
        assert (error.status, error.code) == (404, "NotAuthorizedOrNotFound")
        assert error.request_id


@pytest.mark.parametrize(
    "options",
    [
        {"limit": 21},
        {"limit": 0},
        {"visibility_in_seconds": 43201},
        {"timeout_in_seconds": 31},
    ],
)
def test_get_messages_parameters_out_of_range(client: QueueClient, queue_id: str, options: dict[str, int]) -> None:
    error = service_error(client.get_messages, queue_id, **options)
    assert (error.status, error.code) == (400, "InvalidParameter")


def test_message_size_and_batch_limits(client: QueueClient, queue_id: str) -> None:
    assert put(client, queue_id, "x" * 256 * 1024), "a message of exactly the limit is accepted"
    error = service_error(put, client, queue_id, "x" * (256 * 1024 + 1))
    assert (error.status, error.code) == (400, "InvalidParameter")
    error = service_error(put, client, queue_id, "é" * (128 * 1024 + 1))  # the limit counts UTF-8 bytes
    assert error.status == 400
    error = service_error(put, client, queue_id, *["m"] * 21)
    assert (error.status, error.code) == (400, "InvalidParameter")
    error = service_error(client.update_message, queue_id, "eA", UpdateMessageDetails(visibility_in_seconds=43201))
    assert (error.status, error.code) == (400, "InvalidParameter")


def test_a_request_signed_with_another_key_is_not_authenticated(server: OciTestServer, tmp_path: Path) -> None:
    wrong = oci.config.from_file(str(server.wrong_key_config(tmp_path)))
    error = service_error(QueueClient(wrong, **client_options(server)).get_stats, NO_SUCH_QUEUE)
    assert (error.status, error.code) == (401, "NotAuthenticated")
    error = service_error(
        QueueAdminClient(wrong, **client_options(server)).create_queue,
        CreateQueueDetails(display_name="never", compartment_id=server.compartment_id),
    )
    assert (error.status, error.code) == (401, "NotAuthenticated")


class _Unsigned(oci.signer.AbstractBaseSigner):
    """Sends requests without an Authorization header, as a caller with no credentials would."""

    def __call__(self, request: Any, enforce_content_headers: bool = True) -> Any:
        return request


class _StaleDate(oci.signer.Signer):
    """Signs correctly, but dates the request 10 minutes ago (a replayed or badly clocked request)."""

    def __call__(self, request: Any, enforce_content_headers: bool = True) -> Any:
        request.headers["date"] = email.utils.formatdate(time.time() - 600, usegmt=True)
        return super().__call__(request, enforce_content_headers)


@pytest.mark.parametrize("signer", ["unsigned", "stale date"])
def test_requests_without_a_valid_signature_are_refused(
    server: OciTestServer, config: dict[str, Any], queue_id: str, signer: str
) -> None:
    signers = {
        "unsigned": _Unsigned(),
        "stale date": _StaleDate(config["tenancy"], config["user"], config["fingerprint"], config["key_file"]),
    }
    client = QueueClient(config, **client_options(server, signer=signers[signer]))
    error = service_error(client.get_stats, queue_id)
    assert (error.status, error.code) == (401, "NotAuthenticated")
    error = service_error(client.put_messages, queue_id, PutMessagesDetails(messages=[PutMessagesDetailsEntry(content="x")]))
    assert (error.status, error.code) == (401, "NotAuthenticated")


# -- resource principals (session tokens) ---------------------------------------------------------------------------


def resource_principal_clients(server: OciTestServer, messages_endpoint: str) -> tuple[QueueAdminClient, QueueClient]:
    """Both clients signed in as the resource principal the environment describes, as an OCI Function would be;
    the data-plane one at ``messages_endpoint``."""
    signer = oci.auth.signers.get_resource_principals_signer()
    config = {"region": signer.region}
    return (
        QueueAdminClient(config, **client_options(server, signer=signer)),
        QueueClient(config, **client_options(server, service_endpoint=messages_endpoint, signer=signer)),
    )


def test_a_resource_principal_lists_queues_and_puts_and_gets_messages(
    server: OciTestServer, queue_id: str, messages_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in server.resource_principal_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    signer = oci.auth.signers.get_resource_principals_signer()
    assert isinstance(signer, oci.auth.signers.EphemeralResourcePrincipalSigner)
    assert (signer.region, signer.tenancy_id, signer.compartment_id) == (
        "us-ashburn-1",
        "ocid1.tenancy.oc1..test",
        server.compartment_id,
    )
    assert signer.api_key.startswith("ST$")  # the keyId: the token itself

    admin, client = resource_principal_clients(server, messages_endpoint)
    listed = admin.list_queues(compartment_id=server.compartment_id).data.items
    assert queue_id in {q.id for q in listed}
    [message_id] = put(client, queue_id, "from a function")
    [got] = get(client, queue_id)
    assert (got.id, got.content) == (message_id, "from a function")
    client.delete_message(queue_id, got.receipt)
    assert get(client, queue_id) == []


def test_a_session_token_from_another_issuer_is_not_authenticated(
    server: OciTestServer, queue_id: str, messages_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in server.resource_principal_env(tmp_path, valid=False).items():
        monkeypatch.setenv(name, value)
    admin, client = resource_principal_clients(server, messages_endpoint)
    error = service_error(admin.list_queues, compartment_id=server.compartment_id)
    assert (error.status, error.code) == (401, "NotAuthenticated")
    assert "not issued by this server's token issuer" in error.message
    error = service_error(client.put_messages, queue_id, PutMessagesDetails(messages=[PutMessagesDetailsEntry(content="x")]))
    assert (error.status, error.code) == (401, "NotAuthenticated")


@pytest.mark.parametrize("case", ["expired token", "signed with another key"])
def test_an_expired_token_or_a_signature_by_another_key_is_not_authenticated(
    server: OciTestServer, queue_id: str, case: str
) -> None:
    session_key, signing_key = new_key(), new_key()
    if case == "expired token":
        token, signing_key = server.session_token(session_key.public_key(), lifetime=-60), session_key
    else:
        token = server.session_token(session_key.public_key())
    pem = signing_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    # Token and key as contents rather than paths: the signer's other mode, the same requests.
    signer = oci.auth.signers.EphemeralResourcePrincipalSigner(session_token=token, private_key=pem, region="us-ashburn-1")
    client = QueueClient({"region": signer.region}, **client_options(server, signer=signer))
    error = service_error(client.get_stats, queue_id)
    assert (error.status, error.code) == (401, "NotAuthenticated")
    assert ("expired" if case == "expired token" else "the key of the session token") in error.message


def test_after_a_401_the_sdk_reads_the_token_file_again(
    server: OciTestServer, queue_id: str, messages_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the fixture gives paths: the platform replaces the token in its file, and the SDK picks it up on a 401."""
    env = server.resource_principal_env(tmp_path, valid=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _, client = resource_principal_clients(server, messages_endpoint)
    assert service_error(client.get_stats, queue_id).status == 401

    server.renew_resource_principal_token(env)
    assert client.get_stats(queue_id).data.queue.visible_messages == 0

"""Each OCI queue's messages go to its own messages endpoint, wherever the connection string points.

The SDK says of every data-plane call that "the messages endpoint may be different for different queues. Use
GetQueue to find the queue's messagesEndpoint". The test server places queues on two cells in turn and, by default
(``--other-cell 404``), answers a queue's messages at the other cell's endpoint as it answers an unknown queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import oci
import pytest

from tests.conftest import oci_connection
from tests.oci.fixture import OciTestServer
from worker.backends.registry import open_backend


@pytest.fixture
def moving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    """A server of the test's own: moving queues to another cell would move every other test's too."""
    with OciTestServer(tmp_path_factory.mktemp("oci-cells")) as server:
        yield server


def endpoint_of(server: OciTestServer, queue: str) -> str:
    admin = oci.queue.QueueAdminClient(oci.config.from_file(str(server.config_file)), service_endpoint=server.endpoint)
    [found] = admin.list_queues(compartment_id=server.compartment_id, display_name=queue).data.items
    return str(found.messages_endpoint)


async def test_messages_flow_to_queues_in_both_cells(oci_server: OciTestServer, tmp_path: Path, queue_name: str) -> None:
    assert oci_server.modes.other_cell == "404"
    queues = [f"{queue_name}-1", f"{queue_name}-2"]
    backend = open_backend(oci_connection(oci_server), tmp_path)
    try:
        for queue in queues:  # one after the other: the server places them on its two cells in turn
            await backend.create_queue(queue)
        assert {endpoint_of(oci_server, queue) for queue in queues} == set(oci_server.messages_endpoints)
        for queue in queues:
            await backend.put(queue, f"to {queue}")
        for queue in queues:
            [message] = await backend.receive(queue, 20, 30)
            assert message.content == f"to {queue}"
            await backend.delete(queue, message.id, message.pop_receipt or "")
            assert await backend.approximate_count(queue) == 0
    finally:
        await backend.close()


async def test_a_queue_that_moved_is_found_at_its_new_endpoint(
    moving: OciTestServer, tmp_path: Path, queue_name: str
) -> None:
    retries: list[str] = []
    backend = open_backend(oci_connection(moving), tmp_path, on_retry=retries.append)
    try:
        await backend.create_queue(queue_name)
        await backend.put(queue_name, "before")  # the endpoint is looked up and kept
        before = endpoint_of(moving, queue_name)
        moving.move_queues()
        assert endpoint_of(moving, queue_name) != before
        await backend.put(queue_name, "after")  # 404 at the old cell: looked up again, sent once more
        got = await backend.receive(queue_name, 20, 30)
        assert sorted(message.content for message in got) == ["after", "before"]
    finally:
        await backend.close()
    assert retries == [], "the move is not an outage: the retry policy was not needed"

"""A held message keeps its lease up to the end of its retention, and no renewal asks the service for more.

OCI Queue's documentation says a message's visibility "can't extend beyond the message's retention"
(https://docs.oracle.com/iaas/Content/queue/update-messages.htm) without saying how an update asking for more is
answered; the test server refuses one by default (``--retention-bound refuse``, 400 InvalidParameter), which is
also how a stale receipt may be answered, so a renewal that asked for more would read as a lost lease and the
message would show to other receivers before its end. The lease scheduler asks for what the message has left.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import oci

from tests.conftest import oci_connection
from tests.oci.fixture import OciTestServer
from tests.support import apoll
from worker.backends.registry import open_backend
from worker.model import EXPIRY_MARGIN, Lease
from worker.observability.metrics import Metrics
from worker.runtime.lease import LeaseScheduler

#: The shortest retention a queue may have (the API reference's range is 10 s to 7 days).
RETENTION = 10
#: The function's lease: renewed every second or so, so that several renewals meet the retention's end.
LEASE = 3


async def test_a_lease_is_renewed_up_to_the_end_of_the_retention_and_no_further(
    oci_server: OciTestServer, tmp_path: Path, queue_name: str
) -> None:
    assert oci_server.modes.retention_bound == "refuse"
    admin = oci.queue.QueueAdminClient(
        oci.config.from_file(str(oci_server.config_file)), service_endpoint=oci_server.endpoint
    )
    admin.create_queue(
        oci.queue.models.CreateQueueDetails(
            display_name=queue_name, compartment_id=oci_server.compartment_id, retention_in_seconds=RETENTION
        )
    )
    holder = open_backend(oci_connection(oci_server), tmp_path)
    other = open_backend(oci_connection(oci_server), tmp_path)
    metrics = Metrics()
    scheduler = LeaseScheduler(LEASE, 0.5, metrics)
    renewing = asyncio.create_task(scheduler.run())
    try:
        await holder.put(queue_name, "held to its end")
        [raw] = await holder.receive(queue_name, 1, LEASE)
        assert raw.expiration_time is not None
        expires = raw.expiration_time.timestamp()
        lease = Lease(holder, queue_name, raw.id, raw.pop_receipt, duration=LEASE, message_expires=expires)
        scheduler.hold(lease)

        # Whole seconds short of the expiry: what a whole-second visibility that must not pass it leaves over.
        shown_from = expires - EXPIRY_MARGIN - holder.limits.visibility_resolution

        async def gone() -> bool:
            """The lease holds and the message is shown to nobody else until its last moments; then it is gone."""
            left = expires - time.time()
            assert not lease.is_lost, f"lease lost {left:.1f} s before the message's expiry"
            if time.time() < shown_from:
                assert await other.receive(queue_name, 1, 1) == [], f"shown to another receiver {left:.1f} s early"
            return left < -0.5 and await other.approximate_count(queue_name) == 0

        await apoll(gone, RETENTION + 10, interval=0.2, what="the message to reach the end of its retention")
        assert lease.renewals >= 3, "the lease was not renewed up to the end"
        assert metrics.get("storage_errors") == 0, "a renewal was refused"
    finally:
        renewing.cancel()
        await holder.close()
        await other.close()

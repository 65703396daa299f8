"""A queue's URL as GetQueueUrl answers it, for a SAM template's ``!Ref`` of a queue: one short attempt, on botocore.

It lives here so that only what the ``sqs`` extra installs imports botocore.
"""

from __future__ import annotations

from typing import Any

import botocore.session
from botocore.config import Config

from worker.backends.sqs.connection import SqsConnection


def queue_url(connection: SqsConnection, client: list[Any], queue: str) -> str:
    """GetQueueUrl of ``queue`` through ``connection``; ``client`` keeps the one client made for every look-up."""
    if not client:
        client.append(
            botocore.session.Session(profile=connection.profile).create_client(
                "sqs",
                region_name=connection.region,
                endpoint_url=connection.endpoint,
                config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=10),
            )
        )
    return str(client[0].get_queue_url(QueueName=queue)["QueueUrl"])

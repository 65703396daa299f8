"""Fixtures of the host tests: the queue the host under test reads, seen from the test's side.

Every host test runs on each backend: the embedded queue in the test's folder,
and Azurite, which is cleared before each test so that fixed queue names do
not meet messages of earlier tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from worker.queues import open_backend
from worker.queues.base import QueueBackend


@pytest.fixture
async def queue(connection: str | None, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[QueueBackend]:
    """The backend a host with base_dir ``tmp_path`` and ``connection`` uses, with the module's ``QUEUE`` created."""
    backend = open_backend(connection, tmp_path)
    if connection is not None:
        for name in await backend.list_queues():
            await backend.delete_queue(name)
    await backend.create_queue(request.module.QUEUE)
    yield backend
    await backend.close()

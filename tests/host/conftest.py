"""Fixtures of the host tests: the queue the host under test reads, seen from the test's side."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from worker.queues.base import QueueBackend
from worker.queues.sqlite import SqliteBackend


@pytest.fixture
async def queue(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[QueueBackend]:
    """The embedded queue file a host with base_dir ``tmp_path`` uses, with the test module's ``QUEUE`` created."""
    backend = SqliteBackend(tmp_path / ".worker" / "queues.sqlite3")
    await backend.create_queue(request.module.QUEUE)
    yield backend
    await backend.close()

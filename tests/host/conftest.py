"""Fixtures of the host tests: the queue the host under test reads, seen from the test's side.

Every host test runs on each backend: the embedded queue in the test's folder,
and Azurite, which is cleared before each test so that fixed queue names do
not meet messages of earlier tests.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import worker.runtime.host as host_module
from worker.backends.queues import QueueBackend
from worker.backends.registry import open_backend

#: The dead-letter delivery limit of the OCI queues the host tests use (above every test's maxDequeueCount).
DELIVERY_LIMIT = 10


@pytest.fixture
async def queue(connection: str | None, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[QueueBackend]:
    """The backend a host with base_dir ``tmp_path`` and ``connection`` uses, with the module's ``QUEUE`` created."""
    backend = open_backend(connection, tmp_path)
    if connection is not None:
        for name in await backend.list_queues():
            await backend.delete_queue(name)
    await backend.create_queue(request.module.QUEUE)
    if backend.service_dead_letters:  # an OCI queue made by an operator has its delivery limit set
        request.getfixturevalue("oci_server").set_delivery_limit(request.module.QUEUE, DELIVERY_LIMIT)
    yield backend
    await backend.close()


@pytest.fixture
def record_db(tmp_path: Path) -> Path:
    """The table the recording apps (tests/apps/recording.py) write each attempt to."""
    return tmp_path / "attempts.sqlite3"


@pytest.fixture
def receive_times(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each receive of an in-process host started (time.monotonic()): the host's backends are wrapped."""
    receives: list[float] = []
    real_open = host_module.open_backend

    def spying_open(connection: str | None, base_dir: Path, **kwargs: Any) -> QueueBackend:
        backend = real_open(connection, base_dir, **kwargs)
        receive = backend.receive

        async def counted(*args: Any, **kwargs: Any) -> Any:
            receives.append(time.monotonic())
            return await receive(*args, **kwargs)

        backend.receive = counted  # type: ignore[method-assign]
        return backend

    monkeypatch.setattr(host_module, "open_backend", spying_open)
    return receives

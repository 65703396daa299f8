"""Fixtures shared by every test: one queue backend per supported kind, and unique queue names."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from worker.observability import configure_logging
from worker.queues.base import QueueBackend
from worker.queues.sqlite import SqliteBackend

#: Every backend the conformance suite and the host tests run on.
BACKENDS = ["sqlite"]


def open_test_backend(kind: str, tmp_path: Path) -> QueueBackend:
    if kind == "sqlite":
        return SqliteBackend(tmp_path / "queues.sqlite3")
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def backend(backend_kind: str, tmp_path: Path) -> AsyncIterator[QueueBackend]:
    b = open_test_backend(backend_kind, tmp_path)
    yield b
    await b.close()


@pytest.fixture
def queue_name() -> str:
    """A queue name no other test uses (backends may be shared across tests)."""
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True, scope="session")
def _logging() -> None:
    """In-process hosts log as the worker does; pytest shows the lines of failing tests only."""
    configure_logging("INFO", json_lines=False)

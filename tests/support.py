"""Helpers shared by the tests: polling with a deadline instead of sleeping."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from email.message import Message
from types import ModuleType
from typing import Any, TypeVar

import pytest
import structlog

from worker import WorkerApp
from worker.runtime.host import Host
from worker.settings.config import HostConfig

T = TypeVar("T")


def poll(check: Callable[[], T], timeout: float, interval: float = 0.05, what: str = "condition") -> T:
    """Call ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def apoll(check: Callable[[], Awaitable[T]], timeout: float, interval: float = 0.05, what: str = "condition") -> T:
    """The async twin of :func:`poll` for checks that talk to a queue backend."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


@contextmanager
def captured_logs(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> Iterator[list[dict[str, Any]]]:
    """The lines the ``log`` of each of ``modules`` writes in the block, as ``structlog.testing.capture_logs`` gives
    them. Each module's logger is replaced by a fresh one of the same name for the block: once logging is configured
    (``cache_logger_on_first_use``, as earlier tests in the process may have done), a module's own logger keeps the
    processors it was first used with, and capture_logs would not see its lines."""
    with structlog.testing.capture_logs() as logs:
        for module in modules:
            monkeypatch.setattr(module, "log", structlog.get_logger(*module.log._logger_factory_args))
        yield logs


@asynccontextmanager
async def running(app: WorkerApp, config: HostConfig) -> AsyncIterator[Host]:
    """A host running on this loop until the block ends; then it drains and stops."""
    host = Host(app, config)
    task = asyncio.create_task(host.run())
    try:
        yield host
    finally:
        host.request_stop()
        await asyncio.wait_for(task, 60)


def free_port() -> int:
    """A loopback port nothing listens on now (for a worker's endpoints)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the block runs: bound by this process and not
    listening, so that no other process can start listening on it meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def get(port: int, path: str, timeout: float = 10) -> tuple[int, str]:
    """GET a worker endpoint on loopback: the status and the body, also for 4xx and 5xx answers."""
    status, _, body = fetch(port, path, timeout=timeout)
    return status, body


def fetch(
    port: int,
    path: str,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    scheme: str = "Bearer",
    timeout: float = 10,
) -> tuple[int, Message, str]:
    """GET ``path`` from ``host:port``, with ``token`` in an Authorization header when given: the status, the
    headers and the body, also for 4xx and 5xx answers."""
    request = urllib.request.Request(f"http://{host}:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"{scheme} {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()

"""Helpers shared by the tests: polling with a deadline instead of sleeping."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from email.message import Message
from typing import TypeVar

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


def get(port: int, path: str, timeout: float = 10) -> tuple[int, str]:
    """GET a worker endpoint on loopback: the status and the body, also for 4xx and 5xx answers."""
    status, _, body = fetch(port, path, timeout=timeout)
    return status, body


def fetch(
    port: int, path: str, *, host: str = "127.0.0.1", token: str | None = None, scheme: str = "Bearer",
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

"""What connections to the endpoints may take of a worker: real hosts and real sockets on loopback, in this process.

Past ``worker.httpMaxConnections`` a new connection is closed at once, but one that waited too long for its request
gives way to a probe; a connection that sends no full request in ``worker.httpHeaderTimeout``, or idles between
requests for ``worker.httpIdleTimeout``, is closed, while a slow answer is not cut; ``/readyz`` asks storage once
for many probes; wrong tokens are counted, throttled (429) and logged in a line per interval; and the accept loop,
out of descriptors, says so once per interval however often it fails. The process tests
(``test_endpoint_flood.py``) show the same under a real limit on open files.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.host.test_endpoint_guard import app
from tests.host.test_endpoint_guard import config as guard_config
from tests.support import apoll, captured_logs, free_port, running
from worker.observability.metrics import Metrics
from worker.runtime import connections, guard
from worker.runtime.connections import ACCEPT_ERROR, ConnectionLimits, Gate
from worker.runtime.endpoints import Endpoints, listen
from worker.runtime.guard import BLOCK_AFTER, Access
from worker.runtime.lease import LeaseScheduler
from worker.settings.config import HostConfig
from worker.settings.http_token import TOKEN_ENV

TOKEN = "Y29ubmVjdGlvbnMtdGVzdC10b2tlbg"


def config(tmp_path: Path, **settings: object) -> HostConfig:
    """The endpoint guard tests' settings, on loopback."""
    return guard_config(tmp_path, http_host="127.0.0.1", **settings)


async def status(port: int, path: str, token: str | None = None) -> int | None:
    """The status of ``path``, or None when the connection is closed before an answer."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as answer,
        ):
            await answer.read()
            return answer.status
    except aiohttp.ClientConnectionError:
        return None


async def closed(reader: asyncio.StreamReader, within: float) -> float:
    """When (``time.monotonic()``) the server closes the connection, which it sends nothing more on; fails after
    ``within`` seconds."""
    async with asyncio.timeout(within):
        try:
            assert await reader.read(1) == b""
        except ConnectionResetError:
            pass
    return time.monotonic()


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_past_the_cap_new_connections_close_at_once_and_a_probe_still_gets_in(tmp_path: Path) -> None:
    settings = config(tmp_path, http_max_connections=4)
    port = settings.http_port
    async with running(app(), settings) as host:
        await apoll(lambda: status(port, "/healthz"), 15, what="the endpoints to listen")
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        try:
            await apoll(
                lambda: _now(sample(host.metrics, "worker_http_connections_closed_total", reason="limit") == 6),
                10,
                what="the six connections past the cap closed",
            )
            assert sample(host.metrics, "worker_http_connections") == 4
            for reader, _ in idle[4:]:
                await closed(reader, 5)
            # The four held have sent nothing; once they have waited a while, the oldest gives way to a probe.
            assert await apoll(lambda: status(port, "/healthz"), 10, what="/healthz past the cap") == 200
            assert sample(host.metrics, "worker_http_connections_closed_total", reason="gave_way") >= 1
            await closed(idle[0][0], 5)
        finally:
            for _, writer in idle:
                writer.close()


async def test_a_connection_without_a_request_in_time_or_idle_too_long_is_closed(tmp_path: Path) -> None:
    settings = config(tmp_path, http_header_timeout=0.3, http_idle_timeout=1.0)
    port = settings.http_port
    async with running(app(), settings) as host:
        await apoll(lambda: status(port, "/healthz"), 15, what="the endpoints to listen")
        opened = time.monotonic()
        silent = await asyncio.open_connection("127.0.0.1", port)
        slow = await asyncio.open_connection("127.0.0.1", port)
        slow[1].write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and the rest of its headers never
        keep_alive = await asyncio.open_connection("127.0.0.1", port)
        keep_alive[1].write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            assert 0.3 <= await closed(silent[0], 10) - opened < 5
            assert 0.3 <= await closed(slow[0], 10) - opened < 5
            head = await keep_alive[0].readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" not in head
            length = int(
                next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
            )
            await keep_alive[0].readexactly(length)
            answered = time.monotonic()
            # Idle after its answer: the idle timeout, not the header timeout (its timer starts as the answer goes).
            assert 0.5 <= await closed(keep_alive[0], 10) - answered < 5
            assert sample(host.metrics, "worker_http_connections_closed_total", reason="header_timeout") == 2
            assert sample(host.metrics, "worker_http_connections_closed_total", reason="idle_timeout") == 1
        finally:
            for _, writer in (silent, slow, keep_alive):
                writer.close()


async def test_readyz_asks_storage_once_for_many_probes_and_a_slow_answer_is_not_cut(tmp_path: Path) -> None:
    """Three hundred probes at once while storage takes longer to answer than the header timeout: one storage
    call, and every probe answered."""
    calls = 0
    answer = asyncio.Event()

    async def storage_check() -> None:
        nonlocal calls
        calls += 1
        await answer.wait()

    metrics = Metrics()
    endpoints = Endpoints(
        metrics, LeaseScheduler(60, 0.5, metrics), storage_check, ["f"], draining=lambda: False, stuck=lambda: None
    )
    port = free_port()
    await endpoints.start(port, Access(None, "127.0.0.1"), limits=ConnectionLimits(400, 0.3, 0.3))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def probe() -> int:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    await response.read()
                    return response.status

            probes = [asyncio.create_task(probe()) for _ in range(300)]
            await apoll(lambda: _now(sample(metrics, "worker_http_connections") == 300), 20, what="three hundred probes in")
            await asyncio.sleep(0.6)  # twice the header and idle timeouts: what must not happen meanwhile
            answer.set()
            assert await asyncio.gather(*probes) == [200] * 300
        assert calls == 1
        assert sample(metrics, "worker_http_connections_closed_total", reason="header_timeout") == 0
    finally:
        await endpoints.stop()


async def test_wrong_tokens_are_counted_throttled_and_logged_in_few_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    settings = config(tmp_path)
    port = settings.http_port
    with captured_logs(monkeypatch, guard, connections) as logs:
        async with running(app(), settings) as host:
            await apoll(lambda: status(port, "/healthz"), 15, what="the endpoints to listen")
            answers = [await status(port, "/metrics", token=f"wrong-{n:02d}-{TOKEN}") for n in range(50)]
            assert answers == [401] * BLOCK_AFTER + [429] * (50 - BLOCK_AFTER)
            assert await status(port, "/leases", token=TOKEN) == 200  # the right token still passes
            assert await status(port, "/leases") == 401  # none at all is no attempt: not counted
            assert sample(host.metrics, "worker_http_token_failures_total", status="401") == BLOCK_AFTER
            assert sample(host.metrics, "worker_http_token_failures_total", status="429") == 50 - BLOCK_AFTER
    lines = [line for line in logs if line["event"] == "endpoint token refused"]
    # One line at once, the rest counted in one more when the interval ends (here: when the host stops).
    assert len(lines) == 2, lines
    assert sum(line["count"] for line in lines) == 50 and lines[-1]["total"] == 50
    assert lines[0]["peers"] == {"127.0.0.1": 1} and lines[-1]["peers"] == {"127.0.0.1": 49}
    assert lines[-1]["blocked"] is True and lines[-1]["status"] == 429
    assert TOKEN not in repr(logs)


async def test_the_accept_loop_out_of_descriptors_says_so_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process runs out of descriptors for a while: asyncio fails to accept every queued connection, and
    again every second; the gate counts every failure and says it in one line until the interval ends."""
    port = free_port()
    handler = asyncio.get_running_loop().get_exception_handler()
    with captured_logs(monkeypatch, connections) as logs:
        gate = Gate(ConnectionLimits())  # made here, so that it logs to the captured log
        runner = web.AppRunner(web.Application(middlewares=[gate.middleware]))
        await runner.setup()
        await listen(runner, "127.0.0.1", port, gate)
        clients: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        waiting: list[socket.socket] = []
        try:
            clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            await apoll(lambda: _now(gate.open == 3), 10, what="the first connections accepted")
            waiting = [_unconnected() for _ in range(5)]  # their descriptors taken before there are none
            with _no_descriptors_left():
                for sock in waiting:
                    sock.connect_ex(("127.0.0.1", port))
                await apoll(lambda: _now(gate.accept_errors.total >= 2), 10, what="accepts failing twice")
            await apoll(lambda: _now(gate.open == 8), 10, what="the waiting connections accepted at last")
            said = [line for line in logs if line["event"] == ACCEPT_ERROR]
            assert len(said) == 1 and said[0]["count"] == 1 and "Too many open files" in said[0]["error"]
        finally:
            for sock in waiting:
                sock.close()
            for _, writer in clients:
                writer.close()
            await runner.cleanup()
    said = [line for line in logs if line["event"] == ACCEPT_ERROR]
    assert len(said) == 2 and said[1]["total"] == gate.accept_errors.total >= 2
    assert asyncio.get_running_loop().get_exception_handler() is handler  # the loop's own handler back


def _unconnected() -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    return sock


@contextmanager
def _no_descriptors_left() -> Iterator[None]:
    """Every descriptor this process may open taken (the soft limit lowered, then filled), for the block only."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(name) for name in os.listdir("/proc/self/fd"))
    taken = [os.open(os.devnull, os.O_RDONLY)]
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 64, hard))
    try:
        while True:
            try:
                taken.append(os.dup(taken[0]))
            except OSError:
                break
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _now(value: bool) -> bool:
    return value

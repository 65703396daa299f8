"""What the endpoints' connections may take of the process: how many, how long, how loud the accept loop is.

Idle connections could take every descriptor, and every message would then fail. So:
- a cap (``worker.httpMaxConnections``, at most :data:`SHARE_OF_DESCRIPTORS`); the oldest idle gives way;
- timeouts for headers (``worker.httpHeaderTimeout``) and idleness (``worker.httpIdleTimeout``);
- a small :data:`ACCEPT_AT_ONCE`; the socket's :data:`BACKLOG` holds the rest without descriptors;
- accept errors counted, said once per :data:`LOG_INTERVAL` (:class:`Throttled`).
It wraps aiohttp's documented low-level server; no private part of aiohttp is used.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from worker.settings.config import HostConfig

log = structlog.get_logger("worker.runtime.connections")

#: How long a connection must have waited for a request before a new one at the cap may close it, in seconds: long
#: enough for any client that connects to send its request.
GIVE_WAY_AFTER = 1.0
#: The most connections asyncio accepts in a row, each holding a descriptor until the gate closes those past the cap.
ACCEPT_AT_ONCE = 16
#: Connections the system keeps waiting to be accepted (as nginx's and Node's default).
BACKLOG = 511
#: The endpoints' connections take at most this part (one in so many) of the descriptors the process may open,
#: whatever the cap.
SHARE_OF_DESCRIPTORS = 4
#: At most one line per this many seconds for each kind of repeated trouble (failed accepts, wrong tokens).
LOG_INTERVAL = 10.0
#: What asyncio's accept loop says when the process (or the system) has no descriptor left for a connection.
ACCEPT_ERROR = "socket.accept() out of system resource"
#: Why a connection was closed by the gate, as /metrics labels it.
CLOSE_REASONS = ("limit", "gave_way", "header_timeout", "idle_timeout")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ConnectionLimits:
    """The endpoints' limits on connections: ``worker.httpMaxConnections``, ``httpHeaderTimeout``,
    ``httpIdleTimeout`` (seconds)."""

    max_connections: int = 64
    header_timeout: float = 10.0
    idle_timeout: float = 75.0

    @classmethod
    def of(cls, config: HostConfig) -> ConnectionLimits:
        """The limits a host's settings ask for."""
        return cls(config.http_max_connections, config.http_header_timeout, config.http_idle_timeout)


class Throttled:
    """A log line said at most once per interval: the first at once, those after it counted and said together
    when the interval ends, so that a flood costs one line per interval and loses no count."""

    def __init__(self, say: Callable[..., Any], event: str, interval: float = LOG_INTERVAL) -> None:
        """``say`` is a logger's method (``log.warning``); ``event`` the line's text."""
        self.say = say
        self.event = event
        self.interval = interval
        #: Every occurrence, said or not.
        self.total = 0
        self._pending = 0
        self._peers: Counter[str] = Counter()
        self._fields: dict[str, Any] = {}
        self._quiet_until = 0.0
        self._flush: asyncio.TimerHandle | None = None

    def note(self, peer: str | None = None, **fields: Any) -> None:
        """One more occurrence; ``fields`` (the latest's) go on the next line, ``peer`` among the peers counted."""
        self.total += 1
        self._pending += 1
        if peer is not None:
            self._peers[peer] += 1
        self._fields = fields
        now = time.monotonic()
        if now >= self._quiet_until:
            self._say(now)
        elif self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(self._quiet_until - now, self._flushed)

    def close(self) -> None:
        """Say what is still counted, now (the server stops)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._pending:
            self._say(time.monotonic())

    def _flushed(self) -> None:
        self._flush = None
        if self._pending:
            self._say(time.monotonic())

    def _say(self, now: float) -> None:
        peers = dict(self._peers.most_common(5))
        self.say(
            self.event,
            count=self._pending,
            total=self.total,
            interval=self.interval,
            **({"peers": peers} if peers else {}),
            **self._fields,
        )
        self._pending = 0
        self._peers.clear()
        self._quiet_until = now + self.interval


class Gate:
    """Admits the endpoints' connections within :class:`ConnectionLimits` and closes those that outstay them."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        #: The cap in force: the setting's, or the share of descriptors the process may open when that is less.
        self.max_connections = (
            limits.max_connections
            if soft == resource.RLIM_INFINITY
            else max(1, min(limits.max_connections, soft // SHARE_OF_DESCRIPTORS))
        )
        #: Connections closed by the gate, by reason (:data:`CLOSE_REASONS`).
        self.closed: Counter[str] = Counter()
        self.accept_errors = Throttled(log.error, ACCEPT_ERROR)
        self._open: dict[asyncio.BaseTransport, _Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous_handler: Any = None
        self._handler: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None

    @property
    def open(self) -> int:
        """Connections open now."""
        return len(self._open)

    def factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        """The protocol factory to listen with: aiohttp's ``server`` behind the gate."""
        return lambda: _Connection(self, server)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Marks the request's connection busy while its handler runs: its headers came in time."""
        connection = self._open.get(request.transport) if request.transport is not None else None
        if connection is None:
            return await handler(request)
        connection.busy(True)
        try:
            return await handler(request)
        finally:
            connection.busy(False)

    def start(self) -> None:
        """Count and throttle the accept loop's errors on this event loop (see :data:`ACCEPT_ERROR`)."""
        loop = self._loop = asyncio.get_running_loop()
        previous = self._previous_handler = loop.get_exception_handler()

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            if context.get("message") == ACCEPT_ERROR:
                exc = context.get("exception")
                self.accept_errors.note(
                    error=str(exc) if exc is not None else None,
                    fix="raise the limit on open files (ulimit -n) or lower worker.httpMaxConnections",
                )
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        self._handler = handler
        loop.set_exception_handler(handler)

    def close(self) -> None:
        """Put the event loop's error handler back and say what is still counted (the runner closes the
        connections)."""
        if self._loop is not None and self._loop.get_exception_handler() is self._handler:
            self._loop.set_exception_handler(self._previous_handler)
        self.accept_errors.close()

    def collect(self) -> Iterator[Metric]:
        """The gate's series for /metrics (a prometheus_client collector)."""
        gauge = GaugeMetricFamily("worker_http_connections", "Connections to the endpoints open now")
        gauge.add_metric([], self.open)
        yield gauge
        closed = CounterMetricFamily(
            "worker_http_connections_closed",
            "Connections to the endpoints the worker closed: over the cap (limit, gave_way) or past a timeout",
            labels=["reason"],
        )
        for reason in CLOSE_REASONS:
            closed.add_metric([reason], self.closed[reason])
        yield closed
        errors = CounterMetricFamily(
            "worker_http_accept_errors", "Connections the endpoints could not accept for want of a file descriptor or memory"
        )
        errors.add_metric([], self.accept_errors.total)
        yield errors

    # -- what a connection tells the gate ---------------------------------------------------------------------

    def admit(self, connection: _Connection) -> bool:
        """Whether ``connection`` may stay: under the cap, or in place of the connection that waited longest."""
        if len(self._open) >= self.max_connections and not self._give_way():
            self.closed["limit"] += 1
            return False
        assert connection.transport is not None
        self._open[connection.transport] = connection
        return True

    def forget(self, connection: _Connection) -> None:
        if connection.transport is not None:
            self._open.pop(connection.transport, None)

    def _give_way(self) -> bool:
        """Close the connection that has waited longest for a request, if it waited :data:`GIVE_WAY_AFTER`."""
        now = time.monotonic()
        waiting = [c for c in self._open.values() if c.waiting_since is not None]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c.waiting_since or 0.0)
        if oldest.waiting_since is None or now - oldest.waiting_since < GIVE_WAY_AFTER:
            return False
        self.closed["gave_way"] += 1
        self.forget(oldest)
        oldest.abort()
        return True


class GatedSite(web.BaseSite):
    """Where a runner listens: ``host``:``port`` through ``gate``; stopped with the runner, as aiohttp's own sites."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, gate: Gate) -> None:
        super().__init__(runner)
        assert runner.server is not None  # BaseSite refuses a runner not set up
        self.host = host
        self.port = port
        self.gate = gate
        self._factory = gate.factory(runner.server)
        self._listening: asyncio.Server | None = None

    @property
    def name(self) -> str:
        return f"http://[{self.host}]:{self.port}" if ":" in self.host else f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        self._listening = await asyncio.get_running_loop().create_server(
            self._factory, self.host, self.port, backlog=ACCEPT_AT_ONCE
        )
        for listening in self._listening.sockets:  # asyncio listened with ACCEPT_AT_ONCE: the system may keep more
            with listening.dup() as same:
                same.listen(BACKLOG)
        self.gate.start()

    async def stop(self) -> None:
        if self._listening is not None:
            self._listening.close()
        await super().stop()
        self.gate.close()


class _Connection(asyncio.Protocol):
    """One connection: aiohttp's protocol behind it once admitted, and the timer that closes it when it waits for
    a request too long."""

    def __init__(self, gate: Gate, server: web.Server) -> None:
        self.gate = gate
        self.server = server
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        #: When it began waiting for a request's headers (monotonic); None while a request is handled.
        self.waiting_since: float | None = None
        self._requests = 0
        self._served = False
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.gate.admit(self):
            transport.abort()  # closes at once: no descriptor held past this turn of the loop
            return
        self._wait(self.gate.limits.header_timeout)
        self.inner = self.server()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        self.gate.forget(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)
            self.inner = None

    def busy(self, started: bool) -> None:
        """A request's handler starts (headers in) or ends (idle until the next request)."""
        self._requests += 1 if started else -1
        if started:
            self._served = True
            self.waiting_since = None
            self._stop_timer()
        elif self._requests == 0 and self.transport is not None and not self.transport.is_closing():
            self._wait(self.gate.limits.idle_timeout)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the next request's headers."""
        self._stop_timer()
        self.waiting_since = time.monotonic()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(timeout, self._expired)

    def _expired(self) -> None:
        self._timer = None
        if self._requests == 0 and self.transport is not None and not self.transport.is_closing():
            self.gate.closed["idle_timeout" if self._served else "header_timeout"] += 1
            self.transport.abort()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

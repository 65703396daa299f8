"""Who may read what from the endpoints, the host's and the supervisor's alike: safe with no setting at all.

- Host header: only an IP, ``localhost``, ``worker.httpHost`` or an allowed name; else 421 (DNS rebinding).
- Token: when set, all but probes and the console's shell need it; wrong ones are counted, repeaters get 429.
- No token: ``/leases`` and console data answer 403 beyond loopback, unless ``worker.httpOpenData``.
- Every answer: ``nosniff``, ``Cache-Control: no-store`` unless set, no version in ``Server``.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.core import CounterMetricFamily, Metric

from worker.observability import logs
from worker.runtime.connections import Gate, Throttled
from worker.runtime.console.web import STATIC
from worker.settings.http_token import BearerToken

log = structlog.get_logger("worker.runtime.guard")

#: Paths a probe must reach without a token; every other path needs it when one is set.
OPEN_PATHS = frozenset({"/healthz", "/readyz", *STATIC})
#: Paths that answer without a token beyond loopback: the probes, the shell, and the metrics Prometheus scrapes.
PUBLIC_PATHS = OPEN_PATHS | {"/metrics"}
#: Host names that always mean this machine.
LOOPBACK_NAMES = frozenset({"localhost"})
#: What the ``Server`` header says: the product, no version to look vulnerabilities up by.
SERVER = "queueworker"

#: Wrong tokens from one address within FAILURE_WINDOW seconds after which it is answered 429 for BLOCK_SECONDS.
BLOCK_AFTER = 10
FAILURE_WINDOW = 60.0
BLOCK_SECONDS = 60.0
#: Addresses remembered at most, the least recent forgotten first, so that many addresses cannot grow the table.
PEERS_KEPT = 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Access:
    """What the endpoints on one address let through."""

    token: BearerToken | None
    #: The address they listen on (``worker.httpHost``).
    bind: str
    #: ``worker.httpOpenData``: serve ``/leases`` and the console's data without a token beyond loopback too.
    open_data: bool = False
    #: ``worker.httpAllowedHosts``: more names the Host header may carry (lower case).
    allowed_hosts: frozenset[str] = frozenset()

    @property
    def data(self) -> str:
        """Who reads ``/leases`` and the console's data: "token", "this machine" or "anyone"; or "nobody"."""
        if self.token is not None:
            return "token"
        if is_loopback(self.bind):
            return "this machine"
        return "anyone" if self.open_data else "nobody"

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's Host header names this worker rather than a name someone else controls."""
        if header is None:  # no browser sends a request without one
            return True
        name = host_name(header)
        if name in LOOPBACK_NAMES or name in self.allowed_hosts or name == self.bind.lower():
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


@dataclass
class _Peer:
    failures: int = 0
    since: float = 0.0
    blocked_until: float = 0.0


class TokenFailures:
    """Wrong tokens: counted for /metrics, logged with the sender's address (one line per interval), and an
    address that sends :data:`BLOCK_AFTER` within :data:`FAILURE_WINDOW` is answered 429 for :data:`BLOCK_SECONDS`.
    A right token still passes from a blocked address: one shared by a scraper and a guesser (a node's, a proxy's)
    keeps its scrapes, and a token long enough cannot be guessed anyway."""

    def __init__(self) -> None:
        #: Wrong tokens, by the status they were answered with ("401", "429").
        self.answered: Counter[str] = Counter()
        self.log = Throttled(log.warning, "endpoint token refused")
        self._peers: dict[str, _Peer] = {}

    def refuse(self, peer: str, path: str) -> float:
        """Count a wrong token from ``peer``; the seconds it is blocked for (429), or 0 (401)."""
        now = time.monotonic()
        state = self._peers.pop(peer, None) or _Peer(since=now)
        self._peers[peer] = state  # the most recent last
        if len(self._peers) > PEERS_KEPT:
            del self._peers[next(iter(self._peers))]
        wait = state.blocked_until - now
        if wait <= 0:
            if now - state.since > FAILURE_WINDOW:
                state.failures, state.since = 0, now
            state.failures += 1
            if state.failures >= BLOCK_AFTER:  # this one is still 401; the next ones 429
                state.failures, state.since, state.blocked_until = 0, now + BLOCK_SECONDS, now + BLOCK_SECONDS
        answer = "429" if wait > 0 else "401"
        self.answered[answer] += 1
        self.log.note(peer=peer, path=path, status=int(answer), blocked=state.blocked_until > now)
        return max(wait, 0.0)

    def collect(self) -> Iterator[Metric]:
        """The series for /metrics (a prometheus_client collector)."""
        family = CounterMetricFamily(
            "worker_http_token_failures",
            "Requests to the endpoints with a wrong token, by the status answered (429: the address sent too many)",
            labels=["status"],
        )
        for answer in ("401", "429"):
            family.add_metric([answer], self.answered[answer])
        yield family


def is_loopback(bind: str) -> bool:
    """Whether an address to listen on is reachable from this machine only."""
    if bind.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name of a Host header, without port, brackets or a final dot, in lower case."""
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8080
        return header[1:].partition("]")[0]
    name, colon, port = header.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        header = name
    return header.rstrip(".")


def application(access: Access, gate: Gate | None = None, failures: TokenFailures | None = None) -> web.Application:
    """An aiohttp application whose every answer goes through ``access``; ``gate`` sees each request first (the
    connections it listens with: :mod:`worker.runtime.connections`), ``failures`` each wrong token."""
    guard = _middleware(access, failures if failures is not None else TokenFailures())
    app = web.Application(middlewares=[gate.middleware, guard] if gate is not None else [guard])
    app.on_response_prepare.append(_safe_headers)
    return app


def announce(access: Access, **fields: object) -> None:
    """Log that the endpoints listen, and warn when their data answers without a token: to every user of this
    machine (loopback), or to anyone who reaches the address (``worker.httpOpenData``)."""
    log.info("endpoints listening", host=access.bind, token=access.token is not None, data=access.data, **fields)
    if access.data in ("this machine", "anyone"):
        log.warning(
            "/leases and the console's data answer without a token; set WORKER_HTTP_TOKEN or "
            "worker.httpTokenFile to guard them",
            readers=access.data,
            host=access.bind,
        )


#: Set by the supervisor in the environment of its processes when it serves the console for them all: a process's
#: own console then listens on a loopback port of the supervisor's choosing, which is not the one to open.
CONSOLE_ELSEWHERE_ENV = "WORKER_CONSOLE_ELSEWHERE"


def console_url(bind: str, port: int) -> str:
    """The address to open the console at: this machine's name where the endpoints listen on every interface."""
    if bind in ("", "0.0.0.0", "::"):
        return f"http://localhost:{port}/"
    return f"http://[{bind}]:{port}/" if ":" in bind else f"http://{bind}:{port}/"


def how_to_get_in(access: Access) -> str:
    """What a person opening the console needs, in one sentence: the token, or this machine, or why its data is
    refused and what to set; so that the start says it rather than a 403 in the browser."""
    if access.data == "token":
        return "enter the endpoint token (WORKER_HTTP_TOKEN or worker.httpTokenFile) in the page's Token field"
    if access.data == "this machine":
        return (
            "no token: open it from this machine (loopback); read-only, as the poison actions need a token "
            "(WORKER_HTTP_TOKEN)"
        )
    if access.data == "anyone":
        return "no token and worker.httpOpenData: anyone who reaches the address reads it; read-only"
    return (
        "no token: its data answers only on loopback, so the page shows none here; set WORKER_HTTP_TOKEN (or "
        "worker.httpTokenFile) and enter it in the page's Token field, or run with --http-host 127.0.0.1"
    )


def announce_console(access: Access, port: int) -> None:
    """The start's line that says where the console is and how to get in, whatever the log levels."""
    logs.always("worker.runtime.guard", "web console", url=console_url(access.bind, port), access=how_to_get_in(access))


def allowed_hosts(names: Iterable[str]) -> frozenset[str]:
    """``worker.httpAllowedHosts`` as the guard compares them."""
    return frozenset(host_name(name) for name in names)


def _middleware(access: Access, failures: TokenFailures) -> Middleware:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not access.host_allowed(request.headers.get("Host")):
            return web.json_response(
                {
                    "error": f"this worker does not answer to the host name {host_name(request.headers['Host'])!r}; "
                    "add it to worker.httpAllowedHosts if it is this worker's"
                },
                status=421,
            )
        if access.token is not None:
            given = request.headers.get("Authorization")
            if request.path in OPEN_PATHS or access.token.accepts(given):
                return await handler(request)
            if given is not None and (wait := failures.refuse(request.remote or "unknown", request.path)):
                return web.json_response(
                    {"error": "too many wrong tokens from this address; try again later"},
                    status=429,
                    headers={"Retry-After": str(math.ceil(wait))},
                )
            return web.json_response(
                {"error": "a bearer token is required"}, status=401, headers={"WWW-Authenticate": 'Bearer realm="worker"'}
            )
        if access.data == "nobody" and request.path not in PUBLIC_PATHS:
            return web.json_response(
                {
                    "error": "with no endpoint token, /leases and the console's data answer on loopback only: set "
                    "WORKER_HTTP_TOKEN or worker.httpTokenFile, or worker.httpOpenData: true"
                },
                status=403,
            )
        return await handler(request)

    return guard


async def _safe_headers(_: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["Server"] = SERVER

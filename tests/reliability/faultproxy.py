"""A fault-injecting HTTP proxy in front of Azurite's queue service, for the reliability tests.

The worker is given ``QueueEndpoint=http://127.0.0.1:<proxy port>/devstoreaccount1`` with the
emulator's well-known key. Shared Key signatures cover the verb, the signed headers and the
canonical resource (``/devstoreaccount1/<path>`` plus the query), not the Host header, so a
request signed for the proxy's address is accepted by Azurite unchanged (the proxy tests check
this, and that a wrong key is still refused through the proxy).

Per request the proxy draws from a seeded :class:`random.Random` and either forwards it as is
or injects one fault (:class:`Fault`). Two families matter differently to a queue client:

* faults *before* forwarding (an Azure-like 500/503 XML error, a closed connection, a TCP
  reset, added latency): the operation did not happen, and a retry is harmless;
* faults *after* forwarding: Azurite did the operation (a receive took the messages and
  rotated their pop receipts, an update renewed a lease, a delete deleted), then the client
  gets a 500/503, a closed connection or a reset instead of the answer. This is the realistic
  case that retries cannot hide: a retried update carries a pop receipt that is already stale,
  which is how a worker loses a lease it still held and a message ends up handled twice.

Why it is written here rather than using toxiproxy or a similar tool: those cut TCP streams at
byte counts and know nothing of HTTP, so they cannot place a fault exactly between "Azurite
did it" and "the client learned it", nor answer with Azure's error body, nor count faults per
storage operation. Why asyncio in a background thread with its own loop rather than a
subprocess: the tests read its counters and script faults directly (no IPC), and its seeded
RNG lives in the test process; it is I/O-bound, and the worker under test runs in its own
process, so sharing the test process's GIL costs the worker nothing. The inbound side is a
plain ``asyncio.start_server`` HTTP/1.1 reader, because dropping or resetting a connection at
a chosen point needs the raw transport, which a web framework hides; the upstream side is an
aiohttp client session, which pools connections to Azurite and de-chunks its answers (the
proxy re-frames them with Content-Length).

The seed fixes the *sequence* of decisions; which request meets which fault still depends
on the order requests arrive in, which is up to the scheduler of the worker under test.
"""

from __future__ import annotations

import asyncio
import enum
import random
import socket
import struct
import threading
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import aiohttp
import yarl

from tests.azurite import ACCOUNT, KEY


class Fault(enum.StrEnum):
    """What the proxy can do to one request instead of forwarding it faithfully."""

    #: Answered 500 InternalError at once; Azurite never sees the request.
    ERROR_500 = "error_500"
    #: Answered 503 ServerBusy at once; Azurite never sees the request.
    ERROR_503 = "error_503"
    #: Forwarded faithfully after a delay drawn from ``FaultRates.latency``.
    LATENCY = "latency"
    #: The connection is closed (FIN) without forwarding or answering.
    DROP = "drop"
    #: The connection is reset (RST, SO_LINGER 0) without forwarding or answering.
    RESET = "reset"
    #: Forwarded and done by Azurite; the client gets a 500 or 503 instead of the answer.
    ERROR_AFTER = "error_after"
    #: Forwarded and done by Azurite; the connection is closed instead of the answer.
    DROP_AFTER = "drop_after"
    #: Forwarded and done by Azurite; the connection is reset instead of the answer.
    RESET_AFTER = "reset_after"
    #: Forwarded and done by Azurite; half the answer is sent (half its body, or of its head if it has no body),
    #: then the connection closes.
    TRUNCATE_AFTER = "truncate_after"
    #: Forwarded and done by Azurite; the answer is held back until :meth:`FaultProxy.let_through`, then sent whole:
    #: a call in flight for as long as a test needs (``ProxyStats.held`` counts those waiting).
    HOLD_AFTER = "hold_after"

    @property
    def forwards(self) -> bool:
        """True when Azurite does the operation although the client may not learn it."""
        return self in (
            Fault.LATENCY,
            Fault.ERROR_AFTER,
            Fault.DROP_AFTER,
            Fault.RESET_AFTER,
            Fault.TRUNCATE_AFTER,
            Fault.HOLD_AFTER,
        )

    @property
    def fails(self) -> bool:
        """True when the client sees the call fail (everything but latency and a held answer)."""
        return self not in (Fault.LATENCY, Fault.HOLD_AFTER)


#: The kinds a default mix spreads its rate over. TRUNCATE_AFTER is left out: the worker takes a cut answer body for a
#: protocol error, not a transient one, and does not retry it (test_faultproxy.py shows it), so it is injected only
#: where asked for.
DEFAULT_KINDS = (
    Fault.ERROR_500,
    Fault.ERROR_503,
    Fault.LATENCY,
    Fault.DROP,
    Fault.RESET,
    Fault.ERROR_AFTER,
    Fault.DROP_AFTER,
    Fault.RESET_AFTER,
)


@dataclass(frozen=True)
class FaultRates:
    """The probability of each fault per request (they add up to at most 1), and the latency range in seconds."""

    rates: dict[Fault, float] = field(default_factory=dict)
    latency: tuple[float, float] = (0.05, 0.4)

    def __post_init__(self) -> None:
        total = sum(self.rates.values())
        if any(r < 0 for r in self.rates.values()) or total > 1 + 1e-9:
            raise ValueError(f"fault rates must be >= 0 and add up to at most 1, got {total:g}")

    @classmethod
    def spread(
        cls, total: float, kinds: tuple[Fault, ...] = DEFAULT_KINDS, latency: tuple[float, float] = (0.05, 0.4)
    ) -> FaultRates:
        """``total`` of all requests faulted, shared equally among ``kinds``."""
        return cls({kind: total / len(kinds) for kind in kinds}, latency)


def operation_of(method: str, target: str) -> str:
    """The queue-service operation a request is (``receive``, ``update``, ``delete`` ...), from its verb and path."""
    parts = urlsplit(target)
    segments = [s for s in parts.path.split("/") if s][1:]  # without the account
    query = parse_qs(parts.query)
    if not segments:
        return "list_queues" if query.get("comp") == ["list"] else f"service_{method.lower()}"
    if len(segments) == 1:
        if "comp" in query:
            return "queue_metadata" if method == "GET" else "set_metadata"
        return {"PUT": "create_queue", "DELETE": "delete_queue"}.get(method, f"queue_{method.lower()}")
    if len(segments) == 2:
        if method == "GET":
            return "peek" if query.get("peekonly") == ["true"] else "receive"
        return {"POST": "put", "DELETE": "clear"}.get(method, f"messages_{method.lower()}")
    return {"PUT": "update", "DELETE": "delete"}.get(method, f"message_{method.lower()}")


#: Azure's wording for the two errors the proxy makes up, in the service's XML error format.
_ERRORS = {
    500: (
        "Internal Server Error",
        "InternalError",
        "Server encountered an internal error. Please try again after some time.",
    ),
    503: ("Server Unavailable", "ServerBusy", "The server is busy."),
}
#: Headers that describe one hop, not the message: never copied across the proxy.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "host"})


def error_response(status: int, keep_alive: bool = True) -> bytes:
    """A complete HTTP response as Azure Storage writes its errors: XML body, ``x-ms-error-code`` header."""
    reason, code, text = _ERRORS[status]
    request_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    body = (
        '<?xml version="1.0" encoding="utf-8"?><Error><Code>'
        f"{code}</Code><Message>{text}\nRequestId:{request_id}\nTime:{now.strftime('%Y-%m-%dT%H:%M:%S.%f')}0Z"
        "</Message></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Server: Windows-Azure-Queue/1.0 Microsoft-HTTPAPI/2.0\r\n"
        f"x-ms-request-id: {request_id}\r\n"
        "x-ms-version: 2021-02-12\r\n"
        f"x-ms-error-code: {code}\r\n"
        f"Date: {now.strftime('%a, %d %b %Y %H:%M:%S GMT')}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + body


@dataclass
class ProxyStats:
    """What the proxy has done so far: requests seen, answered by Azurite, and faults by kind and operation."""

    requests: int = 0
    #: Requests Azurite answered (whatever the client then got).
    forwarded: int = 0
    #: Requests that could not be forwarded (Azurite down): answered 502.
    upstream_errors: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    #: (fault kind, operation) -> count, e.g. ("reset_after", "update").
    by_operation: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Requests seen per operation, faulted or not.
    operations: Counter[str] = field(default_factory=Counter)
    #: Answers Azurite gave that are held back now (:attr:`Fault.HOLD_AFTER`).
    held: int = 0

    @property
    def failed(self) -> int:
        """Requests whose client saw a failure (every fault but latency)."""
        return sum(n for kind, n in self.faults.items() if Fault(kind).fails)


@dataclass
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        connection = next((v for k, v in self.headers if k.lower() == "connection"), "")
        return connection.lower() != "close"


class FaultProxy:
    """An HTTP proxy on a free loopback port that forwards to Azurite at ``upstream_port``, injecting faults.

    ``rates`` drive random faults; :meth:`inject` scripts exact ones (they go first). Start with
    :meth:`start`, stop with :meth:`stop`; :meth:`stats` is safe to call from any thread.
    """

    def __init__(self, upstream_port: int, rates: FaultRates | None = None, seed: int = 0) -> None:
        self.upstream = f"http://127.0.0.1:{upstream_port}"
        self.rates = rates or FaultRates()
        self.rng = random.Random(seed)
        self.port = 0
        self._lock = threading.Lock()
        self._stats = ProxyStats()
        self._scripted: deque[tuple[Fault, str | None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._connections: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        #: The answers held back, oldest first, each sent when its event is set.
        self._held: deque[asyncio.Event] = deque()
        self._let_all_through = False

    @property
    def connection_string(self) -> str:
        """What the worker under test uses: Azurite's account and key, the proxy's address."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"QueueEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    # -- control, from any thread ------------------------------------------------------------------------------

    def start(self, timeout: float = 10) -> FaultProxy:
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the fault proxy did not start within {timeout}s")
        if self._error is not None:
            raise RuntimeError("the fault proxy failed to start") from self._error
        return self

    def stop(self, timeout: float = 10) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout)
        self._loop = self._thread = None

    def inject(self, fault: Fault, operation: str | None = None, count: int = 1) -> None:
        """Give the next ``count`` requests of ``operation`` (any operation when None) ``fault``, before any random one."""
        with self._lock:
            self._scripted.extend([(fault, operation)] * count)

    def let_through(self, count: int | None = None) -> None:
        """Send the ``count`` answers held back longest (:attr:`Fault.HOLD_AFTER`) as Azurite gave them; None: every
        one, and any held from now on."""
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._release_held, count)

    def _release_held(self, count: int | None) -> None:
        if count is None:
            self._let_all_through = True
            count = len(self._held)
        for _ in range(min(count, len(self._held))):
            self._held.popleft().set()

    def set_rates(self, rates: FaultRates) -> None:
        """Change the random mix from now on (e.g. faults off while a test sets up)."""
        with self._lock:
            self.rates = rates

    def stats(self) -> ProxyStats:
        """A copy of the counters, consistent at one instant."""
        with self._lock:
            s = self._stats
            return ProxyStats(
                s.requests,
                s.forwarded,
                s.upstream_errors,
                Counter(s.faults),
                Counter(s.by_operation),
                Counter(s.operations),
                s.held,
            )

    # -- the proxy's own loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._open())
        except BaseException as exc:  # reported to start(), which re-raises in the caller's thread
            self._error = exc
            self._loop = None
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _open(self) -> None:
        # Enough pooled connections to Azurite for every request the worker may have in flight at once.
        connector = aiohttp.TCPConnector(limit=256, force_close=False)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=60),
            skip_auto_headers=("User-Agent", "Content-Type", "Accept", "Accept-Encoding"),
        )
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        """Stop listening, cut every client connection, and wait for their tasks, so none is destroyed pending."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def _decide(self, operation: str) -> tuple[Fault | None, float]:
        """The fault for this request (scripted first, then drawn), and the latency to add if any."""
        with self._lock:
            self._stats.requests += 1
            self._stats.operations[operation] += 1
            fault: Fault | None = None
            for i, (scripted, only) in enumerate(self._scripted):
                if only is None or only == operation:
                    fault = scripted
                    del self._scripted[i]
                    break
            if fault is None:
                draw = self.rng.random()
                for kind, rate in self.rates.rates.items():
                    if draw < rate:
                        fault = kind
                        break
                    draw -= rate
            delay = self.rng.uniform(*self.rates.latency) if fault is Fault.LATENCY else 0.0
            if fault is not None:
                self._stats.faults[fault.value] += 1
                self._stats.by_operation[(fault.value, operation)] += 1
            return fault, delay

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: requests one after another (HTTP/1.1 keep-alive) until it closes or a fault ends it."""
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    return
                if not await self._handle(request, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            self._writers.discard(writer)
            if task is not None:
                self._connections.discard(task)
            if not writer.transport.is_closing():
                writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> _Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None  # the client closed an idle connection
        request_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        method, target, _version = request_line.split(" ", 2)
        headers = [(name.strip(), value.strip()) for name, _, value in (line.partition(":") for line in lines)]
        if any(k.lower() == "transfer-encoding" for k, _ in headers):
            raise ConnectionError("chunked request bodies are not supported (the Azure SDK sends Content-Length)")
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0") or 0)
        body = await reader.readexactly(length) if length else b""
        return _Request(method, target, headers, body)

    async def _handle(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answer one request (or not); True to keep reading requests on this connection."""
        fault, delay = self._decide(operation_of(request.method, request.target))
        if fault in (Fault.ERROR_500, Fault.ERROR_503):
            writer.write(error_response(500 if fault is Fault.ERROR_500 else 503, request.keep_alive))
            await writer.drain()
            return request.keep_alive
        if fault is Fault.DROP:
            writer.close()
            return False
        if fault is Fault.RESET:
            _reset(writer)
            return False
        if delay:
            await asyncio.sleep(delay)
        try:
            answer, body_at = await self._forward(request)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            with self._lock:
                self._stats.upstream_errors += 1
            reason = f"Azurite unreachable: {type(exc).__name__}".encode()
            writer.write(
                b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(reason), reason)
            )
            await writer.drain()
            return False
        if fault is Fault.HOLD_AFTER and not self._let_all_through:
            sent = asyncio.Event()
            self._held.append(sent)
            with self._lock:
                self._stats.held += 1
            try:
                await sent.wait()
            finally:
                with self._lock:
                    self._stats.held -= 1
        if fault is Fault.ERROR_AFTER:
            writer.write(error_response(self.rng.choice((500, 503)), request.keep_alive))
        elif fault is Fault.DROP_AFTER:
            writer.close()
            return False
        elif fault is Fault.RESET_AFTER:
            _reset(writer)
            return False
        elif fault is Fault.TRUNCATE_AFTER:
            # Half the body; an answer without one (a 204) loses half its head instead, or nothing would be cut.
            cut = body_at + (len(answer) - body_at) // 2 if len(answer) > body_at else body_at // 2
            writer.write(answer[:cut])
            await writer.drain()
            writer.close()
            return False
        else:
            writer.write(answer)
        await writer.drain()
        return request.keep_alive

    async def _forward(self, request: _Request) -> tuple[bytes, int]:
        """Send the request to Azurite as it came; its whole answer as bytes, and where the body starts in them."""
        assert self._session is not None
        headers = [(k, v) for k, v in request.headers if k.lower() not in _HOP_BY_HOP]
        url = yarl.URL(self.upstream + request.target, encoded=True)  # as signed: no re-quoting of the query
        async with self._session.request(
            request.method,
            url,
            headers=headers,
            data=request.body or None,
            allow_redirects=False,
        ) as response:
            body = await response.read()
            lines = [f"HTTP/1.1 {response.status} {response.reason or ''}"]
            for name, value in response.raw_headers:
                key = name.decode("latin-1")
                if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                    lines.append(f"{key}: {value.decode('latin-1')}")
            length = response.headers.get("Content-Length", "0") if request.method == "HEAD" else str(len(body))
            lines.append(f"Content-Length: {length}")
            lines.append(f"Connection: {'keep-alive' if request.keep_alive else 'close'}")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if request.method == "HEAD":
            body = b""
        with self._lock:
            self._stats.forwarded += 1
        return head + body, len(head)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close the connection with a TCP RST instead of a FIN: SO_LINGER on, timeout 0, then close."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def main(argv: list[str] | None = None) -> None:
    """Run the proxy as a process of its own until SIGTERM or SIGINT: for benchmarks, which must not share its GIL.

    Prints ``listening PORT`` once it accepts connections.
    """
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="A fault-injecting proxy in front of Azurite's queue service.")
    parser.add_argument("upstream_port", type=int, help="Azurite's queue port on 127.0.0.1")
    parser.add_argument("--latency-ms", type=float, default=0, help="delay every request by this much (default 0)")
    args = parser.parse_args(argv)
    delay = args.latency_ms / 1000
    rates = FaultRates({Fault.LATENCY: 1.0} if delay else {}, (delay, delay))
    proxy = FaultProxy(args.upstream_port, rates).start()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(f"listening {proxy.port}", flush=True)
    stop.wait()
    proxy.stop()


if __name__ == "__main__":
    main()

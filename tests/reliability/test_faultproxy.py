"""The fault proxy, proven before the fault tests rely on it; and what it shows of the worker's Azure backend.

First the proxy alone: requests signed for its address are accepted by Azurite (and a wrong
key is still refused, so the acceptance means something), each fault kind does on the wire
what it says, and the random mix follows its seed. Then each kind through the worker's own
backend on a put: a put is a POST, which the HTTP client never re-sends by itself, so the
worker's retry policy is exactly what answers each fault. A put is also not idempotent (Put
Message takes no retry token), and a client cannot tell "failed before Azurite" from "failed
after Azurite stored it": so no fault on a put that reached the proxy is retried, the caller
hears that the message may have been stored, and Azurite never holds it twice.

The last tests are reproducers of what the proxy found in the backend (see the notes in each).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.azurite import ACCOUNT, KEY, Azurite
from tests.reliability.faultproxy import Fault, FaultProxy, FaultRates, operation_of
from tests.support import apoll
from worker.backends.queues import OutcomeUnknown, PopReceiptMismatch, QueueBackend, QueueError, TransientError
from worker.backends.registry import open_backend
from worker.backends.retrying import RETRY_ATTEMPTS


@pytest.fixture
def proxy(azurite: Azurite) -> Iterator[FaultProxy]:
    """A proxy with no random faults: each test scripts the ones it wants."""
    started = FaultProxy(azurite.port).start()
    yield started
    started.stop()


@pytest.fixture
async def direct(azurite: Azurite, tmp_path: Path, queue_name: str) -> AsyncIterator[QueueBackend]:
    """Azurite seen without the proxy, with the test's queue created: the truth to compare with."""
    backend = open_backend(azurite.connection_string, tmp_path)
    await backend.create_queue(queue_name)
    yield backend
    await backend.close()


class ProxiedBackend:
    """The worker's Azure backend through the proxy, with the kind of every retried failure it reported."""

    def __init__(self, proxy: FaultProxy, tmp_path: Path, connection: str | None = None) -> None:
        self.retries: list[str] = []
        self.backend = open_backend(connection or proxy.connection_string, tmp_path, on_retry=self.retries.append)


@pytest.fixture
async def proxied(proxy: FaultProxy, tmp_path: Path) -> AsyncIterator[ProxiedBackend]:
    made = ProxiedBackend(proxy, tmp_path)
    yield made
    await made.backend.close()


# -- the proxy alone ----------------------------------------------------------------------------------------------


async def test_requests_signed_for_the_proxy_address_are_accepted_by_azurite(
    proxy: FaultProxy, proxied: ProxiedBackend, direct: QueueBackend, queue_name: str
) -> None:
    backend = proxied.backend
    await backend.create_queue(queue_name)  # exists already: Azurite answers 204 or 409, both fine
    sent = await backend.put(queue_name, "through the proxy")
    [peeked] = await backend.peek(queue_name)
    [received] = await backend.receive(queue_name, 1, 30)
    assert received.pop_receipt is not None
    receipt = await backend.update(queue_name, received.id, received.pop_receipt, 30)
    assert await backend.approximate_count(queue_name) == 1
    assert queue_name in await backend.list_queues()
    await backend.delete(queue_name, received.id, receipt.pop_receipt)

    assert peeked.id == received.id == sent.id and peeked.content == "through the proxy"
    assert await direct.approximate_count(queue_name) == 0
    stats = proxy.stats()
    assert stats.requests == stats.forwarded == 8 and not stats.faults and proxied.retries == []
    assert dict(stats.operations) == {
        "create_queue": 1,
        "put": 1,
        "peek": 1,
        "receive": 1,
        "update": 1,
        "queue_metadata": 1,
        "list_queues": 1,
        "delete": 1,
    }


async def test_a_wrong_key_is_still_refused_through_the_proxy(proxy: FaultProxy, tmp_path: Path, queue_name: str) -> None:
    """Azurite checks the signature of proxied requests, so the test above proves the signing, not a loophole."""
    wrong = proxy.connection_string.replace(KEY, "A" * 8 + KEY[8:])
    rejected = ProxiedBackend(proxy, tmp_path, connection=wrong)
    try:
        with pytest.raises(QueueError, match="403") as caught:
            await rejected.backend.peek(queue_name)
        assert not isinstance(caught.value, TransientError)
    finally:
        await rejected.backend.close()


def _raw_exchange(port: int, timeout: float = 5) -> bytes:
    """One unsigned GET over a plain socket; what came back before the proxy closed (b"" for a bare FIN)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"GET /{ACCOUNT}?comp=list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_on_the_wire_503_is_azure_xml_drop_is_a_fin_and_reset_is_an_rst(proxy: FaultProxy) -> None:
    proxy.inject(Fault.ERROR_503)
    answer = _raw_exchange(proxy.port)
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert b"x-ms-error-code: ServerBusy\r\n" in answer and b"<Code>ServerBusy</Code>" in answer

    proxy.inject(Fault.DROP)
    assert _raw_exchange(proxy.port) == b""  # an orderly close, no answer

    proxy.inject(Fault.RESET)
    with pytest.raises(ConnectionResetError):
        _raw_exchange(proxy.port)

    answer = _raw_exchange(proxy.port)  # nothing scripted: forwarded, and Azurite refuses the unsigned request
    assert answer.startswith(b"HTTP/1.1 403 ") and b"AuthenticationFailed" in answer
    stats = proxy.stats()
    assert dict(stats.faults) == {"error_503": 1, "drop": 1, "reset": 1}
    assert stats.requests == 4 and stats.forwarded == 1


def test_an_unreachable_azurite_is_answered_502_and_counted() -> None:
    """Nothing listens upstream (Azurite down): the client gets a 502, which the worker retries as transient."""
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        free_port = placeholder.getsockname()[1]
    proxy = FaultProxy(free_port).start()
    try:
        assert _raw_exchange(proxy.port).startswith(b"HTTP/1.1 502 ")
        stats = proxy.stats()
        assert (stats.requests, stats.forwarded, stats.upstream_errors) == (1, 0, 1)
    finally:
        proxy.stop()


async def test_random_faults_follow_the_rates_and_the_seed(azurite: Azurite) -> None:
    """The same seed makes the same sequence of decisions; the share of faults is near the rate."""
    rates = FaultRates({Fault.ERROR_500: 0.2, Fault.ERROR_503: 0.2})

    async def statuses(seed: int) -> list[int]:
        proxy = FaultProxy(azurite.port, rates, seed=seed).start()
        try:
            async with aiohttp.ClientSession() as session:
                found = []
                for _ in range(200):  # one at a time, so arrival order is the decision order
                    async with session.get(f"http://127.0.0.1:{proxy.port}/{ACCOUNT}?comp=list") as response:
                        found.append(response.status)
                return found
        finally:
            proxy.stop()

    first, again, other = await statuses(7), await statuses(7), await statuses(8)
    assert first == again and first != other
    assert set(first) == {403, 500, 503}  # 403: forwarded unsigned, refused by Azurite
    assert 50 <= sum(s != 403 for s in first) <= 110  # 40 % of 200, binomial sd ~7


def test_operations_are_named_from_verb_and_path() -> None:
    a = f"/{ACCOUNT}"
    assert operation_of("GET", f"{a}?comp=list") == "list_queues"
    assert operation_of("PUT", f"{a}/q") == "create_queue"
    assert operation_of("GET", f"{a}/q?comp=metadata") == "queue_metadata"
    assert operation_of("POST", f"{a}/q/messages") == "put"
    assert operation_of("GET", f"{a}/q/messages?numofmessages=32&visibilitytimeout=2") == "receive"
    assert operation_of("GET", f"{a}/q/messages?peekonly=true") == "peek"
    assert operation_of("PUT", f"{a}/q/messages/id?popreceipt=r&visibilitytimeout=2") == "update"
    assert operation_of("DELETE", f"{a}/q/messages/id?popreceipt=r") == "delete"


# -- each kind through the worker's backend ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [k for k in Fault if k not in (Fault.TRUNCATE_AFTER, Fault.HOLD_AFTER)], ids=str)
async def test_a_put_that_reached_storage_is_never_sent_twice(
    kind: Fault, proxy: FaultProxy, proxied: ProxiedBackend, direct: QueueBackend, queue_name: str
) -> None:
    """Whatever the fault after the request left, the put is sent once: stored once (where the fault came after
    Azurite stored it) or not at all, and the caller told it may have been stored."""
    proxy.set_rates(FaultRates(latency=(0.3, 0.3)))
    proxy.inject(kind, "put")
    started = time.monotonic()
    if kind.fails:
        with pytest.raises(OutcomeUnknown, match="may have been stored .*, so this call does not repeat it"):
            await proxied.backend.put(queue_name, "hello")
    else:
        await proxied.backend.put(queue_name, "hello")
        assert time.monotonic() - started >= 0.3

    assert await direct.approximate_count(queue_name) == (1 if kind.forwards else 0)
    stats = proxy.stats()
    assert dict(stats.faults) == {kind.value: 1}
    assert (stats.requests, stats.forwarded) == (1, 1 if kind.forwards else 0)
    assert proxied.retries == []


async def test_a_put_that_could_not_connect_is_tried_again(tmp_path: Path, queue_name: str) -> None:
    """Refused: aiohttp could not open the connection, so nothing was sent and every attempt is made; what is left
    is "unreachable", not "may have been stored"."""
    with socket.socket() as placeholder:  # bound, never listening: connections to it are refused
        placeholder.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{placeholder.getsockname()[1]}/{ACCOUNT}"
        retries: list[str] = []
        backend = open_backend(
            f"AccountName={ACCOUNT};AccountKey={KEY};QueueEndpoint={endpoint}", tmp_path, on_retry=retries.append
        )
        try:
            with pytest.raises(TransientError, match="connection refused") as caught:
                await backend.put(queue_name, "never sent")
        finally:
            await backend.close()
    assert not isinstance(caught.value, OutcomeUnknown)
    assert len(retries) == RETRY_ATTEMPTS, f"every attempt is made and reported: {retries}"


@pytest.mark.parametrize(
    ("kind", "stale"),
    [
        (Fault.RESET, False),
        (Fault.ERROR_503, False),
        (Fault.ERROR_AFTER, True),
        (Fault.RESET_AFTER, True),
    ],
    ids=str,
)
async def test_an_update_whose_answer_is_lost_leaves_the_worker_a_stale_receipt(
    kind: Fault, stale: bool, proxy: FaultProxy, proxied: ProxiedBackend, direct: QueueBackend, queue_name: str
) -> None:
    """How a worker loses a lease it still holds: the renewal happened, its new pop receipt never arrived."""
    await direct.put(queue_name, "leased")
    [message] = await proxied.backend.receive(queue_name, 1, 30)
    assert message.pop_receipt is not None
    proxy.inject(kind, "update")
    if stale:
        with pytest.raises(PopReceiptMismatch):
            await proxied.backend.update(queue_name, message.id, message.pop_receipt, 30)
    else:
        await proxied.backend.update(queue_name, message.id, message.pop_receipt, 30)
    assert await direct.peek(queue_name) == []  # renewed either way: still invisible for 30 s
    assert proxy.stats().faults == {kind.value: 1}


# -- what the proxy found in the worker's Azure backend, now fixed ---------------------------------------------------
#
# aiohttp's ClientSession (under azure-core's transport) re-sent an idempotent request (GET, PUT, DELETE) once, by
# itself, when the connection was closed or reset under it, so the worker's retry policy never saw that first
# failure: a delete whose first send reached Azurite got MessageNotFound from the hidden second send, and the host
# counted a lost lease for a message it had deleted itself. The backend's transport now leaves every retry to the
# worker's policy (worker/backends/azure/queues.py, _Transport). An answer cut short was not taken as transient either.


@pytest.mark.parametrize("kind", [Fault.ERROR_AFTER, Fault.DROP_AFTER, Fault.RESET_AFTER], ids=str)
async def test_a_delete_that_reached_storage_succeeds_although_its_answer_was_lost(
    kind: Fault, proxy: FaultProxy, proxied: ProxiedBackend, direct: QueueBackend, queue_name: str
) -> None:
    await direct.put(queue_name, "to delete")
    [message] = await proxied.backend.receive(queue_name, 1, 30)
    assert message.pop_receipt is not None
    proxy.inject(kind, "delete")
    await proxied.backend.delete(queue_name, message.id, message.pop_receipt)
    assert await direct.approximate_count(queue_name) == 0
    assert proxy.stats().operations["delete"] == 2


@pytest.mark.parametrize("operation", ["peek", "delete"])
async def test_every_failed_storage_call_is_reported_as_a_retry(
    operation: str, proxy: FaultProxy, proxied: ProxiedBackend, direct: QueueBackend, queue_name: str
) -> None:
    """storage_retries counts retried failures (README: transient failures are retried and counted); a reset is one."""
    await direct.put(queue_name, "m")
    [message] = await proxied.backend.receive(queue_name, 1, 30) if operation == "delete" else [None]
    proxy.inject(Fault.RESET, operation)
    if operation == "peek":
        assert len(await proxied.backend.peek(queue_name)) == 1
    else:
        assert message is not None and message.pop_receipt is not None
        await proxied.backend.delete(queue_name, message.id, message.pop_receipt)
    assert proxy.stats().faults == {"reset": 1}
    assert len(proxied.retries) == 1, f"the reset of a {operation} was re-sent unseen: retries={proxied.retries}"


async def test_an_answer_cut_short_is_retried_like_a_reset(
    proxy: FaultProxy, proxied: ProxiedBackend, direct: QueueBackend, queue_name: str
) -> None:
    """A connection closed halfway through the answer body is the network failing, as a reset is: the same call may
    get past it later. azure-core raises IncompleteReadError, an HttpResponseError with no status code, which
    ``worker.backends.azure.queues.is_transient`` must recognise, or the call fails at once as a plain QueueError."""
    await direct.put(queue_name, "m")
    proxy.inject(Fault.TRUNCATE_AFTER, "peek")
    assert [m.content for m in await proxied.backend.peek(queue_name)] == ["m"]
    assert len(proxied.retries) == 1


#: Messages a cancelled receive takes in :func:`test_a_receive_cancelled_after_azurite_took_its_messages_hides_none`.
CANCELLED_BATCH = 16


async def test_a_receive_cancelled_after_azurite_took_its_messages_hides_none(
    proxy: FaultProxy, proxied: ProxiedBackend, direct: QueueBackend, queue_name: str
) -> None:
    """A stop cancels a receive whose request Azurite has already done (seen after Ctrl-C: a batch neither run nor
    released came back only when its lease ended). The receive runs on, what it brings is released at once, and
    ``close`` waits for that: every message is visible again long before the lease, its delivery counted."""
    sent = {(await direct.put(queue_name, f"m{i}")).id for i in range(CANCELLED_BATCH)}
    proxy.inject(Fault.HOLD_AFTER, "receive")
    receive = asyncio.ensure_future(proxied.backend.receive(queue_name, CANCELLED_BATCH, 600))

    async def answered() -> bool:
        return proxy.stats().held == 1

    await apoll(answered, 10, what="Azurite to answer the receive")
    receive.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(receive, 5)  # the caller leaves at once; the request runs on
    assert await direct.approximate_count(queue_name) == CANCELLED_BATCH
    assert await direct.receive(queue_name, 32, 30) == [], "the held receive should hold every message"
    proxy.let_through()
    await asyncio.wait_for(proxied.backend.close(), 15)
    again = await direct.receive(queue_name, 32, 30)
    assert {m.id for m in again} == sent
    assert {m.dequeue_count for m in again} == {2}, "one delivery counted for the cancelled receive"


async def test_the_proxy_stops_cleanly_with_connections_open(azurite: Azurite, tmp_path: Path) -> None:
    proxy = FaultProxy(azurite.port).start()
    backend = ProxiedBackend(proxy, tmp_path).backend
    try:
        assert isinstance(await backend.list_queues(), list)  # leaves a keep-alive connection open
        proxy.stop()
        with pytest.raises(TransientError):
            await asyncio.wait_for(backend.list_queues(), 30)
    finally:
        await backend.close()


async def test_the_proxy_runs_as_a_process_of_its_own_for_the_benchmarks(azurite: Azurite, tmp_path: Path) -> None:
    """bench/throughput.py --latency-ms starts it so; it must forward, delay, and stop cleanly on SIGTERM."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.faultproxy", str(azurite.port), "--latency-ms", "200"],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().split()[1])
        backend = open_backend(azurite.connection_string.replace(f":{azurite.port}/", f":{port}/"), tmp_path)
        try:
            started = time.monotonic()
            assert isinstance(await backend.list_queues(), list)
            assert time.monotonic() - started >= 0.2, "the request was not delayed"
        finally:
            await backend.close()
        process.terminate()
        assert process.wait(10) == 0
    finally:
        process.kill()

"""What a busy or changing OCI Queue answers, and what the backend makes of it, on the test server's scripted faults.

The server runs in its default modes (the answers harder on a client: a stale receipt is 400 InvalidParameter
without the word "receipt"), and each test scripts the answers it needs (``OciTestServer.fault``): a 503 that did
nothing or a 500 after the work, a throttle with ``retry-after``, a 401 or a 409 that OCI's API error table says
to retry with back-off, and the answers that are read as a lost lease.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.conftest import oci_connection, oci_queue
from tests.oci.fixture import REPO, OciTestServer
from tests.support import apoll, captured_logs
from worker.backends.oci import queues as oci_queues
from worker.backends.queues import (
    LeaseGone,
    MessageNotFound,
    OutcomeUnknown,
    QueueBackend,
    QueueError,
    QueueNotFound,
    TransientError,
)
from worker.backends.registry import open_backend
from worker.backends.retrying import REFUSAL_ATTEMPTS, RETRY_BUDGET_SECONDS
from worker.runtime.poison import policy_for


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciTestServer]:
    with OciTestServer(tmp_path_factory.mktemp("oci-faults")) as running:
        yield running


@pytest.fixture
def retries() -> list[str]:
    """The failures the backend under test retried, as its ``on_retry`` names them."""
    return []


@pytest.fixture
async def backend(server: OciTestServer, tmp_path: Path, queue_name: str, retries: list[str]) -> AsyncIterator[QueueBackend]:
    async with oci_queue(server, tmp_path, queue_name, on_retry=retries.append) as opened:
        yield opened
        server.clear_faults()


@pytest.fixture
async def other(server: OciTestServer, tmp_path: Path) -> AsyncIterator[QueueBackend]:
    """Another consumer of the same queues, with a backend of its own."""
    opened = open_backend(oci_connection(server), tmp_path)
    yield opened
    await opened.close()


async def test_a_retried_delete_refused_after_another_consumer_took_the_message_is_not_a_success(
    server: OciTestServer, backend: QueueBackend, other: QueueBackend, queue_name: str, retries: list[str]
) -> None:
    """503 (nothing done) once the visibility ended and another consumer took the message, then the stale receipt's
    refusal: the delete raises it, so that completion's own clock says "lease lost", not "deleted"."""
    await backend.put(queue_name, "taken twice")
    [mine] = await backend.receive(queue_name, 1, 1)
    [theirs] = await apoll(lambda: other.receive(queue_name, 1, 30, wait=2), 10, what="the message to come back")
    server.fault("delete_message", 503, "ServiceUnavailable")
    assert mine.pop_receipt is not None and theirs.pop_receipt is not None
    with pytest.raises(LeaseGone):
        await backend.delete(queue_name, mine.id, mine.pop_receipt)
    assert retries == ["HTTP 503 ServiceUnavailable"]
    await other.delete(queue_name, theirs.id, theirs.pop_receipt)  # still the other consumer's


async def test_a_retried_delete_whose_first_attempt_deleted_it_reports_the_refusal_for_completion_to_read(
    server: OciTestServer, backend: QueueBackend, queue_name: str, retries: list[str]
) -> None:
    """The first attempt deleted it and its answer was a 503: the retry is refused, and that refusal is what the
    backend reports (MessageNotFound); completion, whose lease still holds, counts it as deleted."""
    await backend.put(queue_name, "deleted once")
    [message] = await backend.receive(queue_name, 1, 30)
    server.fault("delete_message", 503, "ServiceUnavailable", done=True)
    assert message.pop_receipt is not None
    with pytest.raises(MessageNotFound):
        await backend.delete(queue_name, message.id, message.pop_receipt)
    assert retries == ["HTTP 503 ServiceUnavailable"]
    assert await backend.approximate_count(queue_name) == 0


@pytest.mark.parametrize(("status", "code"), [(429, "TooManyRequests"), (503, "ServiceUnavailable")])
async def test_a_put_refused_with_nothing_done_is_sent_again_and_stored_once(
    server: OciTestServer, backend: QueueBackend, queue_name: str, retries: list[str], status: int, code: str
) -> None:
    server.fault("put_messages", status, code)
    await backend.put(queue_name, "throttled")
    assert retries == [f"HTTP {status} {code}"]
    assert await backend.approximate_count(queue_name) == 1


@pytest.mark.subprocess
async def test_worker_send_to_a_throttled_queue_succeeds(
    server: OciTestServer, backend: QueueBackend, queue_name: str, tmp_path: Path
) -> None:
    (tmp_path / "host.yaml").write_text("version: '1.0'\n", encoding="utf-8")
    server.fault("put_messages", 429, "TooManyRequests")
    sent = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "worker", "send", queue_name, "throttled once", "--config", str(tmp_path / "host.yaml")],
        env={"PYTHONPATH": str(REPO), "AzureWebJobsStorage": oci_connection(server)},
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert sent.returncode == 0, sent.stderr
    assert await backend.approximate_count(queue_name) == 1


async def test_a_put_answered_500_after_it_was_stored_is_not_sent_again_and_says_it_may_have_been_stored(
    server: OciTestServer, backend: QueueBackend, queue_name: str, retries: list[str]
) -> None:
    server.fault("put_messages", 500, "InternalServerError", done=True)
    with pytest.raises(OutcomeUnknown) as caught:
        await backend.put(queue_name, "stored, answer lost")
    assert "may have been stored" in str(caught.value) and "not sent again" not in str(caught.value)
    assert retries == []
    assert await backend.approximate_count(queue_name) == 1


async def test_retry_after_is_waited_and_a_wait_past_the_budget_is_not(
    server: OciTestServer, backend: QueueBackend, queue_name: str, retries: list[str]
) -> None:
    server.fault("get_stats", 429, "TooManyRequests", retry_after=1)
    started = time.monotonic()
    assert await backend.approximate_count(queue_name) == 0
    assert time.monotonic() - started >= 1.0, "retry-after was not waited"

    server.fault("get_stats", 429, "TooManyRequests", retry_after=int(RETRY_BUDGET_SECONDS) + 60)
    started = time.monotonic()
    with pytest.raises(TransientError, match="429"):
        await backend.approximate_count(queue_name)
    assert time.monotonic() - started < 2.0, "a wait past the call's budget was waited"
    assert retries == ["HTTP 429 TooManyRequests"] * 2


async def test_401_and_409_incorrect_state_are_retried_with_back_off_and_a_lasting_401_is_a_refused_sign_in(
    server: OciTestServer, backend: QueueBackend, queue_name: str, retries: list[str]
) -> None:
    server.fault("get_stats", 401, "NotAuthenticated")
    assert await backend.approximate_count(queue_name) == 0
    server.fault("purge_queue", 409, "IncorrectState", message="the queue is UPDATING")
    await policy_for(backend, queue_name).purge(queue_name, limit=0)
    assert retries == ["HTTP 401 NotAuthenticated", "HTTP 409 IncorrectState"]

    retries.clear()
    server.fault("get_stats", 401, "NotAuthenticated", times=REFUSAL_ATTEMPTS)
    with pytest.raises(QueueError, match="sign-in was refused by .*HTTP 401 NotAuthenticated") as caught:
        await backend.approximate_count(queue_name)
    assert not isinstance(caught.value, TransientError)
    assert retries == ["HTTP 401 NotAuthenticated"] * REFUSAL_ATTEMPTS


async def test_a_404_for_a_stale_receipt_costs_no_control_plane_call(
    server: OciTestServer, backend: QueueBackend, queue_name: str
) -> None:
    """Answered 404 as a lost lease is, while every control-plane lookup would fail: none is made, and the queue's
    id and endpoint are kept for the next call."""
    await backend.put(queue_name, "lease lost")
    [message] = await backend.receive(queue_name, 1, 30)
    assert message.pop_receipt is not None
    server.fault("update_message", 404, "NotAuthorizedOrNotFound")
    for lookup in ("get_queue", "list_queues"):
        server.fault(lookup, 400, "InvalidParameter", times=100, message="no control-plane call was expected")
    with pytest.raises(LeaseGone):
        await backend.update(queue_name, message.id, message.pop_receipt, 30)
    await backend.put(queue_name, "the queue is still known")


async def test_a_release_at_stop_that_partly_fails_is_logged_as_such(
    backend: QueueBackend, other: QueueBackend, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UpdateMessages answers 200 with a per-entry errorCode for a receipt another consumer replaced."""
    await backend.put(queue_name, "one")
    await backend.put(queue_name, "two")
    got = await backend.receive(queue_name, 2, 1)
    assert len(got) == 2
    await apoll(lambda: other.receive(queue_name, 1, 30, wait=2), 10, what="one message to come back")
    queue_id, _ = await backend._call(  # type: ignore[attr-defined]
        lambda: backend._on_queue(queue_name, lambda client, queue_id: (queue_id, None)), queue_name
    )  # type: ignore[attr-defined]
    sdk_messages = [type("Taken", (), {"id": m.id, "receipt": m.pop_receipt})() for m in got]
    with captured_logs(monkeypatch, oci_queues) as logs:
        backend._release((queue_id, sdk_messages))  # type: ignore[attr-defined]
    [line] = [log for log in logs if "cancelled receive" in log["event"]]
    assert line["event"].startswith("some messages of a cancelled receive could not be released")
    assert (line["released"], line["not_released"], line["client_failures"]) == (1, 1, 1)


async def test_a_queue_not_found_names_the_region_when_the_endpoint_is_in_another(
    server: OciTestServer, tmp_path: Path
) -> None:
    elsewhere = oci_connection(server).replace(
        server.endpoint.removeprefix("http://"), "cell-1.queue.messaging.eu-frankfurt-1.oci.oraclecloud.com", 1
    )
    backend = open_backend(elsewhere, tmp_path)
    try:
        with pytest.raises(
            QueueNotFound, match="messages endpoint is in region eu-frankfurt-1, but the sign-in's region is us-ashburn-1"
        ):
            await backend.approximate_count("nowhere-here")
    finally:
        await backend.close()


async def test_a_queue_whose_get_queue_has_no_messages_endpoint_yet_is_an_error_saying_so(
    server: OciTestServer, backend: QueueBackend, queue_name: str
) -> None:
    server.omit("get_queue", "messagesEndpoint")
    with pytest.raises(QueueError, match="has no messages endpoint yet") as caught:
        await backend.approximate_count(queue_name)
    assert "None" not in str(caught.value)
    assert await backend.approximate_count(queue_name) == 0  # looked up again once GetQueue gives one


async def test_poison_service_warns_where_the_dead_letter_count_and_max_dequeue_count_disagree(
    server: OciTestServer, backend: QueueBackend, queue_name: str
) -> None:
    server.set_delivery_limit(queue_name, 20)
    with capture_logs() as logs:
        assert await policy_for(backend, queue_name).startup_problem(queue_name, 5) is None
    [warning] = [log for log in logs if log["log_level"] == "warning"]
    assert "above maxDequeueCount" in warning["event"] and warning["extra_deliveries"] == 15

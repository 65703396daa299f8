"""1,000 messages through a real ``worker run`` while a proxy faults 20 % of its storage calls.

One run (about 20-35 s on two busy cores) is shared by the tests below, each judging one property,
so that a failure names what broke. The faults are spread over the proxy's kinds: 500 and 503
answers, latency, dropped and reset connections, and the same three failures *after* Azurite did
the operation, which is what makes a worker lose a lease it still held (a renewal whose new pop
receipt never arrived) and so handle a message twice. One message in 20 works 1.2 s, long enough
for its 2 s lease to be renewed twice, so that renewals meet faults too.

The handler records each success under UNIQUE (message id, outcome); a second success lands in a
``duplicates`` table. Message id and dequeue count name a delivery both there and on the worker's
log lines, so every duplicate is matched to what the worker said about that very delivery
(tests/reliability/scenario.py). ``pytest -s`` prints the run's figures.

The last test is a deterministic reproducer, with scripted faults, of one way the run's counters
go wrong.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from tests.azurite import Azurite
from tests.reliability.faultproxy import DEFAULT_KINDS, Fault, FaultProxy
from tests.reliability.scenario import (
    POISONED_EVENT,
    FaultRun,
    Settings,
    account,
    counters,
    false_lease_losses,
    format_figures,
    run_scenario,
)
from tests.support import apoll, running
from worker import QueueMessage, WorkerApp
from worker.backends.azure.queues import RETRY_ATTEMPTS
from worker.backends.registry import open_backend
from worker.settings.config import HostConfig

pytestmark = pytest.mark.subprocess

SETTINGS = Settings(messages=1000, fault_rate=0.2, seed=1, timeout=75)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> FaultRun:
    result = asyncio.run(run_scenario(SETTINGS, tmp_path_factory.mktemp("faults")))
    print("\n" + format_figures(result))
    return result


def test_every_message_is_handled_and_none_is_lost(run: FaultRun) -> None:
    assert run.exit_code == 0
    acc = account(run)
    assert not acc.lost, f"{len(acc.lost)} of {len(run.sent)} messages were never handled"
    assert {row["message_id"] for row in run.handled} == set(run.sent)
    assert run.left_in_queue == 0
    reasons = Counter(line.get("reason") for line in run.events(POISONED_EVENT))
    assert run.poisoned == [], f"poisoned with maxDequeueCount {SETTINGS.max_dequeue_count}; reasons: {dict(reasons)}"


def test_a_message_succeeds_twice_only_where_the_worker_lost_its_lease(run: FaultRun) -> None:
    acc = account(run)
    assert acc.unexplained_duplicates == 0, (
        f"{acc.unexplained_duplicates} duplicate successes with no lost lease nor given-up delete logged for them "
        f"(message id: dequeue counts of its successes): {dict(list(acc.unexplained.items())[:5])}"
    )
    assert acc.duplicates == acc.with_lease_lost + acc.with_delete_given_up


def test_every_lease_the_worker_counts_as_lost_was_really_lost(run: FaultRun) -> None:
    """A lost lease means another delivery of the message: one that never came back was deleted by this very delivery.

    aiohttp's hidden re-send of a DELETE that Azurite had done made the host log "message changed hands before
    completion" for its own delete (test_faultproxy.py::test_a_delete_that_reached_storage_succeeds_although_its_
    answer_was_lost); this catches any other way to count a lease as lost that was not. One case is left out, as
    the worker documents it: a deletion found done only after the lease ran out (scenario.lost_past_the_lease).
    """
    false = false_lease_losses(run)
    assert not false, (
        f"{len(false)} deliveries logged as a lost lease were the last of their message, which they deleted; "
        f"e.g. (message id, dequeue count) {false[:3]}"
    )


def test_the_worker_counters_match_the_recorded_outcomes(run: FaultRun) -> None:
    actual, expected = counters(run)
    assert actual == expected


def test_every_failed_storage_call_is_counted_as_a_retry(run: FaultRun) -> None:
    """Every call the proxy failed is one failed attempt, which the worker retries and counts in storage_retries."""
    assert run.totals.get("storage_retries", 0) == run.proxy.failed


def test_the_run_exercised_every_fault_kind_and_lost_leases(run: FaultRun) -> None:
    """Without these the tests above could pass by never meeting the case they are about."""
    assert {kind.value for kind in DEFAULT_KINDS} <= set(run.proxy.faults)
    assert run.totals.get("lease_renewals", 0) > 0
    assert sum(n for (kind, op), n in run.proxy.by_operation.items() if op == "update" and kind.endswith("_after")) > 0
    assert account(run).with_lease_lost > 0, "no duplicate came from a lost lease: the accounting test proved nothing"


async def test_a_delete_that_went_through_before_storage_failed_is_a_success_not_a_lost_lease(
    azurite: Azurite, tmp_path: Path, queue_name: str
) -> None:
    """The first attempt of the delete reaches Azurite (which deletes the message) but its answer is lost; the
    others are refused, so the call fails. Completion then keeps the lease and retries (worker/runtime/completion.py),
    and the renewal finds the message gone: while the lease still holds, that can only be this worker's own
    delete, not another receiver. (Seen in the fault run, where it was once counted as a lost lease.)

    The lease (10 s) outlasts the delete's retries (about 3 s), as the default 10 minutes do: once a lease has
    run out, a message found gone may have been taken and deleted by another worker, and counts as lost.
    """
    proxy = FaultProxy(azurite.port).start()
    proxy.inject(Fault.ERROR_AFTER, "delete")
    proxy.inject(Fault.ERROR_500, "delete", count=RETRY_ATTEMPTS - 1)  # HTTP answers: no hidden re-send by aiohttp
    handled: list[str] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    async def record(msg: QueueMessage) -> None:
        handled.append(msg.id)

    config = HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        lease_duration=10,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": proxy.connection_string},
    )
    direct = open_backend(azurite.connection_string, tmp_path)
    try:
        await direct.create_queue(queue_name)
        sent = await direct.put(queue_name, "aGFuZGxlIG9uY2U=")  # base64 of "handle once"
        async with running(app, config) as host:

            async def settled() -> bool:
                return host.metrics.get("succeeded") + host.metrics.get("leases_lost") > 0

            await apoll(settled, 30, what="the completion to settle")
            assert await direct.approximate_count(queue_name) == 0
        assert handled == [sent.id]
        assert proxy.stats().operations["delete"] >= RETRY_ATTEMPTS
        assert (host.metrics.get("succeeded"), host.metrics.get("leases_lost")) == (1, 0)
    finally:
        await direct.close()
        proxy.stop()

"""Conformance suite for the queue protocol (``worker.queues.base``), with Azure Storage Queue semantics.

Every test talks to the backend only through :class:`QueueBackend`, via the
``backend`` and ``queue_name`` fixtures, so that any backend (the embedded
SQLite queue today, Azure Storage Queues on Azurite later) runs this file
unchanged. Nothing here may import a concrete backend or look at its storage.

Timing rules: waiting *for* something uses :func:`apoll` with a deadline; a
bare ``asyncio.sleep`` appears only to show that something does *not* happen
within a window, and says so. Where a timeout must pass it is 1 second; where a
message must stay hidden the timeout is long (30 s) so a slow machine cannot
make it reappear mid-test.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.support import apoll
from worker.queues.base import (
    DEFAULT_TTL_SECONDS,
    MAX_BATCH,
    MAX_MESSAGE_BYTES,
    MAX_VISIBILITY_SECONDS,
    NEVER_EXPIRES,
    InvalidArgument,
    MessageNotFound,
    MessageTooLarge,
    PopReceiptMismatch,
    QueueBackend,
    QueueNotFound,
    RawMessage,
)

#: A visibility timeout long enough that a message stays hidden for the whole test.
HIDDEN = 30
#: The shortest visibility timeout receive accepts: used where the timeout must pass.
SHORT = 1
#: How long to wait for something that should happen within a second or two.
DEADLINE = 10.0
#: How far a service timestamp may be from this machine's clock (Azurite runs alongside the tests).
CLOCK_SLACK = timedelta(seconds=30)
#: Azure reports times to the second; allow for that when comparing two service timestamps.
TIME_SLACK = timedelta(seconds=2)


# -- helpers ------------------------------------------------------------------------------------------------------


async def receive_one(backend: QueueBackend, queue: str, visibility_timeout: float = HIDDEN) -> RawMessage:
    """Receive exactly one message, failing clearly when there is none."""
    got = await backend.receive(queue, 1, visibility_timeout)
    assert len(got) == 1, f"expected one visible message, receive returned {len(got)}"
    return got[0]


async def wait_for_receive(backend: QueueBackend, queue: str, visibility_timeout: float = HIDDEN) -> RawMessage:
    """Poll receive until one message comes back (e.g. once a visibility timeout has passed)."""

    async def attempt() -> list[RawMessage]:
        return await backend.receive(queue, 1, visibility_timeout)

    got = await apoll(attempt, DEADLINE, what="a message to become visible again")
    assert len(got) == 1
    return got[0]


def receipt_of(message: RawMessage) -> str:
    """The pop receipt of a received message (peeked ones have none)."""
    assert message.pop_receipt, f"message {message.id} has no pop receipt"
    return message.pop_receipt


def assert_utc_near_now(when: datetime, what: str) -> None:
    assert when.tzinfo is not None and when.utcoffset() == timedelta(0), f"{what} must be an aware UTC time: {when!r}"
    now = datetime.now(UTC)
    assert abs(when - now) <= CLOCK_SLACK, f"{what} is {when}, too far from now ({now})"


def assert_close(actual: datetime | None, expected: datetime, what: str, slack: timedelta = TIME_SLACK) -> None:
    assert actual is not None, f"{what} is missing"
    assert abs(actual - expected) <= slack, f"{what} is {actual}, expected about {expected}"


# -- queues -------------------------------------------------------------------------------------------------------


async def test_create_queue_is_idempotent_and_keeps_messages(backend: QueueBackend, queue_name: str) -> None:
    """Creating an existing queue is not an error, and must not empty it."""
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "kept")
    await backend.create_queue(queue_name)
    assert await backend.approximate_count(queue_name) == 1, "creating an existing queue must not drop its messages"
    assert (await backend.list_queues()).count(queue_name) == 1


async def test_list_queues_is_sorted_and_includes_created_queues(backend: QueueBackend, queue_name: str) -> None:
    # Created out of order so that a backend listing in creation order fails.
    names = [f"{queue_name}-c", f"{queue_name}-a", f"{queue_name}-b"]
    for name in names:
        await backend.create_queue(name)
    try:
        listed = await backend.list_queues()
        assert set(names) <= set(listed), f"created queues missing from {listed}"
        assert listed == sorted(listed), f"list_queues must be sorted: {listed}"
    finally:
        for name in names:
            await backend.delete_queue(name)


async def test_delete_queue_removes_queue_and_messages(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "one")
    await backend.put(queue_name, "two", visibility_timeout=HIDDEN)
    await backend.delete_queue(queue_name)

    assert queue_name not in await backend.list_queues()
    with pytest.raises(QueueNotFound):
        await backend.approximate_count(queue_name)
    with pytest.raises(QueueNotFound):
        await backend.receive(queue_name, 1, HIDDEN)

    # A queue of the same name starts empty: the old messages went with the old queue.
    # (Real Azure may refuse this for ~30 s with QueueBeingDeleted; Azurite and SQLite do not.)
    await backend.create_queue(queue_name)
    assert await backend.approximate_count(queue_name) == 0, "messages of a deleted queue survived it"
    assert await backend.peek(queue_name, MAX_BATCH) == []


async def test_delete_missing_queue_is_not_an_error(backend: QueueBackend, queue_name: str) -> None:
    await backend.delete_queue(queue_name)  # never created
    await backend.create_queue(queue_name)
    await backend.delete_queue(queue_name)
    await backend.delete_queue(queue_name)  # already deleted
    assert queue_name not in await backend.list_queues()


@pytest.mark.parametrize(
    "name",
    ["Bad_Name", "ab", "UPPER", "has--double", "-leading", "trailing-", "with space", "a" * 64, "", "newline\n"],
    ids=["underscore", "too-short", "upper", "double-hyphen", "leading-hyphen", "trailing-hyphen", "space", "too-long",
         "empty", "trailing-newline"],
)
async def test_create_queue_rejects_invalid_names(backend: QueueBackend, name: str) -> None:
    with pytest.raises(InvalidArgument):
        await backend.create_queue(name)
    if name:
        assert name not in await backend.list_queues()


async def test_create_queue_accepts_names_at_the_length_limits(backend: QueueBackend, queue_name: str) -> None:
    """3 and 63 characters are valid, so the rejections above are about the rule, not any name."""
    longest = (queue_name + "-" + "x" * 63)[:63]
    shortest = queue_name[-3:]  # three hex digits from a uuid: unlikely to clash, and removed at the end
    for name in (longest, shortest):
        await backend.create_queue(name)
    try:
        listed = await backend.list_queues()
        assert longest in listed and shortest in listed
    finally:
        for name in (longest, shortest):
            await backend.delete_queue(name)


async def test_put_on_missing_queue_raises_queue_not_found(backend: QueueBackend, queue_name: str) -> None:
    with pytest.raises(QueueNotFound):
        await backend.put(queue_name, "nowhere")


async def test_receive_on_missing_queue_raises_queue_not_found(backend: QueueBackend, queue_name: str) -> None:
    with pytest.raises(QueueNotFound):
        await backend.receive(queue_name, 1, HIDDEN)


async def test_approximate_count_on_missing_queue_raises_queue_not_found(
    backend: QueueBackend, queue_name: str
) -> None:
    with pytest.raises(QueueNotFound):
        await backend.approximate_count(queue_name)


# -- put ----------------------------------------------------------------------------------------------------------


async def test_put_returns_the_stored_message(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "hello")

    assert isinstance(sent.id, str) and sent.id, "put must return the message id"
    assert sent.content == "hello"
    assert sent.dequeue_count == 0
    assert_utc_near_now(sent.insertion_time, "insertion_time")
    assert_close(
        sent.expiration_time,
        sent.insertion_time + timedelta(seconds=DEFAULT_TTL_SECONDS),
        "expiration_time (default time-to-live is 7 days)",
    )
    assert_close(sent.time_next_visible, sent.insertion_time, "time_next_visible of a message put with no delay")

    other = await backend.put(queue_name, "hello")
    assert other.id != sent.id, "two puts must give two message ids"


async def test_put_with_infinite_time_to_live_never_expires(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "forever", time_to_live=NEVER_EXPIRES)
    assert sent.expiration_time is None, f"time_to_live=-1 must give no expiration time, got {sent.expiration_time}"

    got = await receive_one(backend, queue_name)
    assert got.id == sent.id, "a message that never expires must still be delivered"
    assert got.expiration_time is None


async def test_put_with_visibility_timeout_hides_the_message(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "later", visibility_timeout=HIDDEN)

    assert_close(sent.time_next_visible, sent.insertion_time + timedelta(seconds=HIDDEN), "time_next_visible")
    assert await backend.peek(queue_name, MAX_BATCH) == [], "peek returned a message put with a visibility timeout"
    assert await backend.receive(queue_name, MAX_BATCH, HIDDEN) == [], "receive returned a hidden message"
    assert await backend.approximate_count(queue_name) == 1


async def test_put_with_visibility_timeout_appears_when_it_passes(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    started = time.monotonic()
    sent = await backend.put(queue_name, "soon", visibility_timeout=SHORT)

    got = await wait_for_receive(backend, queue_name)
    waited = time.monotonic() - started
    assert got.id == sent.id and got.content == "soon"
    assert got.dequeue_count == 1
    # It must not have been visible straight away; the margin allows for Azure's one-second resolution.
    assert waited >= SHORT / 2, f"message put with a {SHORT}s visibility timeout was received after {waited:.2f}s"


async def test_put_rejects_visibility_timeout_over_seven_days(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    with pytest.raises(InvalidArgument):
        await backend.put(queue_name, "x", visibility_timeout=MAX_VISIBILITY_SECONDS + 1, time_to_live=NEVER_EXPIRES)
    assert await backend.approximate_count(queue_name) == 0, "a rejected put must store nothing"


# -- receive ------------------------------------------------------------------------------------------------------


async def test_receive_takes_a_message_and_gives_a_pop_receipt(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "work")
    before = datetime.now(UTC)
    got = await receive_one(backend, queue_name, HIDDEN)

    assert got.id == sent.id
    assert got.content == "work"
    assert got.dequeue_count == 1, "receive must increment the dequeue count"
    assert isinstance(got.pop_receipt, str) and got.pop_receipt, "receive must give a pop receipt"
    assert_close(got.insertion_time, sent.insertion_time, "insertion_time on receive")
    assert sent.expiration_time is not None
    assert_close(got.expiration_time, sent.expiration_time, "expiration_time on receive")
    assert_close(
        got.time_next_visible, before + timedelta(seconds=HIDDEN), "time_next_visible after receive", CLOCK_SLACK
    )


async def test_receive_hides_messages_for_the_visibility_timeout(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "only once")
    await receive_one(backend, queue_name, HIDDEN)

    assert await backend.receive(queue_name, MAX_BATCH, HIDDEN) == [], "a received message was given out twice"
    assert await backend.peek(queue_name, MAX_BATCH) == [], "peek returned a message hidden by a receive"
    assert await backend.approximate_count(queue_name) == 1


async def test_message_comes_back_after_visibility_timeout(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "retry me")
    first = await receive_one(backend, queue_name, SHORT)
    started = time.monotonic()

    second = await wait_for_receive(backend, queue_name)
    waited = time.monotonic() - started
    assert second.id == sent.id
    assert second.content == "retry me"
    assert second.dequeue_count == 2, "each receive must increment the dequeue count"
    assert second.pop_receipt and second.pop_receipt != first.pop_receipt, "a new receive must give a new pop receipt"
    assert waited >= SHORT / 2, f"message with a {SHORT}s visibility timeout came back after {waited:.2f}s"


async def test_receive_returns_at_most_max_messages(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = {(await backend.put(queue_name, f"m{i}")).id for i in range(5)}

    first = await backend.receive(queue_name, 3, HIDDEN)
    assert len(first) == 3, f"receive(max_messages=3) with 5 visible returned {len(first)}"
    rest = await backend.receive(queue_name, MAX_BATCH, HIDDEN)
    assert len(rest) == 2, f"expected the 2 remaining messages, got {len(rest)}"
    ids = [m.id for m in first + rest]
    assert len(set(ids)) == 5 and set(ids) == sent, "each message must be received exactly once"
    assert await backend.receive(queue_name, MAX_BATCH, HIDDEN) == []


async def test_receive_accepts_the_largest_batch(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    for i in range(MAX_BATCH + 2):
        await backend.put(queue_name, f"m{i}")
    got = await backend.receive(queue_name, MAX_BATCH, HIDDEN)
    assert len(got) == MAX_BATCH
    assert len({m.id for m in got}) == MAX_BATCH


@pytest.mark.parametrize("max_messages", [0, -1, MAX_BATCH + 1])
async def test_receive_rejects_batch_size_out_of_range(
    backend: QueueBackend, queue_name: str, max_messages: int
) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "untouched")
    with pytest.raises(InvalidArgument):
        await backend.receive(queue_name, max_messages, HIDDEN)
    got = await receive_one(backend, queue_name)
    assert got.dequeue_count == 1, "a rejected receive must not have taken the message"


async def test_receive_rejects_visibility_timeout_over_seven_days(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x")
    with pytest.raises(InvalidArgument):
        await backend.receive(queue_name, 1, MAX_VISIBILITY_SECONDS + 1)


async def test_messages_put_in_turn_all_come_back(backend: QueueBackend, queue_name: str) -> None:
    """Azure does not promise strict FIFO order, so only the set of messages is compared."""
    await backend.create_queue(queue_name)
    contents = [f"message {i}" for i in range(10)]
    for content in contents:
        await backend.put(queue_name, content)

    got = await backend.receive(queue_name, MAX_BATCH, HIDDEN)
    assert sorted(m.content for m in got) == sorted(contents)
    assert all(m.dequeue_count == 1 for m in got)


# -- update -------------------------------------------------------------------------------------------------------


async def test_update_rotates_the_pop_receipt(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x")
    got = await receive_one(backend, queue_name, HIDDEN)
    before = datetime.now(UTC)

    receipt = await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)
    assert receipt.pop_receipt and receipt.pop_receipt != got.pop_receipt, "update must give a new pop receipt"
    assert_close(
        receipt.time_next_visible, before + timedelta(seconds=HIDDEN), "time_next_visible after update", CLOCK_SLACK
    )
    # The new receipt is the current one: a further update and a delete with it work.
    again = await backend.update(queue_name, got.id, receipt.pop_receipt, HIDDEN)
    assert again.pop_receipt != receipt.pop_receipt
    await backend.delete(queue_name, got.id, again.pop_receipt)
    assert await backend.approximate_count(queue_name) == 0


async def test_update_to_zero_makes_the_message_visible_at_once(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "release me")
    got = await receive_one(backend, queue_name, HIDDEN)

    await backend.update(queue_name, got.id, receipt_of(got), 0)
    again = await receive_one(backend, queue_name, HIDDEN)
    assert again.id == sent.id
    assert again.dequeue_count == 2


async def test_update_extending_visibility_keeps_the_message_hidden(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "long job")
    got = await receive_one(backend, queue_name, SHORT)
    await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)

    # Not a wait for a condition: this window shows the message does NOT reappear once the original
    # 1 s visibility timeout is over.
    await asyncio.sleep(SHORT + 0.5)
    assert await backend.receive(queue_name, MAX_BATCH, HIDDEN) == [], "update did not extend the visibility timeout"
    assert await backend.peek(queue_name, MAX_BATCH) == []
    assert await backend.approximate_count(queue_name) == 1


async def test_update_rejects_visibility_timeout_over_seven_days(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x", time_to_live=NEVER_EXPIRES)
    got = await receive_one(backend, queue_name, HIDDEN)
    with pytest.raises(InvalidArgument):
        await backend.update(queue_name, got.id, receipt_of(got), MAX_VISIBILITY_SECONDS + 1)
    # The rejected update changed nothing: the receipt from receive is still the current one.
    await backend.delete(queue_name, got.id, receipt_of(got))


# -- stale pop receipts -------------------------------------------------------------------------------------------


async def test_receipt_is_stale_after_an_update(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x")
    got = await receive_one(backend, queue_name, HIDDEN)
    receipt = await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)

    with pytest.raises(PopReceiptMismatch):
        await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)
    with pytest.raises(PopReceiptMismatch):
        await backend.delete(queue_name, got.id, receipt_of(got))
    assert await backend.approximate_count(queue_name) == 1, "a delete with a stale receipt removed the message"
    await backend.delete(queue_name, got.id, receipt.pop_receipt)


async def test_receipt_is_stale_after_a_later_receive(backend: QueueBackend, queue_name: str) -> None:
    """The lease of a worker whose visibility timeout passed is gone once another worker receives the message."""
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x")
    first = await receive_one(backend, queue_name, SHORT)
    second = await wait_for_receive(backend, queue_name, HIDDEN)
    assert second.id == first.id

    with pytest.raises(PopReceiptMismatch):
        await backend.delete(queue_name, first.id, receipt_of(first))
    with pytest.raises(PopReceiptMismatch):
        await backend.update(queue_name, first.id, receipt_of(first), 0)
    assert await backend.approximate_count(queue_name) == 1
    assert await backend.peek(queue_name) == [], "an update with a stale receipt changed the visibility"
    await backend.delete(queue_name, second.id, receipt_of(second))



async def test_concurrent_calls_fail_only_where_their_own_receipt_is_stale(backend: QueueBackend, queue_name: str) -> None:
    """Many updates and deletes at once (a backend may commit them together): a stale one fails alone."""
    await backend.create_queue(queue_name)
    for i in range(20):
        await backend.put(queue_name, f"m{i}")
    got = await backend.receive(queue_name, 20, HIDDEN)
    assert len(got) == 20
    stale = {m.id for m in got[::4]}
    calls = [
        backend.update(queue_name, m.id, "stale" if m.id in stale else receipt_of(m), HIDDEN) if i % 2
        else backend.delete(queue_name, m.id, "stale" if m.id in stale else receipt_of(m))
        for i, m in enumerate(got)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)

    failed = {m.id for m, outcome in zip(got, outcomes, strict=True) if isinstance(outcome, BaseException)}
    assert failed == stale
    assert all(isinstance(o, PopReceiptMismatch) for o in outcomes if isinstance(o, BaseException))
    deleted = sum(1 for i, m in enumerate(got) if i % 2 == 0 and m.id not in stale)
    assert await backend.approximate_count(queue_name) == 20 - deleted

# -- delete -------------------------------------------------------------------------------------------------------


async def test_delete_removes_the_message(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "a")
    await backend.put(queue_name, "b")
    got = await receive_one(backend, queue_name, HIDDEN)
    assert await backend.approximate_count(queue_name) == 2

    await backend.delete(queue_name, got.id, receipt_of(got))
    assert await backend.approximate_count(queue_name) == 1, "delete did not remove the message"
    with pytest.raises(MessageNotFound):
        await backend.delete(queue_name, got.id, receipt_of(got))
    with pytest.raises(MessageNotFound):
        await backend.update(queue_name, got.id, receipt_of(got), 0)
    # The other message is untouched and still deliverable.
    rest = await receive_one(backend, queue_name, HIDDEN)
    assert rest.id != got.id and rest.content != got.content


async def test_unknown_message_id_raises_message_not_found(backend: QueueBackend, queue_name: str) -> None:
    """A well-formed id of a message that no longer exists, with a receipt that is current for another message."""
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "gone")
    gone = await receive_one(backend, queue_name, HIDDEN)
    await backend.delete(queue_name, gone.id, receipt_of(gone))
    await backend.put(queue_name, "live")
    live = await receive_one(backend, queue_name, HIDDEN)

    with pytest.raises(MessageNotFound):
        await backend.delete(queue_name, gone.id, receipt_of(live))
    with pytest.raises(MessageNotFound):
        await backend.update(queue_name, gone.id, receipt_of(live), 0)
    assert await backend.approximate_count(queue_name) == 1


# -- time to live -------------------------------------------------------------------------------------------------


async def test_expired_message_is_never_delivered(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    # A control message shows that receive works; only the expiring one must vanish.
    control = await backend.put(queue_name, "control")
    doomed = await backend.put(queue_name, "doomed", time_to_live=1)
    assert doomed.expiration_time is not None
    assert_close(doomed.expiration_time, doomed.insertion_time + timedelta(seconds=1), "expiration_time for ttl=1")

    async def expired() -> bool:
        return doomed.id not in {m.id for m in await backend.peek(queue_name, MAX_BATCH)}

    await apoll(expired, DEADLINE, what="the message with time_to_live=1 to expire")

    got = await backend.receive(queue_name, MAX_BATCH, HIDDEN)
    assert [m.id for m in got] == [control.id], "an expired message was delivered"
    assert await backend.peek(queue_name, MAX_BATCH) == []


# -- peek ---------------------------------------------------------------------------------------------------------


async def test_peek_leaves_the_message_alone(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "look")

    for _ in range(2):
        seen = await backend.peek(queue_name)
        assert [m.id for m in seen] == [sent.id], "peek must return the visible message"
        assert seen[0].content == "look"
        assert seen[0].pop_receipt is None, "peek must not give a pop receipt"
        assert seen[0].dequeue_count == 0, "peek must not change the dequeue count"

    got = await receive_one(backend, queue_name, HIDDEN)
    assert got.id == sent.id, "peek must not hide the message"
    assert got.dequeue_count == 1


async def test_peek_skips_invisible_messages_and_shows_dequeue_count(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    hidden = await backend.put(queue_name, "hidden")
    got = await receive_one(backend, queue_name, HIDDEN)
    assert got.id == hidden.id
    assert await backend.peek(queue_name, MAX_BATCH) == [], "peek returned a message hidden by a receive"

    await backend.put(queue_name, "delayed", visibility_timeout=HIDDEN)
    assert await backend.peek(queue_name, MAX_BATCH) == [], "peek returned a message put with a delay"

    await backend.update(queue_name, got.id, receipt_of(got), 0)
    seen = await backend.peek(queue_name, MAX_BATCH)
    assert [m.id for m in seen] == [hidden.id]
    assert seen[0].dequeue_count == 1, "peek must report the dequeue count so far"
    assert seen[0].pop_receipt is None


async def test_peek_returns_up_to_max_messages(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    for i in range(4):
        await backend.put(queue_name, f"m{i}")
    assert len(await backend.peek(queue_name, 2)) == 2
    assert len(await backend.peek(queue_name, MAX_BATCH)) == 4
    assert len(await backend.peek(queue_name)) == 1, "peek defaults to one message"
    with pytest.raises(InvalidArgument):
        await backend.peek(queue_name, MAX_BATCH + 1)


# -- approximate count --------------------------------------------------------------------------------------------


async def test_approximate_count_counts_visible_and_invisible(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    assert await backend.approximate_count(queue_name) == 0
    await backend.put(queue_name, "visible")
    await backend.put(queue_name, "received")
    await backend.put(queue_name, "delayed", visibility_timeout=HIDDEN)
    await receive_one(backend, queue_name, HIDDEN)

    assert len(await backend.peek(queue_name, MAX_BATCH)) == 1
    assert await backend.approximate_count(queue_name) == 3, "approximate_count must count hidden messages too"


# -- message size and content -------------------------------------------------------------------------------------


async def test_message_of_exactly_64_kib_is_accepted(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    content = "a" * MAX_MESSAGE_BYTES
    await backend.put(queue_name, content)
    got = await receive_one(backend, queue_name)
    assert got.content == content


async def test_message_one_byte_over_64_kib_is_rejected(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    with pytest.raises(MessageTooLarge):
        await backend.put(queue_name, "a" * (MAX_MESSAGE_BYTES + 1))
    assert await backend.approximate_count(queue_name) == 0


async def test_message_size_counts_utf8_bytes_not_characters(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    # 65536 bytes in 64536 characters. The multi-byte characters stand at the start: Azurite garbles a
    # multi-byte character that straddles one of its internal chunk boundaries near the end of a large body.
    fits = "é" * 1000 + "a" * (MAX_MESSAGE_BYTES - 2000)
    assert len(fits.encode("utf-8")) == MAX_MESSAGE_BYTES
    await backend.put(queue_name, fits)
    assert (await receive_one(backend, queue_name)).content == fits

    too_big = "é" + fits[:-1]  # still 64536 characters, but 65537 bytes
    with pytest.raises(MessageTooLarge):
        await backend.put(queue_name, too_big)

    three_byte = "€" * (MAX_MESSAGE_BYTES // 3 + 1)  # 21846 characters, 65538 bytes
    with pytest.raises(MessageTooLarge):
        await backend.put(queue_name, three_byte)
    assert await backend.approximate_count(queue_name) == 1


@pytest.mark.parametrize(
    "content",
    [
        "héllo wörld ✓ 日本語 Ωμέγα 😀",
        "line one\nline two\n\nline four\n",
        "<message attr=\"1\">&amp; & < > ' \"</message>",
        "]]> <![CDATA[ x ]]>",
        "  leading and trailing spaces  ",
        " ",
        "\ttabbed\t",
        '{"json": [1, 2.5, null], "key": "va\\"lue"}',
    ],
    ids=["unicode", "newlines", "xml-special", "cdata", "spaces", "single-space", "tabs", "json"],
)
async def test_content_round_trips_exactly(backend: QueueBackend, queue_name: str, content: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, content)
    assert sent.content == content

    peeked = await backend.peek(queue_name)
    assert [m.content for m in peeked] == [content], "peek changed the content"
    got = await receive_one(backend, queue_name)
    assert got.content == content, f"content changed in the queue: {content!r} came back as {got.content!r}"

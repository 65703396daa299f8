"""Conformance suite for the queue protocol (``worker.backends.queues``): Azure Storage Queue semantics, per-service limits.

Every test talks to the backend only through :class:`QueueBackend`, via the
``backend`` and ``queue_name`` fixtures, so that every backend (the embedded
SQLite queue, Azure Storage Queues on Azurite, OCI Queue on its test server)
runs this file unchanged. Nothing here may import a concrete backend or look at
its storage.

Limits and capabilities come from the backend under test: every size, batch
and visibility bound from ``backend.limits``, every optional feature from
``backend.capabilities``. A test of a feature some service lacks (peek, options
on a put) calls :func:`needs` and is skipped where it is missing; each such
feature has a test of its own that runs everywhere and checks the call is
refused with ``Unsupported`` there (and accepted where the backend says it
can), so a skip never hides a backend that quietly does the wrong thing.
Behaviour that merely differs between services (whether an update rotates the
pop receipt) is tested both ways, never skipped.

Timing rules: waiting *for* something uses :func:`apoll` with a deadline; a
bare ``asyncio.sleep`` appears only to show that something does *not* happen
within a window, and says so. Where a timeout must pass it is 1 second; where a
message must stay hidden the timeout is long (30 s) so a slow machine cannot
make it reappear mid-test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support import apoll
from worker.backends.oci.connection import OCI_LIMITS
from worker.backends.queues import (
    AZURE_NAME,
    DEFAULT_TTL_SECONDS,
    NEVER_EXPIRES,
    CountsByVisibility,
    InvalidArgument,
    MessageNotFound,
    MessageTooLarge,
    PopReceiptMismatch,
    QueueBackend,
    QueueNotFound,
    RawMessage,
    Unsupported,
)
from worker.backends.registry import open_backend
from worker.backends.sqs.connection import SQS_LIMITS

#: A visibility timeout long enough that a message stays hidden for the whole test.
HIDDEN = 30
#: The shortest visibility timeout receive accepts: used where the timeout must pass.
SHORT = 1
#: How long to wait for something that should happen within a second or two.
DEADLINE = 10.0
#: How far a service timestamp may be from this machine's clock (the emulators run alongside the tests).
CLOCK_SLACK = timedelta(seconds=30)
#: Azure reports times to the second (OCI Queue to the millisecond, visibility in whole seconds); allow for that
#: when comparing two service timestamps.
TIME_SLACK = timedelta(seconds=2)


# -- helpers ------------------------------------------------------------------------------------------------------

#: What each optional capability is, and the test that checks a backend without it refuses it.
CAPABILITY_TESTS = {
    "peek": ("peek (looking at messages without receiving them)", "test_peek_is_refused_where_the_service_cannot_peek"),
    "message_options": (
        "per-message options on put (initial invisibility, time to live)",
        "test_put_options_are_refused_where_messages_have_none",
    ),
    "updates_content": (
        "content updates (update with content)",
        "test_update_with_content_is_refused_where_the_service_cannot_change_content",
    ),
}


def needs(backend: QueueBackend, capability: str) -> None:
    """Skip the test where the backend lacks ``capability``; the refusal itself is tested elsewhere, on every backend."""
    what, refusal_test = CAPABILITY_TESTS[capability]
    if not getattr(backend.capabilities, capability):
        pytest.skip(f"{backend!r} has no {what}; {refusal_test} checks that it refuses it")


async def assert_nothing_visible(backend: QueueBackend, queue: str, why: str) -> None:
    """No message of ``queue`` is visible: peek where the service can, else a receive (one that finds nothing
    changes nothing, and one that finds something fails the test anyway)."""
    if backend.capabilities.peek:
        seen = await backend.peek(queue, backend.limits.max_batch)
    else:
        seen = await backend.receive(queue, backend.limits.max_batch, HIDDEN)
    assert seen == [], f"{why}: {[m.content for m in seen]}"


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


async def wait_for_all(backend: QueueBackend, queue: str, n: int, visibility_timeout: float = HIDDEN) -> list[RawMessage]:
    """Poll receive until ``n`` distinct messages have been taken (they may come back over several receives)."""
    taken: dict[str, RawMessage] = {}

    async def attempt() -> bool:
        for message in await backend.receive(queue, backend.limits.max_batch, visibility_timeout):
            taken[message.id] = message
        return len(taken) >= n

    await apoll(attempt, DEADLINE, what=f"{n} messages to become visible again")
    assert len(taken) == n, f"expected {n} messages, received {len(taken)}"
    return list(taken.values())


def receipt_of(message: RawMessage) -> str:
    """The pop receipt of a received message (peeked ones have none)."""
    assert message.pop_receipt, f"message {message.id} has no pop receipt"
    return message.pop_receipt


async def put_forever(backend: QueueBackend, queue: str, content: str) -> RawMessage:
    """Put a message that does not expire where messages take a time to live (Azure refuses a visibility past a
    message's expiry, so a test of the visibility limit must not meet that rule first); elsewhere the queue's
    retention applies."""
    if backend.capabilities.message_options:
        return await backend.put(queue, content, time_to_live=NEVER_EXPIRES)
    return await backend.put(queue, content)


def assert_utc_near_now(when: datetime, what: str) -> None:
    assert when.tzinfo is not None and when.utcoffset() == timedelta(0), f"{what} must be an aware UTC time: {when!r}"
    now = datetime.now(UTC)
    assert abs(when - now) <= CLOCK_SLACK, f"{what} is {when}, too far from now ({now})"


def assert_close(actual: datetime | None, expected: datetime, what: str, slack: timedelta = TIME_SLACK) -> None:
    assert actual is not None, f"{what} is missing"
    assert abs(actual - expected) <= slack, f"{what} is {actual}, expected about {expected}"


@dataclass(frozen=True)
class NameExamples:
    """Queue names one service's rule refuses (by why), and the shortest and longest names it allows."""

    invalid: dict[str, str]
    shortest: int
    longest: int


#: Examples for each name rule a backend may have, by its pattern; a backend with a rule not here fails the name
#: tests until someone writes examples for it (they must come from the service's documentation, not its pattern).
NAME_EXAMPLES = {
    # Azure: 3-63 lowercase letters, digits and single hyphens, alphanumeric at both ends.
    AZURE_NAME.pattern: NameExamples(
        invalid={
            "underscore": "Bad_Name",
            "too-short": "ab",
            "upper": "UPPER",
            "double-hyphen": "has--double",
            "leading-hyphen": "-leading",
            "trailing-hyphen": "trailing-",
            "space": "with space",
            "too-long": "a" * 64,
            "empty": "",
            "trailing-newline": "newline\n",
        },
        shortest=3,
        longest=63,
    ),
    # OCI Queue display names: 1-255 letters, digits, '.', '_' and '-'.
    OCI_LIMITS.name_pattern.pattern: NameExamples(
        invalid={
            "empty": "",
            "space": "a b",
            "too-long": "x" * 256,
            "slash": "bad/name",
            "trailing-newline": "newline\n",
            "non-ascii": "naïve",
            "colon": "a:b",
        },
        shortest=1,
        longest=255,
    ),
    # Amazon SQS: 1-80 letters, digits, '-' and '_', a FIFO queue's name ending in ".fifo".
    SQS_LIMITS.name_pattern.pattern: NameExamples(
        invalid={
            "empty": "",
            "space": "a b",
            "too-long": "x" * 81,
            "slash": "bad/name",
            "trailing-newline": "newline\n",
            "non-ascii": "naïve",
            "dot": "a.b",
            "fifo-too-long": "x" * 76 + ".fifo",
        },
        shortest=1,
        longest=80,
    ),
}


def name_examples(backend: QueueBackend) -> NameExamples:
    examples = NAME_EXAMPLES.get(backend.limits.name_pattern.pattern)
    if examples is None:
        pytest.fail(f"no queue name examples for {backend!r}'s rule ({backend.limits.name_rule}): add them to NAME_EXAMPLES")
    return examples


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
    await backend.put(queue_name, "two")
    await receive_one(backend, queue_name, HIDDEN)  # one visible message and one hidden go with the queue
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
    await assert_nothing_visible(backend, queue_name, "a message of a deleted queue is visible in its successor")


async def test_delete_missing_queue_is_not_an_error(backend: QueueBackend, queue_name: str) -> None:
    await backend.delete_queue(queue_name)  # never created
    await backend.create_queue(queue_name)
    await backend.delete_queue(queue_name)
    await backend.delete_queue(queue_name)  # already deleted
    assert queue_name not in await backend.list_queues()


async def test_create_queue_rejects_invalid_names(backend: QueueBackend) -> None:
    """Names the backend's service refuses (examples per name rule in NAME_EXAMPLES) are refused before any call."""
    examples = name_examples(backend)
    accepted: list[str] = []
    for why, name in examples.invalid.items():
        try:
            await backend.create_queue(name)
        except InvalidArgument:
            continue
        accepted.append(f"{why}: {name!r}")
        with contextlib.suppress(InvalidArgument):
            await backend.delete_queue(name)
    assert not accepted, f"{backend!r} created queues with invalid names ({backend.limits.name_rule}): {accepted}"
    listed = set(await backend.list_queues())
    assert not [name for name in examples.invalid.values() if name in listed]


async def test_create_queue_accepts_names_at_the_length_limits(backend: QueueBackend, queue_name: str) -> None:
    """The shortest and longest names the rule allows are valid, so the refusals above are about the rule."""
    examples = name_examples(backend)
    longest = (queue_name + "-" + "x" * examples.longest)[: examples.longest]
    # Hex digits from a uuid: unlikely to clash (with one character, only within a run), and removed at the end.
    shortest = queue_name[-examples.shortest :]
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


async def test_approximate_count_on_missing_queue_raises_queue_not_found(backend: QueueBackend, queue_name: str) -> None:
    with pytest.raises(QueueNotFound):
        await backend.approximate_count(queue_name)


async def test_counts_by_visibility_tell_held_messages_from_visible_ones(backend: QueueBackend, queue_name: str) -> None:
    """Where a backend splits its count (the console shows it), the two parts add up to the count."""
    await backend.create_queue(queue_name)
    if not isinstance(backend, CountsByVisibility):
        assert await backend.approximate_count(queue_name) == 0  # Azure Storage: one number only
        return
    for body in ("one", "two", "three"):
        await backend.put(queue_name, body)
    await backend.receive(queue_name, 1, HIDDEN)
    counts = await backend.message_counts(queue_name)
    assert (counts.visible, counts.invisible) == (2, 1)
    assert await backend.approximate_count(queue_name) == 3
    with pytest.raises(QueueNotFound):
        await backend.message_counts(queue_name + "-missing")


# -- put ----------------------------------------------------------------------------------------------------------


async def test_put_returns_the_stored_message(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "hello")

    assert isinstance(sent.id, str) and sent.id, "put must return the message id"
    assert sent.content == "hello"
    assert sent.dequeue_count == 0
    assert_utc_near_now(sent.insertion_time, "insertion_time")
    if backend.capabilities.message_options:
        assert_close(
            sent.expiration_time,
            sent.insertion_time + timedelta(seconds=DEFAULT_TTL_SECONDS),
            "expiration_time (default time-to-live is 7 days)",
        )
    else:
        # Expiry follows the queue's retention, whatever the queue was created with; it still lies ahead.
        assert sent.expiration_time is not None, "put must return when the message expires"
        assert sent.expiration_time > sent.insertion_time + TIME_SLACK, (
            f"expiration_time {sent.expiration_time} is not after insertion_time {sent.insertion_time}"
        )
    assert_close(sent.time_next_visible, sent.insertion_time, "time_next_visible of a message put with no delay")

    other = await backend.put(queue_name, "hello")
    assert other.id != sent.id, "two puts must give two message ids"


async def test_put_options_are_refused_where_messages_have_none(backend: QueueBackend, queue_name: str) -> None:
    """Where messages have no options (OCI Queue: a message is visible once put and expires with the queue's
    retention), a put asking for one is refused with Unsupported and stores nothing, rather than storing a message
    that behaves otherwise than asked. Where they have, the flag is checked the other way: each put is accepted."""
    await backend.create_queue(queue_name)
    options: list[dict[str, float]] = [
        {"visibility_timeout": HIDDEN},
        {"time_to_live": 3600},
        {"time_to_live": NEVER_EXPIRES},
        {"visibility_timeout": SHORT, "time_to_live": 3600},
    ]
    if backend.capabilities.message_options:
        for option in options:
            await backend.put(queue_name, f"with {option}", **option)
        assert await backend.approximate_count(queue_name) == len(options)
        return
    for option in options:
        with pytest.raises(Unsupported):
            await backend.put(queue_name, f"with {option}", **option)
    assert await backend.approximate_count(queue_name) == 0, "a refused put stored a message"
    # The defaults, even named, ask for nothing the service lacks.
    sent = await backend.put(queue_name, "plain", visibility_timeout=0, time_to_live=None)
    assert (await receive_one(backend, queue_name)).id == sent.id


async def test_put_with_infinite_time_to_live_never_expires(backend: QueueBackend, queue_name: str) -> None:
    needs(backend, "message_options")
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "forever", time_to_live=NEVER_EXPIRES)
    assert sent.expiration_time is None, f"time_to_live=-1 must give no expiration time, got {sent.expiration_time}"

    got = await receive_one(backend, queue_name)
    assert got.id == sent.id, "a message that never expires must still be delivered"
    assert got.expiration_time is None


async def test_put_with_visibility_timeout_hides_the_message(backend: QueueBackend, queue_name: str) -> None:
    needs(backend, "message_options")
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "later", visibility_timeout=HIDDEN)

    assert_close(sent.time_next_visible, sent.insertion_time + timedelta(seconds=HIDDEN), "time_next_visible")
    await assert_nothing_visible(backend, queue_name, "a message put with a visibility timeout is visible")
    assert await backend.receive(queue_name, backend.limits.max_batch, HIDDEN) == [], "receive returned a hidden message"
    assert await backend.approximate_count(queue_name) == 1


async def test_put_with_visibility_timeout_appears_when_it_passes(backend: QueueBackend, queue_name: str) -> None:
    needs(backend, "message_options")
    await backend.create_queue(queue_name)
    started = time.monotonic()
    sent = await backend.put(queue_name, "soon", visibility_timeout=SHORT)

    got = await wait_for_receive(backend, queue_name)
    waited = time.monotonic() - started
    assert got.id == sent.id and got.content == "soon"
    assert got.dequeue_count == 1
    # It must not have been visible straight away; the margin allows for a service's one-second resolution.
    assert waited >= SHORT / 2, f"message put with a {SHORT}s visibility timeout was received after {waited:.2f}s"


async def test_put_rejects_visibility_timeout_over_the_limit(backend: QueueBackend, queue_name: str) -> None:
    needs(backend, "message_options")
    await backend.create_queue(queue_name)
    with pytest.raises(InvalidArgument):
        await backend.put(queue_name, "x", visibility_timeout=backend.limits.max_visibility + 1, time_to_live=NEVER_EXPIRES)
    assert await backend.approximate_count(queue_name) == 0, "a rejected put must store nothing"


# -- receive ------------------------------------------------------------------------------------------------------


async def test_a_delete_or_update_without_its_message_id_or_receipt_is_refused_before_it_is_sent(
    backend: QueueBackend,
    queue_name: str,
) -> None:
    """On Azure Storage a delete of the queue's messages without an id is Clear Messages: no backend lets one go."""
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "kept")
    await backend.put(queue_name, "other")
    held = await receive_one(backend, queue_name)
    receipt = receipt_of(held)
    for call in (
        lambda: backend.delete(queue_name, "", receipt),
        lambda: backend.delete(queue_name, held.id, ""),
        lambda: backend.update(queue_name, "", receipt, 0),
        lambda: backend.update(queue_name, held.id, "", 0),
    ):
        with pytest.raises(InvalidArgument, match="refused before it was sent"):
            await call()
    assert await backend.approximate_count(queue_name) == 2  # nothing was deleted, nor cleared
    await backend.delete(queue_name, held.id, receipt)  # the lease still holds: its own receipt deletes it


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
    assert_close(got.time_next_visible, before + timedelta(seconds=HIDDEN), "time_next_visible after receive", CLOCK_SLACK)


async def test_receive_hides_messages_for_the_visibility_timeout(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "only once")
    await receive_one(backend, queue_name, HIDDEN)

    got = await backend.receive(queue_name, backend.limits.max_batch, HIDDEN)
    assert got == [], "a received message was given out twice"
    await assert_nothing_visible(backend, queue_name, "a message hidden by a receive is visible")
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
    rest = await backend.receive(queue_name, backend.limits.max_batch, HIDDEN)
    assert len(rest) == 2, f"expected the 2 remaining messages, got {len(rest)}"
    ids = [m.id for m in first + rest]
    assert len(set(ids)) == 5 and set(ids) == sent, "each message must be received exactly once"
    assert await backend.receive(queue_name, backend.limits.max_batch, HIDDEN) == []


async def test_receive_accepts_the_largest_batch(backend: QueueBackend, queue_name: str) -> None:
    largest = backend.limits.max_batch
    await backend.create_queue(queue_name)
    for i in range(largest + 2):
        await backend.put(queue_name, f"m{i}")
    got = await backend.receive(queue_name, largest, HIDDEN)
    assert len(got) == largest
    assert len({m.id for m in got}) == largest


async def test_receive_rejects_batch_size_out_of_range(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "untouched")
    accepted = []
    for max_messages in (0, -1, backend.limits.max_batch + 1):
        try:
            await backend.receive(queue_name, max_messages, HIDDEN)
        except InvalidArgument:
            continue
        accepted.append(max_messages)
    assert not accepted, f"receive accepted max_messages {accepted}; the range is 1 to {backend.limits.max_batch}"
    got = await receive_one(backend, queue_name)
    assert got.dequeue_count == 1, "a rejected receive must not have taken the message"


async def test_receive_rejects_visibility_timeout_over_the_limit(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x")
    with pytest.raises(InvalidArgument):
        await backend.receive(queue_name, 1, backend.limits.max_visibility + 1)
    got = await receive_one(backend, queue_name)
    assert got.dequeue_count == 1, "a rejected receive must not have taken the message"


#: Rounds of :func:`test_long_polls_cancelled_as_messages_arrive_hide_none_of_them`, and how long each poll is left to
#: reach the service before the round goes on. That is a stimulus, not a wait for a condition: no service shows a
#: receive waiting on it, so a test cannot learn that one is.
CANCELLED_POLL_ROUNDS = 6
REACH_SERVICE = 0.3


async def test_long_polls_cancelled_as_messages_arrive_hide_none_of_them(
    backend: QueueBackend, queue_name: str, connection: str | None, tmp_path: Path
) -> None:
    """A long poll is cancelled (as the host does at stop) just before, or just after, a message arrives for it.
    Whatever the service does with a request whose client has gone, once the cancelling backend is closed every
    message is visible again, none hidden for the poll's visibility (HIDDEN, past this test's deadline)."""
    if backend.limits.long_poll <= 0:
        pytest.skip(
            f"{backend!r} cannot wait; its cancelled receives are "
            "test_batch_receives_cancelled_under_way_hide_none_of_their_messages's"
        )
    await backend.create_queue(queue_name)
    worker = open_backend(connection, tmp_path)
    held: list[RawMessage] = []
    try:
        for index in range(CANCELLED_POLL_ROUNDS):
            poll = asyncio.ensure_future(worker.receive(queue_name, 1, HIDDEN, wait=worker.limits.long_poll))
            await asyncio.sleep(REACH_SERVICE)
            if index % 2:
                poll.cancel()
                await backend.put(queue_name, f"m{index}")
            else:
                await backend.put(queue_name, f"m{index}")
                poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                held += await poll  # it answered before the cancel: the test holds what it took
        for message in held:
            await worker.update(queue_name, message.id, receipt_of(message), 0)
    finally:
        await worker.close()
    got = await wait_for_all(backend, queue_name, CANCELLED_POLL_ROUNDS)
    assert sorted(m.content for m in got) == sorted(f"m{index}" for index in range(CANCELLED_POLL_ROUNDS))


#: Rounds of :func:`test_batch_receives_cancelled_under_way_hide_none_of_their_messages`; each cancels its receive
#: this much later than the one before, so that some are cut before the service answers and some after.
CANCELLED_RECEIVE_ROUNDS = 12
CANCEL_STEP = 0.001


async def test_batch_receives_cancelled_under_way_hide_none_of_their_messages(
    backend: QueueBackend, queue_name: str, connection: str | None, tmp_path: Path
) -> None:
    """The host cancels the receives it runs beside a listener's own when it stops, whether or not the service has
    answered them yet. However late the cancel comes, once the cancelling backend is closed every message is visible
    again, none hidden for the receive's visibility (HIDDEN, past this test's deadline)."""
    await backend.create_queue(queue_name)
    count = min(backend.limits.max_batch, 10)
    for index in range(count):
        await backend.put(queue_name, f"m{index}")
    worker = open_backend(connection, tmp_path)
    held: list[RawMessage] = []
    try:
        for index in range(CANCELLED_RECEIVE_ROUNDS):
            receive = asyncio.ensure_future(worker.receive(queue_name, count, HIDDEN))
            await asyncio.sleep(index * CANCEL_STEP)  # a stimulus, not a wait: how far the call got is up to it
            receive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                held += await receive  # it answered before the cancel: the test holds what it took
        for message in held:
            await worker.update(queue_name, message.id, receipt_of(message), 0)
    finally:
        await worker.close()
    got = await wait_for_all(backend, queue_name, count)
    assert sorted(m.content for m in got) == sorted(f"m{index}" for index in range(count))


async def test_messages_put_in_turn_all_come_back(backend: QueueBackend, queue_name: str) -> None:
    """Azure does not promise strict FIFO order, so only the set of messages is compared."""
    await backend.create_queue(queue_name)
    contents = [f"message {i}" for i in range(10)]
    for content in contents:
        await backend.put(queue_name, content)

    got = await backend.receive(queue_name, backend.limits.max_batch, HIDDEN)
    assert sorted(m.content for m in got) == sorted(contents)
    assert all(m.dequeue_count == 1 for m in got)


# -- update -------------------------------------------------------------------------------------------------------


async def test_update_gives_the_receipt_to_use_next(backend: QueueBackend, queue_name: str) -> None:
    """Update returns the receipt for the next call: a new one where the service rotates receipts (Azure), the same
    lease's where it keeps them (OCI Queue); either way a further update and a delete with it work."""
    rotates = backend.capabilities.new_receipt_on_update
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x")
    got = await receive_one(backend, queue_name, HIDDEN)
    before = datetime.now(UTC)

    receipt = await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)
    assert receipt.pop_receipt, "update must return a pop receipt"
    if rotates:
        assert receipt.pop_receipt != got.pop_receipt, "update must give a new pop receipt"
    assert_close(
        receipt.time_next_visible, before + timedelta(seconds=HIDDEN), "time_next_visible after update", CLOCK_SLACK
    )
    again = await backend.update(queue_name, got.id, receipt.pop_receipt, HIDDEN)
    if rotates:
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
    got_again = await backend.receive(queue_name, backend.limits.max_batch, HIDDEN)
    assert got_again == [], "update did not extend the visibility timeout"
    await assert_nothing_visible(backend, queue_name, "update did not extend the visibility timeout")
    assert await backend.approximate_count(queue_name) == 1


async def test_update_rejects_visibility_timeout_over_the_limit(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    await put_forever(backend, queue_name, "x")
    got = await receive_one(backend, queue_name, HIDDEN)
    with pytest.raises(InvalidArgument):
        await backend.update(queue_name, got.id, receipt_of(got), backend.limits.max_visibility + 1)
    # The rejected update changed nothing: the receipt from receive is still the current one.
    await backend.delete(queue_name, got.id, receipt_of(got))


# -- update with content ------------------------------------------------------------------------------------------


async def test_update_with_content_is_refused_where_the_service_cannot_change_content(
    backend: QueueBackend, queue_name: str
) -> None:
    """OCI Queue's UpdateMessage sets visibility only: new content is refused with Unsupported and nothing changes,
    the lease included. Where the service can (Azure, the embedded queue) the flag is checked the other way: the
    same call is accepted."""
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "original")
    got = await receive_one(backend, queue_name, HIDDEN)
    if backend.capabilities.updates_content:
        receipt = await backend.update(queue_name, got.id, receipt_of(got), HIDDEN, content="replaced")
        await backend.delete(queue_name, got.id, receipt.pop_receipt)
        return
    with pytest.raises(Unsupported):
        await backend.update(queue_name, got.id, receipt_of(got), 0, content="replaced")
    await assert_nothing_visible(backend, queue_name, "a refused update released the message")
    await backend.update(queue_name, got.id, receipt_of(got), 0)
    again = await receive_one(backend, queue_name, HIDDEN)
    assert (again.content, again.dequeue_count) == ("original", 2), "a refused update changed the message"


@pytest.mark.parametrize("ends", ["released", "expired"])
async def test_content_updated_under_a_lease_is_read_by_the_next_receive(
    backend: QueueBackend, queue_name: str, ends: str
) -> None:
    """Azure's Update Message with content: the next receive reads the last content given, whether the lease was
    released (an update to 0 that names no content keeps it) or ran out. The dequeue count rises with each receive
    only, never with an update."""
    needs(backend, "updates_content")
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "step 0")
    got = await receive_one(backend, queue_name, HIDDEN)
    receipt = await backend.update(queue_name, got.id, receipt_of(got), HIDDEN, content="step 1")
    receipt = await backend.update(queue_name, got.id, receipt.pop_receipt, HIDDEN, content="step 2 ✓")
    await assert_nothing_visible(backend, queue_name, "an update with content made the message visible")

    if ends == "released":
        await backend.update(queue_name, got.id, receipt.pop_receipt, 0)
        again = await receive_one(backend, queue_name, HIDDEN)
    else:
        await backend.update(queue_name, got.id, receipt.pop_receipt, SHORT, content="step 3")
        again = await wait_for_receive(backend, queue_name, HIDDEN)
    assert again.id == sent.id
    assert again.content == ("step 2 ✓" if ends == "released" else "step 3")
    assert again.dequeue_count == 2, f"dequeue count {again.dequeue_count} after two receives and three updates"
    if backend.capabilities.peek:
        await backend.update(queue_name, again.id, receipt_of(again), 0)
        [peeked] = await backend.peek(queue_name)
        assert (peeked.content, peeked.dequeue_count) == (again.content, 2)


async def test_update_with_content_and_a_stale_receipt_changes_nothing(backend: QueueBackend, queue_name: str) -> None:
    """A worker whose lease ran out while another received the message cannot overwrite that worker's content."""
    needs(backend, "updates_content")
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "original")
    first = await receive_one(backend, queue_name, SHORT)
    second = await wait_for_receive(backend, queue_name, HIDDEN)
    assert second.id == first.id

    with pytest.raises(PopReceiptMismatch):
        await backend.update(queue_name, first.id, receipt_of(first), HIDDEN, content="from the stale holder")
    receipt = await backend.update(queue_name, second.id, receipt_of(second), HIDDEN, content="from the holder")
    if backend.capabilities.new_receipt_on_update:  # the receipt an update replaced is as stale as a receive's
        with pytest.raises(PopReceiptMismatch):
            await backend.update(queue_name, second.id, receipt_of(second), 0, content="from before the update")
    await backend.update(queue_name, second.id, receipt.pop_receipt, 0)
    third = await receive_one(backend, queue_name, HIDDEN)
    assert (third.content, third.dequeue_count) == ("from the holder", 3)


async def test_update_with_content_over_the_size_limit_is_refused(backend: QueueBackend, queue_name: str) -> None:
    """Content is held to ``limits.max_message_bytes`` as a put is: one byte over is refused with MessageTooLarge
    and changes nothing (the receipt still holds); exactly the limit is stored."""
    needs(backend, "updates_content")
    limit = backend.limits.max_message_bytes
    await backend.create_queue(queue_name)
    await put_forever(backend, queue_name, "small")
    got = await receive_one(backend, queue_name, HIDDEN)

    with pytest.raises(MessageTooLarge):
        await backend.update(queue_name, got.id, receipt_of(got), HIDDEN, content="é" + "a" * (limit - 1))
    fits = "é" * 1000 + "a" * (limit - 2000)  # the multi-byte characters first, as in the put test (Azurite)
    receipt = await backend.update(queue_name, got.id, receipt_of(got), 0, content=fits)
    again = await receive_one(backend, queue_name, HIDDEN)
    assert again.content == fits, "content of exactly the size limit did not come back whole"
    assert again.dequeue_count == 2
    with pytest.raises(PopReceiptMismatch):
        await backend.update(queue_name, got.id, receipt.pop_receipt, 0)


# -- stale pop receipts -------------------------------------------------------------------------------------------


async def test_receipt_from_before_an_update_is_stale_or_kept(backend: QueueBackend, queue_name: str) -> None:
    """Where update rotates receipts (Azure) the receive's receipt is stale after it; where the service keeps one
    receipt per delivery (OCI Queue) the receive's receipt and the one update returned both go on working."""
    await backend.create_queue(queue_name)
    await backend.put(queue_name, "x")
    got = await receive_one(backend, queue_name, HIDDEN)
    receipt = await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)

    if backend.capabilities.new_receipt_on_update:
        with pytest.raises(PopReceiptMismatch):
            await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)
        with pytest.raises(PopReceiptMismatch):
            await backend.delete(queue_name, got.id, receipt_of(got))
        assert await backend.approximate_count(queue_name) == 1, "a delete with a stale receipt removed the message"
    else:
        await backend.update(queue_name, got.id, receipt_of(got), HIDDEN)
        await backend.update(queue_name, got.id, receipt.pop_receipt, HIDDEN)
        await assert_nothing_visible(backend, queue_name, "an update with the kept receipt released the message")
    await backend.delete(queue_name, got.id, receipt.pop_receipt)
    assert await backend.approximate_count(queue_name) == 0, "a delete with the receipt update returned did not work"


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
    await assert_nothing_visible(backend, queue_name, "an update with a stale receipt changed the visibility")
    await backend.delete(queue_name, second.id, receipt_of(second))


async def test_concurrent_calls_fail_only_where_their_own_receipt_is_stale(backend: QueueBackend, queue_name: str) -> None:
    """Many updates and deletes at once (a backend may commit them together): a stale one fails alone.

    The stale receipts are real ones, from a receive whose short visibility timeout passed before a second
    receive took the messages again: stale on every backend, whether or not updates rotate receipts.
    """
    n = min(20, backend.limits.max_batch)
    await backend.create_queue(queue_name)
    for i in range(n):
        await backend.put(queue_name, f"m{i}")
    first = await backend.receive(queue_name, n, SHORT)
    assert len(first) == n
    old = {m.id: receipt_of(m) for m in first}
    got = await wait_for_all(backend, queue_name, n)
    stale = {m.id for m in got[::4]}
    calls = [
        backend.update(queue_name, m.id, old[m.id] if m.id in stale else receipt_of(m), HIDDEN)
        if i % 2
        else backend.delete(queue_name, m.id, old[m.id] if m.id in stale else receipt_of(m))
        for i, m in enumerate(got)
    ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)

    failed = {m.id for m, outcome in zip(got, outcomes, strict=True) if isinstance(outcome, BaseException)}
    assert failed == stale
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(o, PopReceiptMismatch) for o in errors), f"not all PopReceiptMismatch: {errors}"
    deleted = sum(1 for i, m in enumerate(got) if i % 2 == 0 and m.id not in stale)
    assert await backend.approximate_count(queue_name) == n - deleted


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
    needs(backend, "message_options")
    needs(backend, "peek")
    await backend.create_queue(queue_name)
    # A control message shows that receive works; only the expiring one must vanish.
    control = await backend.put(queue_name, "control")
    doomed = await backend.put(queue_name, "doomed", time_to_live=1)
    assert doomed.expiration_time is not None
    assert_close(doomed.expiration_time, doomed.insertion_time + timedelta(seconds=1), "expiration_time for ttl=1")

    async def expired() -> bool:
        return doomed.id not in {m.id for m in await backend.peek(queue_name, backend.limits.max_batch)}

    await apoll(expired, DEADLINE, what="the message with time_to_live=1 to expire")

    got = await backend.receive(queue_name, backend.limits.max_batch, HIDDEN)
    assert [m.id for m in got] == [control.id], "an expired message was delivered"
    await assert_nothing_visible(backend, queue_name, "an expired message is visible")


# -- peek ---------------------------------------------------------------------------------------------------------


async def test_peek_is_refused_where_the_service_cannot_peek(backend: QueueBackend, queue_name: str) -> None:
    """OCI Queue's only look at a message is a receive that counts a delivery, so its backend refuses peek with
    Unsupported instead of delivering the message. Where peek exists the flag is checked the other way: it answers."""
    await backend.create_queue(queue_name)
    sent = await backend.put(queue_name, "look")
    if backend.capabilities.peek:
        assert [m.id for m in await backend.peek(queue_name)] == [sent.id]
    else:
        with pytest.raises(Unsupported):
            await backend.peek(queue_name)
        with pytest.raises(Unsupported):
            await backend.peek(queue_name, backend.limits.max_batch)
    got = await receive_one(backend, queue_name, HIDDEN)
    assert got.id == sent.id
    assert got.dequeue_count == 1, "a peek (or a refused one) counted a delivery"


async def test_peek_leaves_the_message_alone(backend: QueueBackend, queue_name: str) -> None:
    needs(backend, "peek")
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
    needs(backend, "peek")
    largest = backend.limits.max_batch
    await backend.create_queue(queue_name)
    hidden = await backend.put(queue_name, "hidden")
    got = await receive_one(backend, queue_name, HIDDEN)
    assert got.id == hidden.id
    assert await backend.peek(queue_name, largest) == [], "peek returned a message hidden by a receive"

    if backend.capabilities.message_options:
        await backend.put(queue_name, "delayed", visibility_timeout=HIDDEN)
        assert await backend.peek(queue_name, largest) == [], "peek returned a message put with a delay"

    await backend.update(queue_name, got.id, receipt_of(got), 0)
    seen = await backend.peek(queue_name, largest)
    assert [m.id for m in seen] == [hidden.id]
    assert seen[0].dequeue_count == 1, "peek must report the dequeue count so far"
    assert seen[0].pop_receipt is None


async def test_peek_returns_up_to_max_messages(backend: QueueBackend, queue_name: str) -> None:
    needs(backend, "peek")
    largest = backend.limits.max_batch
    await backend.create_queue(queue_name)
    for i in range(4):
        await backend.put(queue_name, f"m{i}")
    assert len(await backend.peek(queue_name, 2)) == 2
    assert len(await backend.peek(queue_name, largest)) == 4
    assert len(await backend.peek(queue_name)) == 1, "peek defaults to one message"
    with pytest.raises(InvalidArgument):
        await backend.peek(queue_name, largest + 1)


# -- approximate count --------------------------------------------------------------------------------------------


async def test_approximate_count_counts_visible_and_invisible(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    assert await backend.approximate_count(queue_name) == 0
    await backend.put(queue_name, "visible")
    await backend.put(queue_name, "received")
    total = 2
    if backend.capabilities.message_options:
        await backend.put(queue_name, "delayed", visibility_timeout=HIDDEN)
        total += 1
    await receive_one(backend, queue_name, HIDDEN)

    if backend.capabilities.peek:
        assert len(await backend.peek(queue_name, backend.limits.max_batch)) == 1
    else:
        # Without peek, a receive shows the one visible message; it is hidden too from then on.
        assert len(await backend.receive(queue_name, backend.limits.max_batch, HIDDEN)) == 1
    assert await backend.approximate_count(queue_name) == total, "approximate_count must count hidden messages too"


# -- message size and content -------------------------------------------------------------------------------------


async def test_message_of_exactly_the_size_limit_is_accepted(backend: QueueBackend, queue_name: str) -> None:
    """``limits.max_message_bytes``: 64 KiB on Azure and the embedded queue, 128 KiB on OCI Queue."""
    await backend.create_queue(queue_name)
    content = "a" * backend.limits.max_message_bytes
    await backend.put(queue_name, content)
    got = await receive_one(backend, queue_name)
    assert got.content == content


async def test_message_one_byte_over_the_size_limit_is_rejected(backend: QueueBackend, queue_name: str) -> None:
    await backend.create_queue(queue_name)
    with pytest.raises(MessageTooLarge):
        await backend.put(queue_name, "a" * (backend.limits.max_message_bytes + 1))
    assert await backend.approximate_count(queue_name) == 0


async def test_message_size_counts_utf8_bytes_not_characters(backend: QueueBackend, queue_name: str) -> None:
    limit = backend.limits.max_message_bytes
    await backend.create_queue(queue_name)
    # Exactly the limit in bytes, 1000 characters fewer (on Azure: 65536 bytes in 64536 characters). The multi-byte
    # characters stand at the start: Azurite garbles a multi-byte character that straddles one of its internal
    # chunk boundaries near the end of a large body.
    fits = "é" * 1000 + "a" * (limit - 2000)
    assert len(fits.encode("utf-8")) == limit
    await backend.put(queue_name, fits)
    assert (await receive_one(backend, queue_name)).content == fits

    too_big = "é" + fits[:-1]  # as many characters, one byte more
    with pytest.raises(MessageTooLarge):
        await backend.put(queue_name, too_big)

    three_byte = "€" * (limit // 3 + 1)  # fewer characters than the limit, more bytes (Azure: 21846, 65538 bytes)
    with pytest.raises(MessageTooLarge):
        await backend.put(queue_name, three_byte)
    assert await backend.approximate_count(queue_name) == 1


@pytest.mark.parametrize(
    "content",
    [
        "héllo wörld ✓ 日本語 Ωμέγα 😀",
        "line one\nline two\n\nline four\n",
        '<message attr="1">&amp; & < > \' "</message>',
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

    if backend.capabilities.peek:
        peeked = await backend.peek(queue_name)
        assert [m.content for m in peeked] == [content], "peek changed the content"
    got = await receive_one(backend, queue_name)
    assert got.content == content, f"content changed in the queue: {content!r} came back as {got.content!r}"


# -- channels -----------------------------------------------------------------------------------------------------


async def test_a_receive_from_a_channel_takes_only_that_channels_messages(backend: QueueBackend, queue_name: str) -> None:
    """OCI Queue's channels: a put names one, a receive filtered to one takes only its messages. Where queues have
    no channels, both calls are refused rather than quietly ignoring the channel."""
    await backend.create_queue(queue_name)
    if not backend.capabilities.channels:
        with pytest.raises(Unsupported):
            await backend.put(queue_name, "a", channel="tenant-a")
        with pytest.raises(Unsupported):
            await backend.receive(queue_name, 1, HIDDEN, channel="tenant-a")
        await assert_nothing_visible(backend, queue_name, "a refused put stored a message")
        return
    for content, channel in [("a1", "tenant-a"), ("b1", "tenant-b"), ("a2", "tenant-a")]:
        await backend.put(queue_name, content, channel=channel)

    got = await backend.receive(queue_name, backend.limits.max_batch, HIDDEN, channel="tenant-a")
    assert sorted(m.content for m in got) == ["a1", "a2"]
    assert await backend.receive(queue_name, backend.limits.max_batch, HIDDEN, channel="tenant-a") == []
    rest = await backend.receive(queue_name, backend.limits.max_batch, HIDDEN)
    assert [m.content for m in rest] == ["b1"], "an unfiltered receive takes any channel's messages"


# -- message properties ---------------------------------------------------------------------------------------------


async def test_a_messages_properties_come_back_with_every_receive(backend: QueueBackend, queue_name: str) -> None:
    """Where messages carry properties (the embedded queue), what a put gives comes back with each receive, and a
    message put without any has none. Elsewhere a put with properties is refused, never stored without them."""
    await backend.create_queue(queue_name)
    carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}
    if not backend.capabilities.message_properties:
        with pytest.raises(Unsupported):
            await backend.put(queue_name, "with", properties=carried)
        await assert_nothing_visible(backend, queue_name, "a refused put stored a message")
        return
    await backend.put(queue_name, "with", properties=carried)
    await backend.put(queue_name, "without")

    # A receive may bring fewer than the visible messages (SQS samples; two visibilities may end apart): each
    # look gathers receives until both messages have come.
    first = await _both(backend, queue_name, SHORT)
    assert {content: dict(m.properties) for content, m in first.items()} == {"with": carried, "without": {}}
    again = await _both(backend, queue_name, HIDDEN)
    assert {content: (m.dequeue_count, dict(m.properties)) for content, m in again.items()} == {
        "with": (2, carried),
        "without": (2, {}),
    }


async def _both(backend: QueueBackend, queue_name: str, visibility: float) -> dict[str, RawMessage]:
    """The messages "with" and "without", by content, received (and hidden for ``visibility``) by as many receives
    as it takes within DEADLINE."""
    got: dict[str, RawMessage] = {}

    async def gathered() -> bool:
        got.update((m.content, m) for m in await backend.receive(queue_name, backend.limits.max_batch, visibility))
        return len(got) == 2

    await apoll(gathered, DEADLINE, what="both messages")
    return got

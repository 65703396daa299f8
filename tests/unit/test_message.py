"""QueueMessage, messageEncoding and the listener's polling back-off."""

from __future__ import annotations

import base64
import threading
from datetime import UTC, datetime, timedelta

import pytest

from worker.bindings.encoding import MessageDecodeError, decode, encode
from worker.message import QueueMessage
from worker.runtime.listener import MIN_POLL_DELAY, Backoff

INSERTED = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def make_message(body: bytes = b"{}", *, id: str = "msg-1", pop_receipt: str | None = "receipt-1") -> QueueMessage:
    """A message built as a user would in a handler unit test: no lease, no host."""
    return QueueMessage(
        id=id,
        body=body,
        dequeue_count=3,
        insertion_time=INSERTED,
        expiration_time=INSERTED + timedelta(days=7),
        time_next_visible=INSERTED + timedelta(seconds=30),
        pop_receipt=pop_receipt,
    )


# QueueMessage


def test_a_message_built_outside_a_host_cannot_be_checkpointed() -> None:
    """A handler unit test's message has no lease a host holds: its checkpoint is refused, not pretended."""
    message = make_message(b"step 0")
    with pytest.raises(RuntimeError, match="not held by a running host"):
        message.checkpoint("step 1")
    assert message.get_body() == b"step 0"


def test_message_attributes() -> None:
    message = make_message(b"hello")

    assert message.id == "msg-1"
    assert message.dequeue_count == 3
    assert message.insertion_time == INSERTED
    assert message.expiration_time == INSERTED + timedelta(days=7)
    assert message.time_next_visible == INSERTED + timedelta(seconds=30)
    assert message.pop_receipt == "receipt-1"
    assert message.get_body() == b"hello"


def test_get_json_parses_the_body() -> None:
    message = make_message('{"order": 7, "name": "café"}'.encode())

    assert message.get_json() == {"order": 7, "name": "café"}


def test_get_json_on_invalid_utf8_says_utf8() -> None:
    message = make_message(b"\xff\xfe{}")

    with pytest.raises(ValueError, match="UTF-8"):
        message.get_json()


def test_get_json_on_invalid_json_says_json_and_names_the_message() -> None:
    message = make_message(b"{not json", id="abc-123")

    with pytest.raises(ValueError, match="JSON") as info:
        message.get_json()
    assert "abc-123" in str(info.value)


def test_message_without_a_lease_has_unset_events() -> None:
    message = make_message(pop_receipt=None)

    assert message.pop_receipt is None
    for event in (message.lease_lost, message.cancelled):
        assert isinstance(event, threading.Event)
        assert not event.is_set()
    assert message.lease_lost is not message.cancelled


# messageEncoding


@pytest.mark.parametrize("encoding", ["base64", "none"])
@pytest.mark.parametrize("body", [b"plain", "héllo wörld ✓ 日本", b""])
def test_encode_decode_round_trip(encoding: str, body: bytes | str) -> None:
    expected = body.encode("utf-8") if isinstance(body, str) else body

    assert decode(encode(body, encoding), encoding) == expected


def test_base64_matches_the_azure_sdk_encoding() -> None:
    body = "héllo ✓".encode()

    assert encode(body, "base64") == base64.b64encode(body).decode("ascii")
    assert encode("héllo ✓", "base64") == base64.b64encode(body).decode("ascii")


def test_none_encoding_stores_the_text_as_is() -> None:
    assert encode("héllo", "none") == "héllo"


@pytest.mark.parametrize("text", ["not base64!!", "aGVsbG8=!", "aGVsbG8=é"])
def test_decode_invalid_base64_raises(text: str) -> None:
    """Garbage, a stray character a lenient decoder would drop, and non-ASCII text are all rejected."""
    with pytest.raises(MessageDecodeError, match="base64"):
        decode(text, "base64")


# Backoff


def expected_bounds(attempt: int, ceiling: float) -> tuple[float, float]:
    """Where the ``attempt``-th delay must fall: 0.1 * 2**attempt, +-20 %, never above ``ceiling``."""
    nominal = MIN_POLL_DELAY * 2**attempt
    return 0.8 * min(nominal, ceiling), min(1.2 * nominal, ceiling)


def test_backoff_starts_at_100ms_and_doubles_with_jitter() -> None:
    ceiling = 2.0
    for _ in range(200):
        backoff = Backoff(ceiling)
        for attempt in range(8):
            low, high = expected_bounds(attempt, ceiling)
            assert low <= backoff.next() <= high, attempt


def test_backoff_never_exceeds_the_ceiling() -> None:
    backoff = Backoff(1.0)
    delays = [backoff.next() for _ in range(100)]

    assert max(delays) <= 1.0
    assert min(delays[10:]) >= 0.8


def test_backoff_reset_starts_over() -> None:
    backoff = Backoff(60.0)
    for _ in range(10):
        backoff.next()

    backoff.reset()

    low, high = expected_bounds(0, 60.0)
    assert low <= backoff.next() <= high

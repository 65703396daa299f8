"""Binding expressions in blob paths, resolved as the WebJobs SDK resolves them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from worker.bindings.expressions import ExpressionError, binding_data, format_time, resolve, resolve_settings, setting_names
from worker.message import QueueMessage

INSERTED = datetime(2026, 11, 24, 9, 5, 7, 123000, tzinfo=UTC)


def message(body: bytes) -> QueueMessage:
    return QueueMessage(
        id="m-1",
        body=body,
        dequeue_count=2,
        insertion_time=INSERTED,
        expiration_time=None,
        time_next_visible=datetime(2026, 11, 24, 9, 15, tzinfo=UTC),
        pop_receipt="r-9",
    )


def test_message_metadata_and_the_body() -> None:
    data = binding_data(message(b"report.csv"))
    assert resolve("in/{queueTrigger}", data) == "in/report.csv"
    assert resolve("{id}/{dequeueCount}/{popReceipt}", data) == "m-1/2/r-9"
    assert resolve("{insertionTime}/{nextVisibleTime}", data) == "2026-11-24T09-05-07Z/2026-11-24T09-15-00Z"


def test_names_are_case_insensitive() -> None:
    data = binding_data(message(b'{"Customer": "acme"}'))
    assert resolve("{QUEUETRIGGER}|{customer}|{CUSTOMER}|{Id}", data) == '{"Customer": "acme"}|acme|acme|m-1'


def test_json_body_properties_nested_and_typed() -> None:
    data = binding_data(message(b'{"order": {"id": 17, "Region": "eu"}, "rush": true, "n": 2.5}'))
    assert resolve("{order.id}-{order.region}-{n}", data) == "17-eu-2.5"


@pytest.mark.parametrize(
    ("body", "shown"), [(b'{"name": null}', "null"), (b'{"name": true}', "true"), (b'{"name": false}', "false")]
)
def test_a_null_or_a_boolean_is_no_name(body: bytes, shown: str) -> None:
    """Not None.txt or True.txt, which no one meant: the message cannot name a blob (it goes to poison at once)."""
    with pytest.raises(ExpressionError, match=rf"\{{name\}} is {shown}, not a name"):
        resolve("out/{name}.txt", binding_data(message(body)))


def test_a_body_property_wins_over_the_message_metadata_of_the_same_name_as_in_the_sdk() -> None:
    data = binding_data(message(b'{"id": "from-body", "name": "x"}'))
    assert resolve("{id}-{name}-{dequeueCount}", data) == "from-body-x-2"


def test_a_name_the_message_does_not_have_names_it_and_what_there_is() -> None:
    with pytest.raises(ExpressionError, match=r"no value for \{name\} \(binding data: dequeuecount, "):
        resolve("out/{name}.txt", binding_data(message(b"not json")))
    with pytest.raises(ExpressionError, match="is a JSON dict"):
        resolve("out/{order}", binding_data(message(b'{"order": {"id": 1}}')))


def test_rand_guid_is_new_at_each_use_in_dotnet_formats() -> None:
    first, second = resolve("{rand-guid}|{rand-guid}", {}).split("|")
    assert first != second and re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", first)
    assert re.fullmatch(r"[0-9a-f]{32}", resolve("{rand-guid:N}", {}))
    assert re.fullmatch(r"\{[0-9a-f-]{36}\}", resolve("{RAND-GUID:B}", {}))
    with pytest.raises(ExpressionError, match="rand-guid format 'X'"):
        resolve("{rand-guid:X}", {})


def test_datetime_is_utc_now_as_the_sdk_writes_it_in_paths_or_in_a_dotnet_format() -> None:
    now = datetime(2018, 2, 16, 17, 59, 55, 250000, tzinfo=UTC)
    assert resolve("logs/{DateTime}.txt", {}, now=now) == "logs/2018-02-16T17-59-55Z.txt"
    assert resolve("{datetime:yyyy/MM/dd}/{DateTime:HH'h'mm.fff}", {}, now=now) == "2018/02/16/17h59.250"
    assert format_time(now, "yy-M-d") == "18-M-d"  # only the specifiers listed are formats; the rest is literal


def test_a_body_property_named_datetime_is_the_message_s() -> None:
    assert resolve("{DateTime}", binding_data(message(b'{"datetime": "yesterday"}'))) == "yesterday"


def test_app_settings_are_resolved_and_a_missing_one_is_named() -> None:
    assert setting_names("%ROOT%/{id}/%SUB%") == ["ROOT", "SUB"]
    assert resolve_settings("%ROOT%/{id}", {"ROOT": "archive"}) == "archive/{id}"
    with pytest.raises(ExpressionError, match="app setting ROOT, which is not set"):
        resolve_settings("%ROOT%/{id}", {})


def test_unbalanced_or_empty_braces_are_errors() -> None:
    with pytest.raises(ExpressionError, match="unmatched brace"):
        resolve("out/{id", {"id": "1"})
    with pytest.raises(ExpressionError, match="empty"):
        resolve("out/{}", {})

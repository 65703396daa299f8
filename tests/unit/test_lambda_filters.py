"""Lambda's filter patterns for SQS records (``FilterCriteria``), each rule of its language, and what is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from worker.compat.lambda_filters import FilterError, matches_any, parse_filters


def _record(body: Any, **more: Any) -> dict[str, Any]:
    return {
        "messageId": "m-1",
        "body": body if isinstance(body, str) else json.dumps(body),
        "attributes": {"ApproximateReceiveCount": "1", "SenderId": "AIDA1"},
        "messageAttributes": {"tenant": {"stringValue": "acme", "dataType": "String"}},
        **more,
    }


def _matches(pattern: dict[str, Any], record: dict[str, Any]) -> bool:
    return matches_any(parse_filters({"Filters": [{"Pattern": json.dumps(pattern)}]}), record)


ORDER = {"kind": "order", "total": 42.5, "tags": ["new", "eu"], "customer": {"tier": "Gold", "id": None}, "note": ""}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ({"body": {"kind": ["order"]}}, True),
        ({"body": {"kind": ["refund", "order"]}}, True),
        ({"body": {"kind": ["refund"]}}, False),
        ({"body": {"kind": [{"prefix": "ord"}]}}, True),
        ({"body": {"kind": [{"suffix": "der"}]}}, True),
        ({"body": {"kind": [{"suffix": "fund"}]}}, False),
        ({"body": {"kind": [{"anything-but": ["refund", "void"]}]}}, True),
        ({"body": {"kind": [{"anything-but": "order"}]}}, False),
        ({"body": {"total": [{"numeric": [">", 40, "<=", 50]}]}}, True),
        ({"body": {"total": [{"numeric": ["<", 40]}]}}, False),
        ({"body": {"total": [42.5]}}, True),
        ({"body": {"tags": ["eu"]}}, True),
        ({"body": {"tags": ["us"]}}, False),
        ({"body": {"customer": {"tier": [{"equals-ignore-case": "gold"}]}}}, True),
        ({"body": {"customer": {"id": [None]}}}, True),
        ({"body": {"note": [""]}}, True),
        ({"body": {"coupon": [{"exists": False}]}}, True),
        ({"body": {"coupon": [{"exists": True}]}}, False),
        ({"body": {"kind": [{"exists": True}]}}, True),
        ({"body": {"kind": ["order"], "total": [{"numeric": [">", 100]}]}}, False),
        ({"body": {"$or": [{"kind": ["refund"]}, {"total": [{"numeric": [">=", 42.5]}]}]}}, True),
        ({"body": {"$or": [{"kind": ["refund"]}, {"total": [{"numeric": [">", 50]}]}]}}, False),
        ({"attributes": {"SenderId": [{"prefix": "AIDA"}]}}, True),
        ({"messageAttributes": {"tenant": {"stringValue": ["acme"]}}}, True),
        ({"messageAttributes": {"tenant": {"stringValue": ["other"]}}}, False),
    ],
)
def test_each_rule_of_the_pattern_language(pattern: dict[str, Any], expected: bool) -> None:
    assert _matches(pattern, _record(ORDER)) is expected


def test_a_body_that_is_not_a_json_object_is_matched_as_its_text() -> None:
    assert _matches({"body": [{"prefix": "hello"}]}, _record("hello world"))
    assert not _matches({"body": {"kind": ["order"]}}, _record("hello world"))
    assert _matches({"body": ["[1, 2]"]}, _record("[1, 2]"))


def test_a_record_matching_any_of_the_filters_passes() -> None:
    filters = parse_filters(
        {"Filters": [{"Pattern": '{"body": {"kind": ["refund"]}}'}, {"Pattern": '{"body": {"kind": ["order"]}}'}]}
    )
    assert matches_any(filters, _record(ORDER))
    assert not matches_any(filters, _record({"kind": "void"}))
    assert matches_any((), _record("anything"))


@pytest.mark.parametrize(
    ("criteria", "problem"),
    [
        ({}, "FilterCriteria needs Filters"),
        ({"Filters": [{"Pattern": "{not json"}]}, "filter 1: Pattern is not JSON"),
        ({"Filters": [{"Pattern": '["a"]'}]}, "filter 1: Pattern must be a JSON object"),
        ({"Filters": [{"Pattern": '{"body": "order"}'}]}, "a field's rule is a list of values"),
        ({"Filters": [{"Pattern": '{"body": {"kind": [{"wildcard": "o*"}]}}'}]}, "'wildcard' is not an operator"),
        ({"Filters": [{"Pattern": '{"body": {"n": [{"numeric": [">", "1"]}]}}'}]}, "numeric takes operators"),
        ({"Filters": [{"Pattern": '{"body": {"$or": [{"kind": ["a"]}]}}'}]}, "$or takes a list of two or more"),
    ],
)
def test_a_pattern_outside_the_language_is_refused_naming_the_filter(criteria: dict[str, Any], problem: str) -> None:
    with pytest.raises(FilterError, match=problem.replace("$", r"\$").replace("(", r"\(")):
        parse_filters(criteria)


def test_a_dropped_record_is_deleted_whether_the_rest_of_its_batch_succeeded_or_failed() -> None:
    """Lambda deletes what its filters drop apart from the invocation: so does the verdict, counted as filtered."""
    import structlog

    from worker.message import QueueMessage
    from worker.model import Outcome, Result
    from worker.runtime.verdict import of_message

    message = QueueMessage(
        id="m-1", body=b"x", dequeue_count=1, insertion_time=None, expiration_time=None, time_next_visible=None
    )
    message.drop("matched none of the event source's FilterCriteria")
    log = structlog.get_logger("test")
    for outcome in (Outcome.SUCCEEDED, Outcome.FAILED):
        assert of_message(message, Result(outcome, "the batch"), log) == Result(
            Outcome.SUCCEEDED, "matched none of the event source's FilterCriteria", filtered=True
        )
    assert of_message(message, Result(Outcome.RELEASE, "stopping"), log).outcome is Outcome.RELEASE

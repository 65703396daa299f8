"""``sqs://`` connection strings, and the names of a FIFO queue's poison queue."""

from __future__ import annotations

import pytest

from worker.backends.failures import ConnectionStringError
from worker.backends.registry import SQS, connection_problem
from worker.backends.sqs.connection import SqsConnection, parse_sqs_connection
from worker.runtime.poison import is_poison_queue, poison_queue, source_queue


def test_a_region_or_a_region_and_an_endpoint_name_the_service() -> None:
    assert parse_sqs_connection("sqs://?region=us-east-1") == SqsConnection(region="us-east-1")
    assert parse_sqs_connection(
        "sqs://?region=eu-west-1&endpoint=http://127.0.0.1:5000&profile=dev&poison=service"
    ) == SqsConnection(region="eu-west-1", endpoint="http://127.0.0.1:5000", profile="dev", poison="service")


def test_every_wrong_key_is_named_at_once() -> None:
    with pytest.raises(ConnectionStringError) as refused:
        parse_sqs_connection("sqs://?region=nowhere&endpoint=ftp://x&poison=both&longPoll=21&key=1")
    for problem in ("unknown keys key", "region=<region>", "endpoint must be", "poison must be", "longPoll must be"):
        assert problem in str(refused.value)


def test_a_connection_string_is_checked_before_anything_opens(tmp_path: object) -> None:
    assert connection_problem("sqs://?region=us-east-1", tmp_path) is None  # type: ignore[arg-type]
    assert "region" in (connection_problem("sqs://?endpoint=http://127.0.0.1:1", tmp_path) or "")  # type: ignore[arg-type]


def test_without_poison_each_queue_decides_and_the_host_may_keep_poison() -> None:
    assert parse_sqs_connection("sqs://?region=eu-west-1").poison == "auto"
    assert SQS.host_poison("sqs://?region=eu-west-1") and SQS.host_poison("sqs://?region=eu-west-1&poison=host")
    assert not SQS.host_poison("sqs://?region=eu-west-1&poison=service")
    with pytest.raises(ConnectionStringError, match="poison must be one of host, service"):
        parse_sqs_connection("sqs://?region=eu-west-1&poison=auto")


def test_a_fifo_queues_poison_queue_is_fifo_too() -> None:
    assert poison_queue("orders.fifo") == "orders-poison.fifo"
    assert poison_queue("orders") == "orders-poison"
    assert is_poison_queue("orders-poison.fifo") and not is_poison_queue("orders.fifo")
    assert source_queue("orders-poison.fifo") == "orders.fifo" and source_queue("orders-poison") == "orders"

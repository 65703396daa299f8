"""The worker's log lines: one write each, so processes sharing a stderr never run two lines into one."""

from __future__ import annotations

import io
import json
import logging

import structlog

from worker.observability.logs import configure_logging


class Writes(io.StringIO):
    """A stream that keeps each write apart, as the file descriptor under a shared stderr sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_each_log_line_is_one_write_ending_in_its_newline() -> None:
    stream = Writes()
    try:
        configure_logging("INFO", json_lines=True, stream=stream)
        structlog.get_logger("tests").info("host started", pid=1)
        structlog.get_logger("tests").info("queue storage opened")
    finally:
        configure_logging("INFO", json_lines=False)
    assert len(stream.calls) == 2, stream.calls
    assert all(call.endswith("\n") and call.count("\n") == 1 for call in stream.calls), stream.calls
    assert json.loads(stream.calls[0])["event"] == "host started"


def test_fields_a_handler_passes_with_extra_are_in_its_json_line() -> None:
    stream = Writes()
    try:
        configure_logging("INFO", json_lines=True, stream=stream)
        logging.getLogger("orders").info(
            "order placed", extra={"order_id": 7, "customer": "contoso", "link": "https://a.example/x?sig=SECRET"}
        )
    finally:
        configure_logging("INFO", json_lines=False)
    [line] = [json.loads(call) for call in stream.calls]
    assert (line["event"], line["order_id"], line["customer"]) == ("order placed", 7, "contoso")
    assert "SECRET" not in line["link"]  # extra fields are redacted as the rest of the line
    assert "args" not in line and "msg" not in line and "taskName" not in line  # the record's own attributes are not

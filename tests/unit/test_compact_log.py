"""The compact log a terminal gets: chosen only there (or when asked), redacted whole, tracebacks of the app's frames."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
from collections.abc import Iterator

import pytest
import structlog

from worker.observability.compact import app_traceback, host_frame
from worker.observability.logs import configure_logging


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A stream the log writes compact lines to; the suite's logging is put back after."""
    written = io.StringIO()
    configure_logging("DEBUG", stream=written, log_format="compact", max_dequeue_count=5)
    try:
        yield written
    finally:
        configure_logging("INFO", json_lines=False)


def lines(stream: io.StringIO) -> list[str]:
    """What was written, less each line's time."""
    return [line[9:] if line[:2].isdigit() else line for line in stream.getvalue().splitlines()]


def test_auto_is_compact_on_a_terminal_and_json_lines_elsewhere() -> None:
    terminal, other_side = os.openpty()
    on_terminal = open(other_side, "w", encoding="utf-8")  # noqa: SIM115 -- closed below
    in_file = io.StringIO()
    try:
        configure_logging("INFO", stream=on_terminal)
        structlog.get_logger("worker.runtime.host").info("host started", pid=7, functions=1, burst=False)
        configure_logging("INFO", stream=in_file)
        structlog.get_logger("worker.runtime.host").info("host started", pid=7, functions=1, burst=False)
        configure_logging("INFO", json_lines=False, stream=in_file, log_format="compact")  # json_lines wins
        structlog.get_logger("worker.runtime.host").info("host started", pid=7, functions=1, burst=False)
    finally:
        on_terminal.close()
        configure_logging("INFO", json_lines=False)
    shown = os.read(terminal, 4096).decode()
    os.close(terminal)
    assert shown.endswith("host started (pid 7): 1 function\r\n"), shown
    json_line, plain = in_file.getvalue().splitlines()
    assert json.loads(json_line)["event"] == "host started"
    assert "[info     ] host started" in plain


def test_a_line_is_redacted_whole_and_its_control_characters_written_out(stream: io.StringIO) -> None:
    # A name and a value apart are nothing to either's redaction; the compact line puts them together.
    structlog.get_logger("app").info("signing in", password="hunter2-but-longer")
    logging.getLogger("app").warning("got \x1b[2J%s", " from https://a.example/x?sig=SECRETSIG", extra={"n": 1})

    assert lines(stream) == [
        "signing in password=***",
        r"WARNING got \x1b[2J from https://a.example/x?sig=*** n=1",
    ]


def test_a_failure_is_said_once_in_full_then_in_one_line() -> None:
    """Without an Executing line (invocationLogs off), the failure is its invocation's line, written at once."""
    written = io.StringIO()
    configure_logging("INFO", stream=written, log_format="compact", max_dequeue_count=3)
    log = structlog.get_logger("worker.runtime.dispatcher").bind(
        function="orders", invocation_id="i", message_id="0123456789abcdef", dequeue_count=1
    )
    try:
        for attempt in (1, 2):
            try:
                raise ValueError("no such order")
            except ValueError:
                log.bind(dequeue_count=attempt).exception("handler failed", error="ValueError: no such order")
    finally:
        configure_logging("INFO", json_lines=False)

    first, *trace, second = lines(written)
    assert first == "orders 01234567 failed, attempt 1/3: ValueError: no such order"
    assert trace[0] == "Traceback (most recent call last):" and trace[-1] == "ValueError: no such order"
    assert second == "orders 01234567 failed, attempt 2/3: ValueError: no such order"


def test_routine_lines_are_left_out_and_an_invocation_is_one_line(stream: io.StringIO) -> None:
    host = structlog.get_logger("worker.runtime.host")
    host.info("queue storage opened", connection="AzureWebJobsStorage", storage="embedded queue q.sqlite3")
    host.info("function loaded", function="orders", queue="orders-in", handler="sync", max_dequeue_count=2)
    host.info("host started", pid=7, functions=1, burst=True)
    invocation = structlog.get_logger("worker.runtime.dispatcher").bind(
        function="orders", invocation_id="i", message_id="0123456789abcdef", dequeue_count=2
    )
    invocation.info("Executing", reason="new queue message detected", messages=1)
    invocation.info("Executed", outcome="succeeded", duration_ms=1234.5)
    host.info("host stopped", seconds=1.0, received=1)

    assert lines(stream) == [
        "host started (pid 7, burst): orders on queue orders-in; embedded queue q.sqlite3",
        "orders 01234567 succeeded 1.23 s, attempt 2/2",  # the function's own maxDequeueCount
    ]


def failing() -> None:
    async def inner() -> None:
        try:
            raise KeyError("first")
        except KeyError as exc:
            raise ValueError("second") from exc

    asyncio.run(inner())


def test_an_app_traceback_hides_the_hosts_frames_and_keeps_the_cause() -> None:
    with pytest.raises(ValueError) as raised:
        failing()

    text = app_traceback(raised.value)

    assert f"{os.sep}asyncio{os.sep}" not in text and re.search(r"^  … \d+ host frames hidden$", text, re.M)
    assert text.index("KeyError: 'first'") < text.index("direct cause") < text.index("ValueError: second")
    assert "in failing" in text and "in inner" in text
    assert host_frame(asyncio.__file__) and not host_frame(__file__)

"""A log stream that refuses lines (a closed descriptor, a reader gone, a full disk) drops and counts them, and no
log call raises: a log line is written from completions, lease renewals and signal handling, which must go on."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

import pytest
import structlog
from prometheus_client import generate_latest

from worker.observability import logs
from worker.observability.metrics import Metrics, format_summary


def _closed_descriptor() -> tuple[TextIO, Callable[[], None]]:
    read, write = os.pipe()
    stream = open(write, "w", closefd=False)  # noqa: SIM115 -- closed below
    os.close(read)
    os.close(write)  # EBADF from now on
    return stream, lambda: _close_quietly(stream)


def _reader_gone() -> tuple[TextIO, Callable[[], None]]:
    read, write = os.pipe()
    os.close(read)  # EPIPE from now on
    stream = open(write, "w")  # noqa: SIM115 -- closed below
    return stream, lambda: _close_quietly(stream)


def _full_disk() -> tuple[TextIO, Callable[[], None]]:
    stream = open("/dev/full", "w")  # noqa: SIM115 -- closed below; ENOSPC on every write
    return stream, lambda: _close_quietly(stream)


def _close_quietly(stream: TextIO) -> None:
    try:
        stream.close()  # flushes what the failed writes left in its buffer, and fails again
    except OSError:
        pass


SINKS = {"closed descriptor": _closed_descriptor, "reader gone": _reader_gone, "full disk": _full_disk}


@contextmanager
def logging_to(stream: TextIO) -> Iterator[None]:
    try:
        logs.configure_logging("INFO", json_lines=True, stream=stream)
        yield
    finally:
        logs.configure_logging("INFO", json_lines=False)


@pytest.mark.parametrize("sink", list(SINKS))
def test_lines_a_stream_refuses_are_dropped_counted_and_never_raised(sink: str) -> None:
    stream, close = SINKS[sink]()
    try:
        with logging_to(stream):
            structlog.get_logger("worker.runtime.completion").info("Executed", succeeded=True)
            logging.getLogger("azure.storage").warning("a library's line")
            logs.always("worker.runtime.host", "host started", pid=os.getpid())
            assert logs.dropped_lines() == 3
            exposition = generate_latest(Metrics().registry).decode()
            assert "worker_log_lines_dropped_total 3.0" in exposition.splitlines()
            assert "log lines dropped: 3 (the log stream refused them)" in format_summary(Metrics(), 1.0)
    finally:
        close()


def test_a_stream_that_works_drops_nothing_and_the_summary_says_nothing_of_it() -> None:
    read, write = os.pipe()
    with open(read, "rb") as reader, open(write, "w") as stream, logging_to(stream):
        structlog.get_logger("worker.runtime.completion").info("Executed")
        assert reader.read1(4096).startswith(b"{")
        assert logs.dropped_lines() == 0
        assert "dropped" not in format_summary(Metrics(), 1.0)
        assert "worker_log_lines_dropped_total 0.0" in generate_latest(Metrics().registry).decode().splitlines()

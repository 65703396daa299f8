"""worker.observability.logs: account keys and SAS signatures never reach a log line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from tests.azurite import KEY
from worker.observability.logs import configure_logging, redact

SIG = "Zm9vYmFy%2Bc2lnbmF0dXJl%3D"
SAS = f"sv=2022-11-02&ss=q&srt=sco&sp=rwdlacup&se=2030-01-01T00%3A00%3A00Z&sig={SIG}"


# -- redact --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};QueueEndpoint=http://h/a;",
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=***;QueueEndpoint=http://h/a;",
        ),
        (f"AccountName=a;AccountKey={KEY}", "AccountName=a;AccountKey=***"),
        (f"accountkey={KEY}", "accountkey=***"),
        (f"ACCOUNTKEY={KEY} and more", "ACCOUNTKEY=*** and more"),
        (
            f"QueueEndpoint=https://a.queue.core.windows.net;SharedAccessSignature={SAS}",
            "QueueEndpoint=https://a.queue.core.windows.net;SharedAccessSignature=***"
            "&ss=q&srt=sco&sp=rwdlacup&se=2030-01-01T00%3A00%3A00Z&sig=***",
        ),
        (
            f"sharedaccesssignature=?{SAS};QueueEndpoint=x",
            "sharedaccesssignature=***&ss=q&srt=sco&sp=rwdlacup&se=2030-01-01T00%3A00%3A00Z&sig=***;QueueEndpoint=x",
        ),
        (
            f"GET https://a.queue.core.windows.net/work/messages?{SAS}&numofmessages=1 failed",
            "GET https://a.queue.core.windows.net/work/messages?sv=2022-11-02&ss=q&srt=sco&sp=rwdlacup"
            "&se=2030-01-01T00%3A00%3A00Z&sig=***&numofmessages=1 failed",
        ),
        (f"https://a/q?SIG={SIG}", "https://a/q?SIG=***"),
        (f"error: 'AccountKey={KEY}'", "error: 'AccountKey=***'"),
        (f'{{"conn": "AccountKey={KEY}"}}', '{"conn": "AccountKey=***"}'),
        (f"AccountName=a; AccountKey = {KEY}; x", "AccountName=a; AccountKey=***; x"),
    ],
)
def test_redact_replaces_keys_and_signatures(text: str, expected: str) -> None:
    redacted = redact(text)
    assert redacted == expected
    assert KEY not in redacted and SIG not in redacted


@pytest.mark.parametrize(
    "text",
    [
        "",
        "message 3f1c moved to the poison queue after 5 attempts",
        "Azure Storage http://127.0.0.1:10001/devstoreaccount1 (account key)",
        "DefaultEndpointsProtocol=https;AccountName=acct;EndpointSuffix=core.windows.net",
        "https://a.queue.core.windows.net/work/messages?numofmessages=32&visibilitytimeout=600",
        "signature check passed; AccountName=acct; the key is rotated monthly",
        "sv=2022-11-02&ss=q&sp=r",
    ],
)
def test_redact_leaves_other_text_alone(text: str) -> None:
    assert redact(text) == text


def test_redact_every_occurrence() -> None:
    text = f"first AccountKey={KEY}; second AccountKey={KEY}; sig={SIG} sig={SIG}"
    assert redact(text) == "first AccountKey=***; second AccountKey=***; sig=*** sig=***"


# -- log lines -------------------------------------------------------------------------------------------------------


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """Logging sent to a buffer for one test; then back to what the session fixture set (tests/conftest.py)."""
    stream = io.StringIO()
    configure_logging("DEBUG", json_lines=True, stream=stream)
    try:
        yield stream
    finally:
        configure_logging("INFO", json_lines=False)


def _connection_string() -> str:
    return f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};QueueEndpoint=http://h/a;"


def test_structlog_string_values_and_event_are_redacted(log_stream: io.StringIO) -> None:
    log = structlog.get_logger("tests.redaction")
    log.warning(f"could not open {_connection_string()}", connection=_connection_string(), url=f"https://a/q?{SAS}")
    output = log_stream.getvalue()
    assert output.strip(), "nothing was logged"
    assert KEY not in output and SIG not in output, output
    line = json.loads(output.strip().splitlines()[-1])
    assert line["connection"] == redact(_connection_string())
    assert "AccountKey=***" in line["event"]
    assert line["url"].endswith("sig=***")


def test_structlog_exception_traceback_is_redacted(log_stream: io.StringIO) -> None:
    log = structlog.get_logger("tests.redaction")
    try:
        raise RuntimeError(f"cannot connect with {_connection_string()}")
    except RuntimeError:
        log.exception("storage call failed")
    output = log_stream.getvalue()
    assert "RuntimeError" in output and "AccountKey=***" in output, output
    assert KEY not in output, output


def test_structlog_values_that_are_not_strings_are_redacted(log_stream: io.StringIO) -> None:
    """Dicts, lists and objects are rendered after the processors run: their text must not carry a key either."""

    class Settings:
        def __repr__(self) -> str:
            return f"Settings(connection={_connection_string()!r})"

    log = structlog.get_logger("tests.redaction")
    log.info(
        "settings read",
        settings={"AzureWebJobsStorage": _connection_string()},
        urls=[f"https://a/q?{SAS}"],
        pair=("x", f"AccountKey={KEY}"),
        error=RuntimeError(f"AccountKey={KEY}"),
        obj=Settings(),
    )
    output = log_stream.getvalue()
    assert "settings read" in output, output
    assert KEY not in output and SIG not in output, output
    line = json.loads(output.strip().splitlines()[-1])
    assert line["settings"] == {"AzureWebJobsStorage": redact(_connection_string())}


def test_stdlib_logging_line_is_redacted(log_stream: io.StringIO) -> None:
    logging.getLogger("azure.storage.queue").warning("request failed for %s", f"https://a/q?{SAS}")
    logging.getLogger("some.library").info("connecting with %s", _connection_string())
    output = log_stream.getvalue()
    assert "request failed for https://a/q?" in output and "connecting with" in output, output
    assert KEY not in output and SIG not in output, output
    assert "AccountKey=***" in output and "sig=***" in output


def test_stdlib_logging_exception_traceback_is_redacted(log_stream: io.StringIO) -> None:
    try:
        raise ValueError(f"bad connection string {_connection_string()}")
    except ValueError:
        logging.getLogger("some.library").exception("failed")
    output = log_stream.getvalue()
    assert "ValueError" in output and "AccountKey=***" in output, output
    assert KEY not in output, output


def test_logging_goes_back_to_the_session_configuration_afterwards() -> None:
    """The fixture's teardown must leave the root logger on one stderr handler, as other tests expect."""
    stream = io.StringIO()
    configure_logging("DEBUG", json_lines=True, stream=stream)
    configure_logging("INFO", json_lines=False)
    logging.getLogger("some.library").warning("after restore")
    assert stream.getvalue() == ""
    root = logging.getLogger()
    assert len(root.handlers) == 1 and root.level == logging.INFO

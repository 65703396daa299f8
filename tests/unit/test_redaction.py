"""worker.observability.redaction and the log: no secret of a shape the worker knows reaches a log line, and the
SDKs' own loggers stay at WARNING unless the settings name them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import structlog

from tests.azurite import KEY
from tests.cli import run_cli
from worker.observability import redaction
from worker.observability.logs import QUIET_SDKS, configure_logging, redact
from worker.ops import cli

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


# -- every shape of secret the worker is given ------------------------------------------------------------------------

#: What botocore logs at DEBUG for each request (its AWSPreparedRequest), with a session's credentials.
SESSION_TOKEN = "FwoGZXIvYXdzEJr//////////wEaDCanaryTokenOfTheSession"
ACCESS_KEY_ID = "ASIAQCANARY0KEYID7XZ"
SIGNATURE = "0c8a7f3e2b1d4c5a6f7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5e6d7c8b9a"
BOTOCORE_REQUEST = (
    "Sending http request: <AWSPreparedRequest stream_output=False, method=POST, url=https://sqs.us-east-1.amazonaws"
    ".com/, headers={'X-Amz-Target': b'AmazonSQS.ReceiveMessage', 'X-Amz-Date': b'20261206T052000Z', "
    f"'X-Amz-Security-Token': b'{SESSION_TOKEN}', 'Authorization': b'AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}"
    "/20261206/us-east-1/sqs/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, "
    f"Signature={SIGNATURE}', 'Content-Length': '93'}}>"
)
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAcanaryKeyMaterial\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "secrets"),
    [
        (BOTOCORE_REQUEST, [SESSION_TOKEN, ACCESS_KEY_ID, SIGNATURE]),
        (f"Signature:\n{SIGNATURE}", [SIGNATURE]),  # botocore.auth's own line
        (f"x-amz-security-token:{SESSION_TOKEN}\nx-amz-target:AmazonSQS.GetQueueUrl", [SESSION_TOKEN]),  # canonical
        (
            f"GET /queue?X-Amz-Credential={ACCESS_KEY_ID}%2F20261206&X-Amz-Security-Token={SESSION_TOKEN}"
            f"&X-Amz-Signature={SIGNATURE}",
            [SESSION_TOKEN, ACCESS_KEY_ID, SIGNATURE],
        ),
        (
            f"aws_access_key_id = AKIACANARY0KEYID7XYZ\naws_session_token={SESSION_TOKEN}",
            ["AKIACANARY0KEYID7XYZ", SESSION_TOKEN],
        ),
        ("Authorization: Bearer canary-endpoint-token-0123456789\r\nHost: x", ["canary-endpoint-token-0123456789"]),
        ("sc://spark.example.com:443/;token=CanarySparkToken;user_id=me", ["CanarySparkToken"]),
        ("QueueEndpoint=https://me:CanaryPassw0rd@queue.example/acct;AccountName=acct", ["CanaryPassw0rd"]),
        (f"key_content={PEM}", ["MIIEpAIBAAKCAQEAcanaryKeyMaterial"]),
        (repr({"key_content": PEM, "pass_phrase": "CanaryPhrase"}), ["MIIEpAIBAAKCAQEAcanaryKeyMaterial", "CanaryPhrase"]),
        ('{"password": "CanaryPassw0rd", "user": "me"}', ["CanaryPassw0rd"]),
        (
            "grant_type=refresh_token&refresh_token=CanaryRefresh&client_secret=CanaryClientSecret",
            ["CanaryRefresh", "CanaryClientSecret"],
        ),
        (f"{PEM[:60]}", ["MIIEpAIBAAKCAQEAcanary"]),
        (
            "session token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.CanaryJwtSignature_-0 expired",
            ["eyJzdWIiOiJjYW5hcnkifQ", "CanaryJwtSignature_-0"],
        ),
    ],
)
def test_redact_hides_every_shape_of_secret(text: str, secrets: list[str]) -> None:
    redacted = redact(text)
    for secret in secrets:
        assert secret not in redacted, redacted
    assert "***" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "poison actions need the endpoint token: set WORKER_HTTP_TOKEN or worker.httpTokenFile",
        "sc://127.0.0.1:15002",
        "https://sqs.us-east-1.amazonaws.com/123456789012/work",
        "http://127.0.0.1:10001/devstoreaccount1/work?numofmessages=32",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ and AKIA lower akiaabcdefghijklmnop",
        "tokens=5 passed; keys 3",
        "user@example.com wrote to the queue",
    ],
)
def test_redact_leaves_text_that_only_looks_near_a_secret_alone(text: str) -> None:
    assert redact(text) == text


def test_remembered_values_are_hidden_as_they_are_and_url_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redaction, "_known", ())  # the process's, put back after
    token = "no+shape/at=all" + "x" * 16
    redaction.remember(token)
    assert redact(f"saw {token} and {quote(token, safe='')}") == "saw *** and ***"
    redaction.remember("short")  # a short value would hide ordinary words: not remembered
    assert redact("a short word") == "a short word"


def test_the_environment_secrets_are_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redaction, "_known", ())
    secret = "CanarySecretAccessKey0123456789abcdefghij"
    redaction.remember_environment({"AWS_SECRET_ACCESS_KEY": secret, "HOME": "/home/someone-long-enough"})
    assert redact(f"signing with {secret}") == "signing with ***"
    assert redact("/home/someone-long-enough") == "/home/someone-long-enough"


# -- the SDKs' own loggers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sdk", QUIET_SDKS)
@pytest.mark.parametrize(
    "settings",
    [{"level": "DEBUG"}, {"level": None, "categories": {"default": "Debug"}}],
    ids=["--log-level DEBUG", "host.json default Debug"],
)
def test_sdk_loggers_are_held_at_warning_at_debug(sdk: str, settings: dict[str, object]) -> None:
    stream = io.StringIO()
    configure_logging(json_lines=True, stream=stream, **settings)  # type: ignore[arg-type]
    try:
        logging.getLogger(f"{sdk}.client").debug("request %s", BOTOCORE_REQUEST)
        logging.getLogger(f"{sdk}.client").info("connection pool started")
        logging.getLogger(f"{sdk}.client").warning("retrying %s", BOTOCORE_REQUEST)
        logging.getLogger("worker.test").debug("the host's own debug line")
    finally:
        configure_logging("INFO", json_lines=False)
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert len(events) == 2, events
    assert events[0].startswith("retrying") and SESSION_TOKEN not in events[0]
    assert events[1] == "the host's own debug line"


def test_an_sdk_logger_named_in_the_settings_logs_at_its_level_redacted() -> None:
    stream = io.StringIO()
    configure_logging(None, json_lines=True, stream=stream, categories={"default": "Information", "botocore": "Debug"})
    try:
        logging.getLogger("botocore.endpoint").debug("%s", BOTOCORE_REQUEST)
        logging.getLogger("urllib3.connectionpool").debug("not named: held back")
    finally:
        configure_logging("INFO", json_lines=False)
    output = stream.getvalue()
    assert "Sending http request" in output and "held back" not in output, output
    for secret in (SESSION_TOKEN, ACCESS_KEY_ID, SIGNATURE):
        assert secret not in output


# -- the command's messages -------------------------------------------------------------------------------------------


def test_a_usage_error_quoting_a_secret_is_redacted(tmp_path: Path) -> None:
    ran = run_cli(tmp_path, "run", "--log-level", f"AccountKey={KEY}")
    assert ran.returncode == 2
    assert "invalid choice: 'AccountKey=***'" in ran.stderr and KEY not in ran.stderr, ran.stderr


def test_a_traceback_no_command_expected_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        raise ValueError(f"the SDK quotes its connection string: AccountKey={KEY}; {BOTOCORE_REQUEST}")
    except ValueError as exc:
        cli._redacted_traceback(type(exc), exc, exc.__traceback__)
    written = capsys.readouterr().err
    assert written.startswith("Traceback") and "ValueError: the SDK quotes" in written
    for secret in (KEY, SESSION_TOKEN, ACCESS_KEY_ID, SIGNATURE):
        assert secret not in written


def test_every_secret_name_holds_a_word_that_starts_the_scan() -> None:
    """The scan is skipped for text holding no trigger word: a name added without one would never be redacted."""
    for name in redaction._NAMED.split("|"):
        assert any(trigger in name.lower() for trigger in redaction._TRIGGERS), name
        assert redact(f"{name}=CanaryValue0123") == f"{name}=***"

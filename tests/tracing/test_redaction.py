"""Spans leave the worker redacted: a secret in a span's name, status, attributes or events never reaches the trace
backend (often a third party's), whoever put it there: a handler's exception, a middleware, a library."""

from __future__ import annotations

import pytest
from opentelemetry.trace import Status, StatusCode

from tests.tracing.receiver import Receiver
from worker.observability.otel import Telemetry
from worker.observability.redaction import redact

SIG = "CanarySignatureOfTheSas%2B%3D"
SAS_URL = f"https://acct.blob.core.windows.net/in/a.csv?sv=2022-11-02&sr=b&sp=r&sig={SIG}"
PASSWORD = "CanaryUrlPassw0rd"


def test_a_span_carries_no_secret_in_its_status_attributes_or_events(
    otlp_receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    telemetry = Telemetry.from_environment(["otlp"], "redaction-test")
    failure = RuntimeError(f"HTTP Error 403 for {SAS_URL} through https://me:{PASSWORD}@proxy.example:3128")
    try:
        with telemetry.tracer.start_as_current_span(f"process {SAS_URL}") as span:
            span.set_attribute("worker.reason", f"{type(failure).__name__}: {failure}")
            span.set_attribute("worker.sources", [SAS_URL, "plain"])
            span.add_event("download", {"url": SAS_URL})
            span.record_exception(failure)
            span.set_status(Status(StatusCode.ERROR, f"{type(failure).__name__}: {failure}"))
    finally:
        telemetry.shutdown()  # exports what the batch holds

    [received] = otlp_receiver.wait_for(lambda spans: len(spans) >= 1)
    shown = repr(received)
    assert SIG not in shown and PASSWORD not in shown, shown
    assert received.status == ("ERROR", redact(f"RuntimeError: {failure}"))
    assert received.attributes["worker.reason"] == redact(f"RuntimeError: {failure}")
    assert received.attributes["worker.sources"] == [redact(SAS_URL), "plain"]
    events = dict(received.events)
    assert events["exception"]["exception.message"] == redact(str(failure))
    assert "sig=***" in events["download"]["url"]
    assert received.name == redact(f"process {SAS_URL}")

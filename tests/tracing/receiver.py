"""A real OTLP/HTTP trace receiver: ``POST /v1/traces`` with an ``ExportTraceServiceRequest`` in protobuf.

It decodes what the SDK's exporter sends with opentelemetry-proto's own
classes, keeps every span in a plain form the tests compare, and answers as a
collector does (200 with an empty ``ExportTraceServiceResponse``). Anything
else is answered 404 or 400, so that an exporter sending elsewhere or
something else fails the test instead of passing unseen.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from tests.support import poll

#: The span kinds by their protobuf number, named as the SDK's ``SpanKind``.
KINDS = {
    ProtoSpan.SPAN_KIND_INTERNAL: "INTERNAL",
    ProtoSpan.SPAN_KIND_SERVER: "SERVER",
    ProtoSpan.SPAN_KIND_CLIENT: "CLIENT",
    ProtoSpan.SPAN_KIND_PRODUCER: "PRODUCER",
    ProtoSpan.SPAN_KIND_CONSUMER: "CONSUMER",
}
#: Status codes by number, named as the SDK's ``StatusCode``.
STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


@dataclass(frozen=True)
class Received:
    """One span as the receiver got it: ids as lowercase hex, as in a W3C traceparent."""

    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    #: (trace id, span id) of each link.
    links: tuple[tuple[str, str], ...]
    attributes: dict[str, Any]
    #: The status code's name (UNSET, OK, ERROR) and its message.
    status: tuple[str, str]
    events: tuple[tuple[str, dict[str, Any]], ...]
    resource: dict[str, Any] = field(compare=False)
    scope: str = ""


def decode(body: bytes) -> list[Received]:
    """Every span of one export request."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    Received(
                        name=span.name,
                        kind=KINDS[span.kind],
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                        attributes=_attributes(span.attributes),
                        status=(STATUS[span.status.code], span.status.message),
                        events=tuple((event.name, _attributes(event.attributes)) for event in span.events),
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )
    return found


class Receiver:
    """The server on a free loopback port, in a thread; :attr:`endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT takes."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(400, "expected application/x-protobuf")
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver.spans.extend(spans)
                    receiver.requests += 1
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                """Quiet: the test's own assertions say what was received."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, enough: Callable[[list[Received]], bool], timeout: float = 30, what: str = "spans") -> list[Received]:
        """Every span received, once ``enough`` says they suffice; fails with what came at the deadline."""
        try:
            return poll(lambda: spans if enough(spans := self.received()) else None, timeout, what=what)
        except AssertionError as exc:
            names = sorted(f"{s.kind} {s.name}" for s in self.received())
            raise AssertionError(f"{exc}; received: {names}") from None

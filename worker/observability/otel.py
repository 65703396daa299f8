"""OpenTelemetry's SDK as the ``OTEL_*`` variables configure it, and storage calls as spans.

Imported only when traces are asked for (the ``otel`` extra). Nothing here is global.
A :class:`Telemetry` owns the provider, exporters and propagator, and flushes its spans at stop.
:class:`TracedQueues` wraps any backend: a PRODUCER span per put, CLIENT spans for receives, deletes, updates.
A put writes its trace context into message properties where the backend has them, unless it has one.
Renewals and empty polls make no span: they would bury the invocations.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from worker.backends.queues import QueueBackend, RawMessage, Receipt
from worker.observability.redaction import redact, redact_value

#: The instrumentation scope's name on every span.
SCOPE = "queueworker"


class Telemetry:
    """One tracer provider with its exporters, a tracer, and the W3C propagator; shut down once at stop."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE)
        self.propagator = TraceContextTextMapPropagator()

    @classmethod
    def from_environment(cls, exporters: Sequence[str], service: str) -> Telemetry:
        """The provider the variables describe: resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, else
        ``service``), sampler (``OTEL_TRACES_SAMPLER``), one batch processor (``OTEL_BSP_*``) for each of
        ``exporters`` (``otlp``, ``console``), which read their own variables too."""
        resource = Resource.create()
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: service}))
        provider = TracerProvider(resource=resource)
        for name in exporters:
            provider.add_span_processor(BatchSpanProcessor(RedactingExporter(_exporter(name))))
        return cls(provider)

    def shutdown(self) -> None:
        """Export what is still held and stop the exporters (the batch processor flushes on shutdown)."""
        self.provider.shutdown()

    def traced(self, backend: QueueBackend) -> QueueBackend:
        """``backend`` with its calls as spans and trace context written into what it puts."""
        return TracedQueues(backend, self)

    def inject(self, span: Span) -> dict[str, str]:
        """The W3C trace context of ``span`` as message properties (``traceparent``, ``tracestate``)."""
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=trace.set_span_in_context(span))
        return carrier

    def extract(self, properties: Mapping[str, str]) -> SpanContext | None:
        """The producer's span context carried in a message's properties, or None."""
        if "traceparent" not in properties:
            return None
        found = trace.get_current_span(self.propagator.extract(properties)).get_span_context()
        return found if found.is_valid else None

    def links(self, messages: list[RawMessage]) -> list[Link]:
        """A link to each message's producer, where it carried one."""
        return [Link(found) for message in messages if (found := self.extract(message.properties)) is not None]


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout, compression: OTEL_EXPORTER_OTLP_[TRACES_]*


class RedactingExporter(SpanExporter):
    """An exporter that sends each span with its name, status, attributes and events through the redaction.

    Why at the exporter: a span's text comes from everywhere (a handler's exception as ``exception.message`` and the
    status, a middleware's attributes, a library's instrumentation), and the trace backend is often a third party's;
    here every span passes, in the batch processor's thread, off the path of the messages.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([_redacted(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _redacted(span: ReadableSpan) -> ReadableSpan:
    """A copy of ``span`` with no secret in its text (the span itself, ended, cannot be changed)."""
    status = span.status
    if status.description:
        status = Status(status.status_code, redact(status.description))
    return ReadableSpan(
        name=redact(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_attributes(span.attributes),
        events=[Event(event.name, _attributes(event.attributes), event.timestamp) for event in span.events],
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: redact_value(value) for key, value in (attributes or {}).items()}


def messaging_attributes(system: str, queue: str, operation: str, operation_type: str) -> dict[str, Any]:
    """The messaging semantic conventions' attributes every span about ``queue`` has."""
    return {
        "messaging.system": system,
        "messaging.destination.name": queue,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation_type,
    }


class TracedQueues:
    """A queue backend whose puts, non-empty receives, and deletes and updates inside a span are spans of their own.

    Everything else (limits, capabilities, counts, peeks, a service's dead-letter calls) is the wrapped backend's.
    """

    def __init__(self, inner: QueueBackend, telemetry: Telemetry) -> None:
        self.inner = inner
        self.telemetry = telemetry
        self.system = inner.messaging_system

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"TracedQueues({self.inner!r})"

    @contextmanager
    def _span(self, operation: str, queue: str, kind: SpanKind, operation_type: str, **attributes: Any) -> Iterator[Span]:
        """A span ``<operation> <queue>`` around one call; a failure is its exception event and error status."""
        span = self.telemetry.tracer.start_span(
            f"{operation} {queue}",
            kind=kind,
            attributes={**messaging_attributes(self.system, queue, operation, operation_type), **attributes},
        )
        with trace.use_span(span, end_on_exit=True, record_exception=True, set_status_on_exception=True):
            yield span

    async def put(self, queue: str, content: str, **options: Any) -> RawMessage:
        with self._span("send", queue, SpanKind.PRODUCER, "send") as span:
            if self.inner.capabilities.message_properties:
                given = options.get("properties") or {}
                # A put that carries a trace context already (a poison message requeued by the tools) keeps it: the
                # message's trace goes on from its producer, not from the put that moved it back.
                options["properties"] = given if "traceparent" in given else {**given, **self.telemetry.inject(span)}
            sent = await self.inner.put(queue, content, **options)
            span.set_attribute("messaging.message.id", sent.id)
            return sent

    async def receive(self, queue: str, max_messages: int, visibility_timeout: float, **options: Any) -> list[RawMessage]:
        began = time.time_ns()
        try:
            taken = await self.inner.receive(queue, max_messages, visibility_timeout, **options)
        except Exception as exc:
            self._received(began, queue, exc=exc)
            raise
        if taken:
            self._received(began, queue, count=len(taken))
        return taken

    def _received(self, began: int, queue: str, *, count: int = 0, exc: BaseException | None = None) -> None:
        """A receive recorded once its answer is known (only those that took messages, or failed): a trace of its own,
        started when the call was."""
        span = self.telemetry.tracer.start_span(
            f"receive {queue}",
            kind=SpanKind.CLIENT,
            start_time=began,
            context=otel_context.Context(),
            attributes={
                **messaging_attributes(self.system, queue, "receive", "receive"),
                "messaging.batch.message_count": count,
            },
        )
        if exc is not None:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()

    async def update(
        self, queue: str, message_id: str, pop_receipt: str, visibility_timeout: float, content: str | None = None
    ) -> Receipt:
        # Outside an invocation's span: a renewal (or a checkpoint), which the lease scheduler makes beside them all.
        if not trace.get_current_span().get_span_context().is_valid:
            return await self.inner.update(queue, message_id, pop_receipt, visibility_timeout, content)
        with self._span(
            "update",
            queue,
            SpanKind.CLIENT,
            "settle",
            **{"messaging.message.id": message_id, "worker.visibility_timeout": visibility_timeout},
        ):
            return await self.inner.update(queue, message_id, pop_receipt, visibility_timeout, content)

    async def delete(self, queue: str, message_id: str, pop_receipt: str) -> None:
        if not trace.get_current_span().get_span_context().is_valid:
            return await self.inner.delete(queue, message_id, pop_receipt)
        with self._span("delete", queue, SpanKind.CLIENT, "settle", **{"messaging.message.id": message_id}):
            return await self.inner.delete(queue, message_id, pop_receipt)

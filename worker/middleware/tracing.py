"""A CONSUMER span per invocation, as OpenTelemetry's messaging conventions describe processing.

Imported only when traces are asked for, and added first, so all that follows runs inside the span.
One message continues its producer's trace (its ``traceparent``), so send and process stay one trace.
A batch starts a trace of its own, linked to each producer, as the conventions ask.
``context.trace_context`` is this span's. It ends in ``after_completion``, with what completion did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode

from worker.backends.queues import QueueBackend, RawMessage
from worker.context import TraceContext
from worker.invocation import Invocation
from worker.middleware import Middleware
from worker.model import Fate, Finished, Outcome, Result
from worker.observability.otel import Telemetry, messaging_attributes


@dataclass(eq=False, slots=True)
class _Open:
    """An invocation's span until its last message is completed."""

    span: Span
    remaining: int
    #: A batch's outcomes are events, one per message; a single message's are attributes of the span.
    many: bool = False
    #: The invocation, whose work tags (its Spark jobs') are read when the span ends; None when it never ran.
    invocation: Invocation | None = None


class Tracing(Middleware):
    """Starts each invocation's CONSUMER span before its handler and ends it when its messages are completed."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        #: Spans of invocations whose messages are not all completed, by invocation id.
        self._open: dict[str, _Open] = {}

    def _start(
        self, function: str, queue: str, backend: QueueBackend, raws: Sequence[RawMessage], invocation_id: str, many: bool
    ) -> Span:
        attributes: dict[str, Any] = {
            **messaging_attributes(backend.messaging_system, queue, "process", "process"),
            "faas.trigger": "pubsub",
            "faas.invocation_id": invocation_id,
            "worker.function": function,
        }
        parent = otel_context.Context()  # a root unless the producer's context says otherwise
        links = []
        if many:
            attributes["messaging.batch.message_count"] = len(raws)
            links = self.telemetry.links(list(raws))
        else:
            attributes["messaging.message.id"] = raws[0].id
            attributes["worker.message.dequeue_count"] = raws[0].dequeue_count
            if (producer := self.telemetry.extract(raws[0].properties)) is not None:
                parent = trace.set_span_in_context(NonRecordingSpan(producer), parent)
        return self.telemetry.tracer.start_span(
            f"process {queue}", context=parent, kind=SpanKind.CONSUMER, links=links, attributes=attributes
        )

    def before_invocation(self, invocation: Invocation) -> None:
        function = invocation.function
        span = self._start(
            function.name,
            function.queue_name,
            invocation.backend,
            [d.raw for d in invocation.deliveries],
            invocation.id,
            function.many,
        )
        # The invocation's own task: the handler's task or thread and completion copy or share this context.
        otel_context.attach(trace.set_span_in_context(span))
        self._open[invocation.id] = _Open(span, len(invocation.deliveries), function.many, invocation)
        if invocation.context is not None:  # as the propagator writes it into what the handler's work sends
            carried = self.telemetry.inject(span)
            invocation.context.trace_context = TraceContext(
                trace_parent=carried["traceparent"], trace_state=carried.get("tracestate", "")
            )

    def after_completion(self, item: Finished, result: Result, done: Fate) -> None:
        opened = self._open.get(item.invocation_id)
        if opened is None:  # settled before its handler could run (undecodable, past maxDequeueCount, shutdown)
            opened = _Open(self._start(item.function, item.queue, item.backend, [item.raw], item.invocation_id, False), 1)
        opened.remaining -= 1
        span = opened.span
        outcome = {
            "messaging.message.id": item.raw.id,
            "worker.outcome": result.outcome.value,
            "worker.completion": done.value,
        }
        if result.reason:
            outcome["worker.reason"] = result.reason
        if opened.many:
            span.add_event("completed", outcome)
        else:
            span.set_attributes(outcome)
        if result.exception is not None:
            span.record_exception(result.exception)
        if result.outcome is not Outcome.SUCCEEDED and result.outcome is not Outcome.RELEASE:
            span.set_status(Status(StatusCode.ERROR, result.reason))
        if opened.remaining > 0:
            return
        self._open.pop(item.invocation_id, None)
        if opened.invocation is not None and (tags := opened.invocation.work_tags):
            span.set_attribute("worker.spark.job_tags", list(tags))
        span.end()

"""An app for the tracing tests: a handler that feeds another through a queue output, and one that always fails.

``orders`` -> ``forward`` (queue output to ``shipments``) -> ``ship``, which
writes its ``context.trace_context.trace_parent`` and the current span to
``TRACE_PARENTS`` (a file, one line per invocation), so that the test compares
them with the span the receiver got. ``doomed`` always raises. ``tally`` takes its queue's messages as batches.
"""

from __future__ import annotations

import os

from worker import Context, Out, QueueMessage, WorkerApp

app = WorkerApp()


@app.function_name("forward")
@app.queue_trigger(arg_name="msg", queue_name="orders")
@app.queue_output(arg_name="out", queue_name="shipments")
def forward(msg: QueueMessage, out: Out[str]) -> None:
    out.set(f"shipment for {msg.get_body().decode()}")


@app.function_name("ship")
@app.queue_trigger(arg_name="msg", queue_name="shipments")
def ship(msg: QueueMessage, context: Context) -> None:
    """Writes its trace_parent and the OpenTelemetry API's current span as ``<trace id>-<span id>`` (``-`` where the
    API is not installed: the app runs without the extra too)."""
    try:
        from opentelemetry import trace
    except ImportError:
        current = "-"
    else:
        found = trace.get_current_span().get_span_context()
        current = f"{found.trace_id:032x}-{found.span_id:016x}"
    with open(os.environ["TRACE_PARENTS"], "a", encoding="utf-8") as file:
        file.write(f"{context.trace_context.trace_parent} {current}\n")


@app.function_name("doomed")
@app.queue_trigger(arg_name="msg", queue_name="doomed")
def doomed(msg: QueueMessage) -> None:
    raise RuntimeError(f"cannot handle {msg.get_body().decode()}")


@app.function_name("tally")
@app.queue_trigger(arg_name="batch", queue_name="tallies", cardinality="many")
def tally(batch: list[QueueMessage]) -> None:
    """Nothing to do: its span's links are what the test looks at."""

"""Traces from real processes (``worker send``, ``worker run``) exported by the SDK's OTLP/HTTP exporter to a real
receiver: one trace from a send through two handlers, the outcome of a failing message, and the flush at stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.host.processes import REPO, WorkerProcess, worker_environment, write_host_yaml
from tests.tracing.receiver import Received, Receiver

APP = "tests.apps.traced:app"
SERVICE = "traced-test"


def otel_env(receiver: Receiver, **extra: str) -> dict[str, str]:
    """Traces asked for the standard way: the receiver as the OTLP endpoint; spans exported every 100 ms."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": SERVICE,
        **extra,
    }


def send(config: Path, queue: str, body: str, env: dict[str, str]) -> str:
    """``worker send`` in a process of its own; the message id it printed."""
    sent = subprocess.run(
        [sys.executable, "-m", "worker", "send", queue, body, "--config", str(config)],
        cwd=REPO,
        env=worker_environment(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    return sent.stdout.strip()


def one(spans: list[Received], name: str) -> Received:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def tree(spans: list[Received]) -> str:
    """The spans as an indented tree by parent, for the failure message (and the notes)."""
    by_parent: dict[str, list[Received]] = {}
    for span in spans:
        by_parent.setdefault(span.parent_id, []).append(span)
    ids = {span.span_id for span in spans}
    lines: list[str] = []

    def walk(span: Received, depth: int) -> None:
        links = f" links={[s for _, s in span.links]}" if span.links else ""
        lines.append(
            f"{'  ' * depth}{span.name} [{span.kind}] trace={span.trace_id} span={span.span_id} "
            f"parent={span.parent_id or '-'}{links}"
        )
        for child in by_parent.get(span.span_id, []):
            walk(child, depth + 1)

    for root in [span for span in spans if span.parent_id not in ids]:
        walk(root, 0)
    return "\n".join(lines)


@pytest.mark.subprocess
def test_a_trace_runs_from_worker_send_through_a_handler_and_its_output_to_the_next_handler(
    tmp_path: Path, otlp_receiver: Receiver
) -> None:
    config = write_host_yaml(tmp_path)
    parents = tmp_path / "trace-parents.txt"
    env = otel_env(otlp_receiver, TRACE_PARENTS=str(parents))
    worker = WorkerProcess(config, env, app=APP).start()
    try:
        worker.wait_for_log("host started")
        message_id = send(config, "orders", "order-1", env)
        spans = otlp_receiver.wait_for(
            lambda got: {"process shipments", "delete shipments"} <= {s.name for s in got}, what="the whole trace"
        )
    finally:
        assert worker.stop() == 0

    sent = one(spans, "send orders")
    forward = one(spans, "process orders")
    output = one(spans, "send shipments")
    ship = one(spans, "process shipments")
    deletes = {name: one(spans, name) for name in ("delete orders", "delete shipments")}
    print(tree(spans))

    # One trace: worker send's PRODUCER span is the root; each CONSUMER span's parent is the PRODUCER span whose
    # context its message carried; the queue output and the deletes are children of the invocation's span.
    assert {span.trace_id for span in (sent, forward, output, ship, *deletes.values())} == {sent.trace_id}, tree(spans)
    assert (sent.kind, sent.parent_id) == ("PRODUCER", "")
    assert (forward.kind, forward.parent_id) == ("CONSUMER", sent.span_id)
    assert (output.kind, output.parent_id) == ("PRODUCER", forward.span_id)
    assert (ship.kind, ship.parent_id) == ("CONSUMER", output.span_id)
    assert (deletes["delete orders"].kind, deletes["delete orders"].parent_id) == ("CLIENT", forward.span_id)
    assert deletes["delete shipments"].parent_id == ship.span_id
    assert [span.links for span in (forward, ship)] == [(), ()]
    # The handler's context.trace_context is the span's own, sampled (the last flags' lowest bit), and the span is
    # the OpenTelemetry API's current one in the handler's thread.
    [line] = parents.read_text().splitlines()
    traceparent, current = line.split()
    assert traceparent.startswith(f"00-{ship.trace_id}-{ship.span_id}-") and int(traceparent[-2:], 16) & 1
    assert current == f"{ship.trace_id}-{ship.span_id}"

    assert sent.attributes == {
        "messaging.system": "queueworker_embedded",
        "messaging.destination.name": "orders",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.message.id": message_id,
    }
    assert {
        key: forward.attributes[key]
        for key in (
            "messaging.system",
            "messaging.destination.name",
            "messaging.message.id",
            "messaging.operation.type",
            "worker.message.dequeue_count",
            "worker.function",
            "worker.outcome",
            "worker.completion",
        )
    } == {
        "messaging.system": "queueworker_embedded",
        "messaging.destination.name": "orders",
        "messaging.message.id": message_id,
        "messaging.operation.type": "process",
        "worker.message.dequeue_count": 1,
        "worker.function": "forward",
        "worker.outcome": "succeeded",
        "worker.completion": "deleted",
    }
    assert forward.attributes["faas.invocation_id"] != ship.attributes["faas.invocation_id"]
    assert output.attributes["messaging.message.id"] == ship.attributes["messaging.message.id"]
    assert (forward.status, ship.status) == (("UNSET", ""), ("UNSET", ""))
    assert {span.resource["service.name"] for span in spans} == {SERVICE}


@pytest.mark.subprocess
def test_a_failing_message_is_retried_then_poisoned_and_its_spans_reach_the_receiver_at_stop(
    tmp_path: Path, otlp_receiver: Receiver
) -> None:
    """The batch processor waits ten minutes between exports here: only the flush at stop can deliver the spans."""
    config = write_host_yaml(tmp_path, queues={"maxDequeueCount": 2, "visibilityTimeout": "0s"})
    env = otel_env(otlp_receiver, OTEL_BSP_SCHEDULE_DELAY="600000")
    worker = WorkerProcess(config, env, app=APP).start()
    try:
        worker.wait_for_log("host started")
        message_id = send(config, "doomed", "order-2", otel_env(otlp_receiver))
        worker.wait_for_log("message moved to the poison queue")
    finally:
        assert worker.stop() == 0

    spans = otlp_receiver.received()  # the worker has exited: what it had is here already, or never comes
    attempts = sorted(
        (s for s in spans if s.name == "process doomed"), key=lambda s: s.attributes["worker.message.dequeue_count"]
    )
    # The poison queue is made on first need: the put that found it missing is a failed span of its own.
    missing, poison = sorted((s for s in spans if s.name == "send doomed-poison"), key=lambda s: s.status[0])
    print(tree(spans))

    assert [
        (
            s.attributes["messaging.message.id"],
            s.attributes["worker.message.dequeue_count"],
            s.attributes["worker.outcome"],
            s.attributes["worker.completion"],
        )
        for s in attempts
    ] == [(message_id, 1, "failed", "retried"), (message_id, 2, "failed", "poisoned")]
    reason = "RuntimeError: cannot handle order-2"
    for attempt in attempts:
        assert attempt.status == ("ERROR", reason)
        assert attempt.attributes["worker.reason"] == reason
        assert [(name, event["exception.type"], event["exception.message"]) for name, event in attempt.events] == [
            ("exception", "RuntimeError", "cannot handle order-2")
        ]
        assert "in doomed" in attempt.events[0][1]["exception.stacktrace"]
    # Both attempts continue the producer's trace; the copy to the poison queue is sent from the last attempt.
    sent = one(spans, "send doomed")
    assert [(a.trace_id, a.parent_id) for a in attempts] == [(sent.trace_id, sent.span_id)] * 2
    assert (poison.kind, poison.parent_id, poison.status) == ("PRODUCER", attempts[1].span_id, ("UNSET", ""))
    assert (missing.parent_id, missing.status) == (
        attempts[1].span_id,
        ("ERROR", "QueueNotFound: queue 'doomed-poison' does not exist"),
    )


@pytest.mark.subprocess
def test_a_batch_starts_a_trace_of_its_own_linked_to_each_messages_producer(tmp_path: Path, otlp_receiver: Receiver) -> None:
    config = write_host_yaml(tmp_path)
    env = otel_env(otlp_receiver)
    sent = [send(config, "tallies", body, env) for body in ("a", "b", "c")]  # before the worker: one receive takes all
    worker = WorkerProcess(config, env, app=APP).start()
    try:
        spans = otlp_receiver.wait_for(lambda got: sum(s.name == "delete tallies" for s in got) == 3, what="three deletes")
    finally:
        assert worker.stop() == 0

    producers = sorted(
        (s for s in spans if s.name == "send tallies"), key=lambda s: sent.index(s.attributes["messaging.message.id"])
    )
    batch = one(spans, "process tallies")
    print(tree(spans))

    assert [p.parent_id for p in producers] == ["", "", ""] and len({p.trace_id for p in producers}) == 3
    assert (batch.kind, batch.parent_id) == ("CONSUMER", "")
    assert batch.trace_id not in {p.trace_id for p in producers}
    assert sorted(batch.links) == sorted((p.trace_id, p.span_id) for p in producers)
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in batch.attributes
    assert sorted(
        (event["messaging.message.id"], event["worker.outcome"], event["worker.completion"])
        for name, event in batch.events
        if name == "completed"
    ) == sorted((message_id, "succeeded", "deleted") for message_id in sent)
    assert {s.parent_id for s in spans if s.name == "delete tallies"} == {batch.span_id}

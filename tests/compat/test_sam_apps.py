"""AWS SAM apps' SQS-triggered Lambda functions run unchanged, on moto's SQS: the tests' own app in this process,
and Powertools' published batch processing example (tests/compat/sam/powertools, unmodified) under ``worker run``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.host.processes import WorkerProcess
from tests.moto import REGION, Moto
from tests.support import apoll, poll, running
from worker.backends.registry import open_backend
from worker.backends.sqs.queues import SqsBackend
from worker.compat.loading import discover, load_app
from worker.settings.config import HostConfig

SAM = Path(__file__).resolve().parent / "sam"


def test_worker_run_in_a_folder_with_a_sam_template_runs_the_template(tmp_path: Path) -> None:
    (tmp_path / "template.yaml").write_text("Resources: {}\n", encoding="utf-8")
    assert discover(tmp_path, {}) == "template.yaml"


@pytest.fixture
def sam_environment(monkeypatch: pytest.MonkeyPatch, moto_server: Moto) -> str:
    """``AWS_SQS`` set for the test; the variables the template sets are taken away again after it, as is its
    CodeUri from the import path."""
    connection = moto_server.connection(long_poll=1)
    monkeypatch.setenv("AWS_SQS", connection)
    for variable in ("STAGE", "QUEUE_ARN"):
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return connection


async def test_a_lambda_handler_gets_lambdas_event_and_context_and_fails_only_what_it_names(
    sam_environment: str, tmp_path: Path
) -> None:
    app = load_app(str(SAM / "orders" / "template.yaml"), tmp_path)
    calls: list[dict[str, Any]] = sys.modules["sam_orders"].CALLS
    calls.clear()
    [spec] = app.functions
    assert (spec.name, spec.queue_name, spec.connection, spec.many) == ("orders", "sam-orders-test", "AWS_SQS", True)
    assert spec.settings == {"message_encoding": "none", "function_timeout": 20.0, "batch_size": 10,
                             "max_concurrency": 2, "visibility_timeout": 1.0}
    assert app.not_run == ("function orders: event Nightly of type Schedule is not run (this host runs SQS events "
                           "only)",)

    sqs = open_backend(sam_environment, tmp_path)
    assert isinstance(sqs, SqsBackend)
    await sqs.create_queue("sam-orders-test")
    ids = {body: (await sqs.put("sam-orders-test", body)).id for body in ("ok-1", "fail-1", "ok-2")}
    config = HostConfig(base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=1,
                        connections={"AWS_SQS": sam_environment})
    try:
        async with running(app, config):
            async def fail_came_back() -> bool:
                return any(call["bodies"] == ["fail-1"] for call in calls)

            await apoll(fail_came_back, 15, interval=0.1, what="the failed record to come back alone")
            await sqs.put("sam-orders-test", "boom")

            async def boom_came_back() -> bool:
                return any("boom" in call["bodies"] and call["records"][0]["attributes"]["ApproximateReceiveCount"]
                           == "2" for call in calls)

            await apoll(boom_came_back, 15, interval=0.1, what="a batch whose handler raised to come back whole")
        seen = [body for call in calls for body in call["bodies"]]
        assert seen.count("ok-1") == 1 and seen.count("ok-2") == 1, f"a record not named came back: {seen}"
        first = next(call for call in calls if "ok-1" in call["bodies"])
        record = next(r for r in first["records"] if r["body"] == "ok-1")
        assert record["messageId"] == ids["ok-1"] and record["receiptHandle"]
        assert record["md5OfBody"] == hashlib.md5(b"ok-1").hexdigest()
        assert (record["eventSource"], record["eventSourceARN"], record["awsRegion"]) == (
            "aws:sqs", f"arn:aws:sqs:{REGION}:000000000000:sam-orders-test", REGION)
        assert record["attributes"]["ApproximateReceiveCount"] == "1" and record["attributes"]["SentTimestamp"]
        assert record["messageAttributes"] == {}
        assert (first["function_name"], first["memory"], first["stage"], first["queue_arn"], first["arn"]) == (
            "orders", "512", "test", f"arn:aws:sqs:{REGION}:000000000000:sam-orders-test",
            f"arn:aws:lambda:{REGION}:000000000000:function:orders")
        assert 0 < first["remaining"] <= 20_000
        assert len({call["request_id"] for call in calls}) == len(calls)
    finally:
        await sqs.delete_queue("sam-orders-test")
        await sqs.close()


@pytest.mark.subprocess
async def test_powertools_batch_processor_app_runs_unchanged_and_a_partial_failure_brings_back_only_its_record(
    moto_server: Moto, tmp_path: Path
) -> None:
    """The queue is made as the template deploys it (a redrive policy to SampleDLQ after 2 receives), so the
    connection leaves poison to it (poison=service); host.yaml has failed records come back at once rather than
    after the queue's 30 s visibility."""
    sqs = open_backend(moto_server.connection(), tmp_path)
    assert isinstance(sqs, SqsBackend)
    await sqs.create_queue("SampleDLQ")
    await sqs.create_queue("SampleQueue")
    client = sqs.client()
    dlq_arn = (await sqs.queue_attributes("SampleDLQ"))["QueueArn"]
    await asyncio.to_thread(client.set_queue_attributes, QueueUrl=client.get_queue_url(QueueName="SampleQueue")
                            ["QueueUrl"], Attributes={"RedrivePolicy": json.dumps(
                                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2})})
    bad = (await sqs.put("SampleQueue", "not json")).id
    for body in ('{"order": 1}', '{"order": 2}'):
        await sqs.put("SampleQueue", body)
    config = tmp_path / "host.yaml"
    config.write_text(yaml.safe_dump({"version": "1.0", "extensions": {"queues": {"maxPollingInterval": "200ms"}},
                                      "functions": {"HelloWorldFunction": {"visibilityTimeout": "0s"}}}))
    worker = WorkerProcess(config, {"AWS_SQS": moto_server.connection(long_poll=1, poison="service")},
                           app=str(SAM / "powertools" / "template.yaml")).start()
    try:
        worker.wait_for_log("host started")
        poll(lambda: _dead_letters(sqs) == 1, 30, interval=0.2, what="the record that failed twice in SampleDLQ")
        lines = worker.lines()
        # The first batch held all three records and failed one; the second run held that one alone, and failed
        # (Powertools raises when every record of a batch fails, which fails the batch, as on Lambda).
        assert [line["outcome"] for line in lines if line.get("event") == "Executed"] == ["failed,succeeded", "failed"]
        assert {line["message_id"] for line in lines if "message_id" in line} == {bad}, "a record that succeeded failed"
    finally:
        worker.stop()
        for queue in ("SampleQueue", "SampleDLQ"):
            await sqs.delete_queue(queue)
        await sqs.close()


def _dead_letters(sqs: SqsBackend) -> int:
    client = sqs.client()
    url = client.get_queue_url(QueueName="SampleDLQ")["QueueUrl"]
    return int(client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
               ["Attributes"]["ApproximateNumberOfMessages"])

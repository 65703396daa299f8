"""AWS SAM apps' SQS-triggered Lambda functions run unchanged, on moto's SQS: the tests' own app in this process,
and two published apps, unmodified, under ``worker run``: Powertools' batch processing example
(tests/compat/sam/powertools) and a serverless-patterns pattern whose handler returns a plain ``batchItemFailures``
(tests/compat/sam/lambda-dynamodb-error-handling).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.host.processes import WorkerProcess
from tests.moto import REGION, Moto
from tests.support import apoll, poll, running
from worker.backends.registry import open_backend
from worker.backends.sqs.queues import SqsBackend
from worker.compat.discovery import discover
from worker.compat.loading import load_app
from worker.settings.config import HostConfig

SAM = Path(__file__).resolve().parent / "sam"
#: Lambda's own variables, which a template of one function sets for its process.
LAMBDA_VARIABLES = ("AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION", "_HANDLER")


def test_worker_run_in_a_folder_with_a_sam_template_runs_the_template(tmp_path: Path) -> None:
    (tmp_path / "template.yaml").write_text("Resources: {}\n", encoding="utf-8")
    assert discover(tmp_path, {}) == "template.yaml"


@pytest.fixture
def sam_environment(monkeypatch: pytest.MonkeyPatch, moto_server: Moto) -> str:
    """``AWS_SQS`` set for the test; the variables the template sets are taken away again after it, as is its
    CodeUri from the import path."""
    connection = moto_server.connection(long_poll=1)
    monkeypatch.setenv("AWS_SQS", connection)
    for variable in ("STAGE", "QUEUE_ARN", "QUEUE_URL", "LATER_URL", *LAMBDA_VARIABLES):
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
    assert spec.settings == {
        "message_encoding": "none",
        "function_timeout": 20.0,
        "batch_size": 10,
        "max_concurrency": 2,
        "visibility_timeout": 1.0,
    }
    assert app.not_run == ("function orders: event Nightly of type Schedule is not run (this host runs SQS events only)",)

    sqs = open_backend(sam_environment, tmp_path)
    assert isinstance(sqs, SqsBackend)
    await sqs.create_queue("sam-orders-test")
    ids = {body: (await sqs.put("sam-orders-test", body)).id for body in ("ok-1", "fail-1", "ok-2")}
    config = HostConfig(
        base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=1, connections={"AWS_SQS": sam_environment}
    )
    try:
        async with running(app, config):

            async def fail_came_back() -> bool:
                return any(call["bodies"] == ["fail-1"] for call in calls)

            await apoll(fail_came_back, 15, interval=0.1, what="the failed record to come back alone")
            await sqs.put("sam-orders-test", "boom")

            async def boom_came_back() -> bool:
                return any(
                    record["body"] == "boom" and record["attributes"]["ApproximateReceiveCount"] == "2"
                    for call in calls
                    for record in call["records"]
                )

            await apoll(boom_came_back, 15, interval=0.1, what="a batch whose handler raised to come back whole")
        seen = [body for call in calls for body in call["bodies"]]
        assert seen.count("ok-1") == 1 and seen.count("ok-2") == 1, f"a record not named came back: {seen}"
        first = next(call for call in calls if "ok-1" in call["bodies"])
        record = next(r for r in first["records"] if r["body"] == "ok-1")
        assert record["messageId"] == ids["ok-1"] and record["receiptHandle"]
        assert record["md5OfBody"] == hashlib.md5(b"ok-1").hexdigest()
        assert (record["eventSource"], record["eventSourceARN"], record["awsRegion"]) == (
            "aws:sqs",
            f"arn:aws:sqs:{REGION}:000000000000:sam-orders-test",
            REGION,
        )
        assert record["attributes"]["ApproximateReceiveCount"] == "1" and record["attributes"]["SentTimestamp"]
        assert record["messageAttributes"] == {}
        assert (first["function_name"], first["memory"], first["stage"], first["queue_arn"], first["arn"]) == (
            "orders",
            "512",
            "test",
            f"arn:aws:sqs:{REGION}:000000000000:sam-orders-test",
            f"arn:aws:lambda:{REGION}:000000000000:function:orders",
        )
        assert 0 < first["remaining"] <= 20_000
        assert len({call["request_id"] for call in calls}) == len(calls)
    finally:
        await sqs.delete_queue("sam-orders-test")
        await sqs.close()


URL_TEMPLATE = """\
Transform: AWS::Serverless-2016-10-31
Resources:
  Jobs:
    Type: AWS::SQS::Queue
  Later:
    Type: AWS::SQS::Queue
  JobsFunction:
    Type: AWS::Serverless::Function
    Properties:
      Runtime: python3.12
      CodeUri: src
      Handler: sam_urls.handler
      Environment:
        Variables:
          QUEUE_URL: !Ref Jobs
          LATER_URL: !GetAtt Later.QueueUrl
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !Ref Jobs
"""


async def test_ref_of_a_queue_is_its_url_and_a_queue_without_visibility_timeout_has_sqs_30_s(
    sam_environment: str, moto_server: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queue_name: str
) -> None:
    """As CloudFormation resolves them: ``!Ref`` of an ``AWS::SQS::Queue`` is the URL a handler passes as
    ``QueueUrl`` (GetQueueUrl's, for a queue that exists; SQS's form with the account id for one not made yet),
    and the event's ``Queue: !Ref`` reads as the queue's name."""
    template = tmp_path / "app"
    (template / "src").mkdir(parents=True)
    (template / "template.yaml").write_text(
        URL_TEMPLATE.replace(
            "Jobs:\n    Type: AWS::SQS::Queue",
            f"Jobs:\n    Type: AWS::SQS::Queue\n    Properties:\n      QueueName: {queue_name}",
        ),
        encoding="utf-8",
    )
    (template / "src" / "sam_urls.py").write_text("def handler(event, context):\n    return None\n", encoding="utf-8")
    client = boto3.client("sqs", region_name=REGION, endpoint_url=moto_server.endpoint)
    url = (await asyncio.to_thread(client.create_queue, QueueName=queue_name))["QueueUrl"]
    try:
        app = load_app(str(template / "template.yaml"), tmp_path)
        [spec] = app.functions
        assert spec.queue_name == queue_name
        assert spec.settings["visibility_timeout"] == 30.0
        assert os.environ["QUEUE_URL"] == url
        assert os.environ["LATER_URL"] == f"{moto_server.endpoint}/000000000000/Later"
        # A handler's own SDK call with it reaches the queue.
        await asyncio.to_thread(client.send_message, QueueUrl=os.environ["QUEUE_URL"], MessageBody="from a handler")
        attributes = await asyncio.to_thread(
            client.get_queue_attributes, QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "1"
    finally:
        await asyncio.to_thread(client.delete_queue, QueueUrl=url)
        sys.modules.pop("sam_urls", None)


FILTER_TEMPLATE = """\
Transform: AWS::Serverless-2016-10-31
Resources:
  FilteredFunction:
    Type: AWS::Serverless::Function
    Properties:
      Runtime: python3.12
      CodeUri: src
      Handler: sam_filtered.handler
      Events:
        Orders:
          Type: SQS
          Properties:
            Queue: arn:aws:sqs:us-east-1:000000000000:QUEUE
            FilterCriteria:
              Filters:
                - Pattern: '{"body": {"kind": ["order"], "total": [{"numeric": [">", 10]}]}}'
                - Pattern: '{"body": [{"prefix": "urgent:"}]}'
"""


async def test_filter_criteria_hand_the_handler_what_matches_and_delete_the_rest_counted(
    sam_environment: str, tmp_path: Path, queue_name: str
) -> None:
    """As Lambda filters: a record matching one of the filters reaches the handler; the others are deleted without
    it, and counted as filtered."""
    folder = tmp_path / "app"
    (folder / "src").mkdir(parents=True)
    (folder / "template.yaml").write_text(FILTER_TEMPLATE.replace("QUEUE", queue_name), encoding="utf-8")
    (folder / "src" / "sam_filtered.py").write_text(
        "SEEN = []\n\ndef handler(event, context):\n    SEEN.extend(r['body'] for r in event['Records'])\n", encoding="utf-8"
    )
    sqs = open_backend(sam_environment, tmp_path)
    assert isinstance(sqs, SqsBackend)
    try:
        app = load_app(str(folder / "template.yaml"), tmp_path)
        seen: list[str] = sys.modules["sam_filtered"].SEEN
        await sqs.create_queue(queue_name)
        bodies = [
            '{"kind": "order", "total": 12}',
            '{"kind": "order", "total": 3}',
            '{"kind": "refund"}',
            "urgent: call back",
            "not urgent",
        ]
        for body in bodies:
            await sqs.put(queue_name, body)
        config = HostConfig(base_dir=tmp_path, drain_timeout=1, connections={"AWS_SQS": sam_environment})
        async with running(app, config) as host:

            async def settled() -> bool:
                return host.metrics.get("filtered") + host.metrics.get("succeeded") == len(bodies)

            await apoll(settled, 20, interval=0.1, what="every record handled or filtered")
            assert (host.metrics.get("succeeded"), host.metrics.get("filtered")) == (2, 3)
        assert sorted(seen) == sorted(['{"kind": "order", "total": 12}', "urgent: call back"])
        assert await sqs.approximate_count(queue_name) == 0
    finally:
        await sqs.delete_queue(queue_name)
        await sqs.close()
        sys.modules.pop("sam_filtered", None)


@pytest.mark.subprocess
async def test_functions_of_one_module_name_and_different_environments_run_each_in_a_process_of_its_own(
    moto_server: Moto, tmp_path: Path
) -> None:
    """As ``sam init`` lays out two functions: ``app.lambda_handler`` in two CodeUri folders, one variable set
    differently. ``worker run`` starts a process for each, with no flag, each with its own module, its own
    environment and Lambda's own variables, as Lambda isolates every function."""
    folder = SAM / "two-functions"
    sqs = open_backend(moto_server.connection(), tmp_path)
    assert isinstance(sqs, SqsBackend)
    worker: WorkerProcess | None = None
    out = tmp_path / "out"
    out.mkdir()
    try:
        for queue in ("sam-two-orders", "sam-two-refunds"):
            await sqs.create_queue(queue)
        sent = {
            (await sqs.put("sam-two-orders", "an order")).id: "orders",
            (await sqs.put("sam-two-refunds", "a refund")).id: "refunds",
        }
        config = tmp_path / "host.yaml"
        config.write_text("version: '1.0'\n", encoding="utf-8")
        worker = WorkerProcess(
            config, {"AWS_SQS": moto_server.connection(long_poll=1), "OUT_DIR": str(out)}, app=str(folder / "template.yaml")
        ).start()
        poll(lambda: len(list(out.glob("*.json"))) == 2, 60, interval=0.2, what="both functions to handle theirs")
        seen = {path.stem: json.loads(path.read_text()) for path in out.glob("*.json")}
        urls = {queue: _queue_url(sqs, queue) for queue in ("sam-two-orders", "sam-two-refunds")}
        for message_id, function in sent.items():
            kind = function.removesuffix("s")
            assert seen[message_id] == {
                "module": function,
                "kind_at_import": kind,
                "body": f"a{'n' if kind == 'order' else ''} {kind}",
                "KIND": kind,
                "QUEUE_URL": urls[f"sam-two-{function}"],
                "AWS_LAMBDA_FUNCTION_NAME": f"{function.capitalize()}Function",
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256" if function == "orders" else "128",
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_REGION": REGION,
                "_HANDLER": "app.lambda_handler",
            }, seen[message_id]
        started = [line for line in worker.lines() if line.get("event") == "worker process started"]
        assert sorted(line["environment"]["WORKER_SAM_FUNCTION"] for line in started) == [
            "OrdersFunction",
            "RefundsFunction",
        ]
    finally:
        if worker is not None:
            assert worker.stop() == 0
        for queue in ("sam-two-orders", "sam-two-refunds"):
            await sqs.delete_queue(queue)
        await sqs.close()


@pytest.mark.subprocess
async def test_powertools_batch_processor_app_runs_unchanged_and_a_partial_failure_brings_back_only_its_record(
    moto_server: Moto, tmp_path: Path
) -> None:
    """The queue is made as the template deploys it: a redrive policy to SampleDLQ after 2 receives."""
    async with _sam_app_running(
        moto_server,
        tmp_path,
        "powertools",
        "HelloWorldFunction",
        "SampleQueue",
        "SampleDLQ",
        2,
        ["not json", '{"order": 1}', '{"order": 2}'],
    ) as (sqs, worker, ids):
        bad = ids[0]
        poll(
            lambda: _dead_letters(sqs, "SampleDLQ") == 1, 30, interval=0.2, what="the record that failed twice in SampleDLQ"
        )
        lines = worker.lines()
        # The first batch held all three records and failed one; the second run held that one alone, and failed
        # (Powertools raises when every record of a batch fails, which fails the batch, as on Lambda).
        assert [line["outcome"] for line in lines if line.get("event") == "Executed"] == ["failed,succeeded", "failed"]
        assert {line["message_id"] for line in lines if "message_id" in line} == {bad}, "a record that succeeded failed"


#: serverless-patterns' lambda-dynamodb-error-handling-sam, in a folder named as its README names the stack.
STACK = "lambda-dynamodb-error-handling"


@pytest.mark.subprocess
async def test_serverless_patterns_dynamodb_app_returns_batch_item_failures_and_only_the_failed_records_come_back(
    moto_server: Moto, tmp_path: Path
) -> None:
    """Its handler writes each record to DynamoDB and names in ``batchItemFailures`` each it cannot take: a body
    that is not JSON, or one without ``id``. Its queue redrives to its DLQ after 3 receives, so each failed record
    is run three times and then is in the DLQ, while the records written are deleted after their one run."""
    dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=moto_server.endpoint)
    # The template's TABLE_NAME is `!Ref ItemsTable`, which this host, knowing queue names only, resolves to the
    # table's logical id; a deployed stack's would be its TableName. The table is made under the host's name.
    await asyncio.to_thread(
        dynamodb.create_table,
        TableName="ItemsTable",
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    bodies = ['{"id": "item-1", "name": "first"}', "invalid-json", '{"id": "item-2"}', '{"name": "no id"}']
    # The region Lambda's runtime sets, and the SDK's endpoint variable that points the handler's DynamoDB at moto.
    lambda_env = {"AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint}
    try:
        async with _sam_app_running(
            moto_server, tmp_path, STACK, f"{STACK}-processor", f"{STACK}-queue", f"{STACK}-dlq", 3, bodies, lambda_env
        ) as (sqs, worker, ids):
            failed = {ids[1]: bodies[1], ids[3]: bodies[3]}
            poll(
                lambda: _dead_letters(sqs, f"{STACK}-dlq") == 2,
                30,
                interval=0.2,
                what="the two records the handler failed, three times each, in the DLQ",
            )
            lines = worker.lines()
            named = [line["message_id"] for line in lines if line.get("event") == "handler failed one message"]
            assert sorted(named) == sorted(3 * list(failed)), named
            assert {line["message_id"] for line in lines if "message_id" in line} == set(failed), (
                "a record the handler did not name failed"
            )
            assert _dead_letter_bodies(sqs, f"{STACK}-dlq") == sorted(failed.values())
            assert _queue_counts(sqs, f"{STACK}-queue") == (0, 0), "a record written was not deleted"
        items = (await asyncio.to_thread(dynamodb.scan, TableName="ItemsTable"))["Items"]
        assert sorted((item["id"]["S"], item["name"]["S"]) for item in items) == [("item-1", "first"), ("item-2", "")]
    finally:
        await asyncio.to_thread(dynamodb.delete_table, TableName="ItemsTable")


@asynccontextmanager
async def _sam_app_running(
    moto_server: Moto,
    tmp_path: Path,
    folder: str,
    function: str,
    queue: str,
    dlq: str,
    max_receive_count: int,
    bodies: list[str],
    env: dict[str, str] | None = None,
) -> AsyncIterator[tuple[SqsBackend, WorkerProcess, list[str]]]:
    """The SAM app in ``sam/<folder>`` under ``worker run`` against moto, ``bodies`` sent first (their ids yielded,
    in order). ``queue`` is made as the template deploys it, with a redrive policy to ``dlq`` after
    ``max_receive_count`` receives, which takes poison with no ``poison=`` in the connection; host.yaml has failed
    records come back at once rather than after the queue's visibility timeout."""
    sqs = open_backend(moto_server.connection(), tmp_path)
    assert isinstance(sqs, SqsBackend)
    worker: WorkerProcess | None = None
    try:
        await sqs.create_queue(dlq)
        await sqs.create_queue(queue)
        client = sqs.client()
        dlq_arn = (await sqs.queue_attributes(dlq))["QueueArn"]
        await asyncio.to_thread(
            client.set_queue_attributes,
            QueueUrl=client.get_queue_url(QueueName=queue)["QueueUrl"],
            Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count})},
        )
        ids = [(await sqs.put(queue, body)).id for body in bodies]
        config = tmp_path / "host.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "version": "1.0",
                    "extensions": {"queues": {"maxPollingInterval": "200ms"}},
                    "functions": {function: {"visibilityTimeout": "0s"}},
                }
            )
        )
        worker = WorkerProcess(
            config, {"AWS_SQS": moto_server.connection(long_poll=1), **(env or {})}, app=str(SAM / folder / "template.yaml")
        ).start()
        worker.wait_for_log("host started")
        yield sqs, worker, ids
    finally:
        if worker is not None:
            worker.stop()
        for name in (queue, dlq):
            await sqs.delete_queue(name)
        await sqs.close()


def _queue_url(sqs: SqsBackend, queue: str) -> str:
    return str(sqs.client().get_queue_url(QueueName=queue)["QueueUrl"])


def _queue_counts(sqs: SqsBackend, queue: str) -> tuple[int, int]:
    """The queue's messages waiting and in flight."""
    attributes = sqs.client().get_queue_attributes(
        QueueUrl=_queue_url(sqs, queue),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def _dead_letters(sqs: SqsBackend, dlq: str) -> int:
    return _queue_counts(sqs, dlq)[0]


def _dead_letter_bodies(sqs: SqsBackend, dlq: str) -> list[str]:
    answer = sqs.client().receive_message(QueueUrl=_queue_url(sqs, dlq), MaxNumberOfMessages=10)
    return sorted(message["Body"] for message in answer.get("Messages", []))

"""A Lambda SQS handler as Lambda users write it: records in, ``batchItemFailures`` out, an exception for the batch.

Each call is noted in ``CALLS`` (for the test that runs it in its own process): the records' bodies, what the
context object said, and the environment the template set.
"""

import os

CALLS = []


def handler(event, context):
    bodies = [record["body"] for record in event["Records"]]
    CALLS.append(
        {
            "bodies": bodies,
            "records": event["Records"],
            "function_name": context.function_name,
            "memory": context.memory_limit_in_mb,
            "remaining": context.get_remaining_time_in_millis(),
            "request_id": context.aws_request_id,
            "arn": context.invoked_function_arn,
            "stage": os.environ.get("STAGE"),
            "queue_arn": os.environ.get("QUEUE_ARN"),
        }
    )
    if "boom" in bodies:
        raise RuntimeError("the whole batch fails")
    failures = [{"itemIdentifier": r["messageId"]} for r in event["Records"] if r["body"].startswith("fail")]
    return {"batchItemFailures": failures}

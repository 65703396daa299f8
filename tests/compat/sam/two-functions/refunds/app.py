"""The refunds function: writes what it saw of its environment, one file a record, where OUT_DIR says."""

import json
import os
from pathlib import Path

KIND = os.environ["KIND"]  # read at import, as handlers do


def lambda_handler(event, context):
    names = (
        "KIND",
        "QUEUE_URL",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
        "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_REGION",
        "_HANDLER",
    )
    for record in event["Records"]:
        seen = {
            "module": "refunds",
            "kind_at_import": KIND,
            "body": record["body"],
            **{name: os.environ.get(name) for name in names},
        }
        Path(os.environ["OUT_DIR"], f"{record['messageId']}.json").write_text(json.dumps(seen))

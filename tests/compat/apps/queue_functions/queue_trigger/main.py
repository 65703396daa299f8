# Copyright (c) Microsoft Corporation. All rights reserved.
# Licensed under the MIT License.
import json

import azure.functions as azf


def main(msg: azf.QueueMessage) -> str:
    result = json.dumps(
        {
            "id": msg.id,
            "body": msg.get_body().decode("utf-8"),
            "expiration_time": (msg.expiration_time.isoformat() if msg.expiration_time else None),
            "insertion_time": (msg.insertion_time.isoformat() if msg.insertion_time else None),
            "time_next_visible": (msg.time_next_visible.isoformat() if msg.time_next_visible else None),
            "pop_receipt": msg.pop_receipt,
            "dequeue_count": msg.dequeue_count,
        }
    )

    return result

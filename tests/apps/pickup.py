"""An app that notes when each message reached its handler (wall-clock), for bench/pickup.py."""

from __future__ import annotations

import os
import time

from worker import QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="pickup")
async def noted(msg: QueueMessage) -> None:
    arrived = time.time()
    with open(os.environ["PICKUP_FILE"], "a", encoding="utf-8") as out:
        out.write(f"{msg.get_body().decode()} {arrived}\n")

"""The container tests' app: one handler that holds its message until the test lets it go.

The tests copy this file into the folder they mount at /shared and run it with the image's ``worker``. Each attempt
leaves a file ``started-<body>-<id>`` beside this one, waits for a file ``release`` there, then writes ``done-<body>``:
so a test sees when a handler runs, decides when it ends, and counts the attempts a message took. Its queue is named
by the environment's ``HOLD_QUEUE``, so that tests on one shared Azurite keep apart. It imports nothing but the worker, which
is all a queue-only image has.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from worker import WorkerApp

app = WorkerApp()
SHARED = Path(__file__).resolve().parent
#: How often a held handler looks for the release file.
LOOK_EVERY = 0.05


@app.queue_trigger(arg_name="body", queue_name=os.environ["HOLD_QUEUE"])
def hold(body: str) -> None:
    (SHARED / f"started-{body}-{uuid.uuid4().hex[:8]}").touch()
    while not (SHARED / "release").exists():
        time.sleep(LOOK_EVERY)
    (SHARED / f"done-{body}").touch()

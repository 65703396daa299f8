"""An app for the fenced-writer test: each invocation publishes one version of a table, as the pipeline's steps do
(with :func:`functions.function_app.writer`), and waits under the table's writer lock until the test lets it go on.

``FENCED_FOLDER`` holds the table (``table``), the files the writers leave when they hold the lock
(``building-<dequeue count>``), and the file the test writes to let them go on (``go``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from functions import tables
from functions.function_app import writer
from worker import QueueMessage, WorkerApp, spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

app = WorkerApp()
#: How long a writer waits for ``go`` at most.
GO_DEADLINE = 120.0


@app.queue_trigger(arg_name="msgs", queue_name="writes", cardinality="many", spark=True)
def write(msgs: list[QueueMessage]) -> None:
    folder = Path(os.environ["FENCED_FOLDER"])
    session = spark.session()
    attempt = max(msg.dequeue_count for msg in msgs)

    def build() -> DataFrame:
        (folder / f"building-{attempt}").touch()
        deadline = time.monotonic() + GO_DEADLINE
        while not (folder / "go").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the test never said go")
            time.sleep(0.05)
        return session.range(1).selectExpr(f"{attempt} AS attempt", "0 AS part")

    tables.publish(folder / "table", build, ["part"], writer(msgs))

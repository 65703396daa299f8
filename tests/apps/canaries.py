"""An app for the canary test (tests/host/test_canaries.py): a function on each backend the test plants secrets in.

``failing`` (Azurite) raises the text of ``CANARY_FAILURE``, as a handler whose download of a SAS URL failed would;
``counted`` (moto's SQS, signed with the environment's canary credentials) and ``signed`` (the OCI Queue test
server, signed with its key) succeed; ``unreachable`` names an
endpoint whose URL carries a password and where nothing listens; ``sparked`` waits for a Spark Connect master that
never answers (its token in ``spark.master``).
"""

from __future__ import annotations

import logging
import os

from worker import QueueMessage, WorkerApp

app = WorkerApp()
log = logging.getLogger("canaries")


@app.queue_trigger(arg_name="msg", queue_name="canary-azure", connection="CanaryAzure")
def failing(msg: QueueMessage) -> None:
    raise RuntimeError(os.environ["CANARY_FAILURE"])


@app.queue_trigger(arg_name="msg", queue_name="canary-sqs", connection="CanarySqs")
def counted(msg: QueueMessage) -> None:
    log.info("counted %s", msg.id)


@app.queue_trigger(arg_name="msg", queue_name="canary-oci", connection="CanaryOci")
def signed(msg: QueueMessage) -> None:
    log.info("signed %s", msg.id)


@app.queue_trigger(arg_name="msg", queue_name="canary-unreachable", connection="CanaryUnreachable")
def unreachable(msg: QueueMessage) -> None:
    """Never called: its storage does not answer."""


@app.queue_trigger(arg_name="msg", queue_name="canary-spark", connection="CanaryAzure", spark=True)
def sparked(msg: QueueMessage) -> None:
    """Never called: its Spark master does not answer."""

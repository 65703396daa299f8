"""An unchanged-style azure.functions app whose queue trigger has ``@app.retry``, which Functions ignores there,
and so does this host."""

from __future__ import annotations

import azure.functions as func

from tests.apps.recording import record

app = func.FunctionApp()


@app.function_name("retried")
@app.retry(strategy="fixed_delay", max_retry_count="5", delay_interval="00:00:02")
@app.queue_trigger(arg_name="msg", queue_name="retried", connection="AzureWebJobsStorage")
def retried(msg: func.QueueMessage) -> None:
    record(msg, "retried")  # type: ignore[arg-type]  # the host passes its QueueMessage, which has the same fields
    raise RuntimeError("fails every time")

"""What `worker init` makes: one queue-triggered function. `worker send hello world`, then `worker run --burst`."""

import logging

from worker import QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="hello", connection="AzureWebJobsStorage")
def hello(msg: QueueMessage) -> None:
    # Returning deletes the message; raising retries it (then moves it to hello-poison).
    logging.info("hello, %s", msg.get_body().decode())

"""An Azure Functions app of the Python v2 model, unchanged: `worker run` runs it as `func start` would.

worker send tasks hello
worker run --burst
worker peek done
"""

import logging

import azure.functions as func

app = func.FunctionApp()


@app.queue_trigger(arg_name="msg", queue_name="tasks", connection="AzureWebJobsStorage")
@app.queue_output(arg_name="done", queue_name="done", connection="AzureWebJobsStorage")
def work(msg: func.QueueMessage, done: func.Out[str], context: func.Context) -> None:
    body = msg.get_body().decode()
    logging.info("%s: %s (attempt %d)", context.function_name, body, msg.dequeue_count)
    done.set(body.upper())

"""A FunctionApp in the Python v2 model using what worker.compat.functions translates, written as for Azure Functions.

The functions record what they received in ``seen`` (name, message, thread)
for the tests to read; nothing else here knows about the worker.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import azure.functions as func

app = func.FunctionApp()

#: (function, message, thread name) per call, appended from handler threads and from the event loop.
seen: list[tuple[str, func.QueueMessage, str]] = []


def record(function: str, message: func.QueueMessage) -> None:
    seen.append((function, message, threading.current_thread().name))


@app.function_name(name="ProcessOrder")
@app.queue_trigger(arg_name="order", queue_name="orders", connection="AzureWebJobsStorage")
@app.queue_output(arg_name="msg", queue_name="outqueue", connection="AzureWebJobsStorage")
def process_order(order: func.QueueMessage, msg: func.Out[str]) -> None:
    record("ProcessOrder", order)
    msg.set(f"processed {order.get_body().decode('utf-8')}")


@app.function_name(name="AsyncAudit")
@app.queue_trigger(arg_name="item", queue_name="audit", connection="AzureWebJobsStorage")
async def audit(item: func.QueueMessage) -> None:
    await asyncio.sleep(0)
    record("AsyncAudit", item)
    logging.info("audited %s", item.get_body().decode("utf-8"))


@app.queue_trigger(arg_name="job", queue_name="fragile", connection="AzureWebJobsStorage")
@app.queue_output(arg_name="msg", queue_name="fragile-out", connection="AzureWebJobsStorage")
def fragile(job: func.QueueMessage, msg: func.Out[str]) -> None:
    msg.set("must not be sent")
    record("fragile", job)
    raise RuntimeError("fragile always fails after setting its output")


@app.function_name(name="Echo")
@app.queue_trigger(arg_name="message", queue_name="echo", connection="AzureWebJobsStorage")
@app.queue_output(arg_name="$return", queue_name="echo-out", connection="AzureWebJobsStorage")
def echo(message: func.QueueMessage, context: func.Context) -> str:
    record("Echo", message)
    return f"{context.function_name} {context.invocation_id} {message.get_body().decode('utf-8')}"


@app.function_name(name="HttpHello")
@app.route(route="hello", auth_level=func.AuthLevel.ANONYMOUS)
def http_hello(req: func.HttpRequest) -> func.HttpResponse:
    return func.HttpResponse("hello")

"""The sample app: order messages are priced and written out; malformed ones end in the poison queue.

``orders`` is a synchronous handler (it writes a file), so the host runs it in
its thread pool; ``audit`` is asynchronous and runs on the event loop.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import structlog

from worker import QueueMessage, WorkerApp

app = WorkerApp()
log = structlog.get_logger("functions")

#: Where priced orders are appended, one JSON object per line.
OUTPUT = Path(os.environ.get("DEMO_OUTPUT", ".worker/demo/priced-orders.jsonl"))
_write_lock = threading.Lock()


def price(order: dict) -> dict:
    """The order with its total; KeyError or ValueError when a field is missing or wrong."""
    quantity = int(order["quantity"])
    unit_price = float(order["unit_price"])
    if quantity <= 0 or unit_price < 0:
        raise ValueError(f"order {order.get('order_id')} has quantity {quantity} and price {unit_price}")
    return {**order, "total": round(quantity * unit_price, 2)}


@app.function_name("orders")
@app.queue_trigger(arg_name="msg", queue_name="orders")
def price_order(msg: QueueMessage) -> None:
    priced = price(msg.get_json())
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    with _write_lock, OUTPUT.open("a", encoding="utf-8") as out:
        out.write(json.dumps(priced, sort_keys=True) + "\n")


@app.function_name("audit")
@app.queue_trigger(arg_name="event", queue_name="audit-events")
async def audit(event: QueueMessage) -> None:
    log.info("audit event", message_id=event.id, payload=event.get_json())

"""An order becomes a receipt (a blob) and an invoice (a message on another queue), written only if the handler
succeeds; a second function takes the invoices.

    worker send orders '{"orderId": "A-1", "items": [{"sku": "pen", "price": 2.5, "quantity": 4}]}'
    worker run --burst
    cat .worker/blobs/receipts/A-1.json
"""

import logging

from worker import Out, QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="orders")
@app.queue_output(arg_name="invoice", queue_name="invoices")
@app.blob_output(arg_name="receipt", path="receipts/{orderId}.json")
def take_order(msg: QueueMessage, invoice: Out, receipt: Out) -> None:
    order = msg.get_json()
    total = sum(item["price"] * item["quantity"] for item in order["items"])
    receipt.set(f'{{"orderId": "{order["orderId"]}", "total": {total}}}')
    # The invoice carries a key of its own (the order's id), so that its consumer can tell a repeat.
    invoice.set({"orderId": order["orderId"], "total": total})


@app.queue_trigger(arg_name="msg", queue_name="invoices")
def send_invoice(msg: QueueMessage) -> None:
    invoice = msg.get_json()
    logging.info("invoice for order %s: %.2f", invoice["orderId"], invoice["total"])

"""Payments: a failure is retried after a fixed delay, a payment that can never succeed goes to poison at once.

worker send payments '{"amount": 10}' '{"amount": -5}' 'not json'
worker run --burst
worker poison list payments
"""

import logging

from worker import Poison, QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="payments")
def pay(msg: QueueMessage) -> None:
    payment = msg.get_json()  # a body that is not JSON raises: retried, then poisoned after maxDequeueCount
    if payment["amount"] <= 0:
        raise Poison(f"amount {payment['amount']} is not a payment")  # no retry could help
    logging.info("paid %s (attempt %d)", payment["amount"], msg.dequeue_count)

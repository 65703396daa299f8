"""The main job of the sample: enqueue a day of orders, run the worker until the queues drain, report.

Run with ``make run``. The queues live in the embedded SQLite queue beside
host.yaml, so nothing but Python is needed.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

from functions.function_app import OUTPUT, app
from worker.config import load_config
from worker.encoding import encode
from worker.host import Host
from worker.observability import configure_logging, format_summary
from worker.queues import open_backend

ORDERS = 200
LOG = Path(".worker/demo/worker.log")
MALFORMED = ['{"order_id": "bad-1", "quantity": "two"', '{"order_id": "bad-2", "unit_price": 3.5}']


def orders(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [
        json.dumps({"order_id": f"o-{i:04d}", "sku": rng.choice("ABCDE"), "quantity": rng.randint(1, 9),
                    "unit_price": round(rng.uniform(1, 50), 2)})
        for i in range(count)
    ]


async def seed(config_path: Path) -> None:
    config = load_config(config_path)
    backend = open_backend(None, config.base_dir)
    try:
        for queue in ("orders", "orders-poison", "audit-events"):
            await backend.delete_queue(queue)
            await backend.create_queue(queue)
        for body in orders(ORDERS) + MALFORMED:
            await backend.put("orders", encode(body, config.message_encoding))
        await backend.put("audit-events", encode(json.dumps({"kind": "demo-started"}), config.message_encoding))
    finally:
        await backend.close()


async def poison_count(config_path: Path) -> int:
    config = load_config(config_path)
    backend = open_backend(None, config.base_dir)
    try:
        return await backend.approximate_count("orders-poison")
    finally:
        await backend.close()


def main() -> None:
    config_path = Path("host.yaml")
    LOG.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.unlink(missing_ok=True)
    log_file = LOG.open("w", encoding="utf-8")
    configure_logging("INFO", json_lines=True, stream=log_file)
    asyncio.run(seed(config_path))
    print(f"enqueued {ORDERS} orders and {len(MALFORMED)} malformed ones on the embedded queue")
    host = Host(app, load_config(config_path), burst=True)
    asyncio.run(host.run())
    print(format_summary(host.metrics, host.elapsed))
    priced = [json.loads(line) for line in OUTPUT.read_text(encoding="utf-8").splitlines()]
    print(f"priced {len(priced)} orders worth {sum(o['total'] for o in priced):.2f} -> {OUTPUT}")
    print(f"{asyncio.run(poison_count(config_path))} messages in orders-poison (see: worker peek orders-poison)")
    print(f"the worker's log (JSON lines, with the reason for each failure): {LOG}")
    log_file.close()


if __name__ == "__main__":
    main()

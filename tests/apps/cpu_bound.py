"""An app whose one sync handler is pure Python arithmetic (it holds the GIL), for bench/processes.py."""

from __future__ import annotations

import os
import time

from worker import QueueMessage, WorkerApp

app = WorkerApp()

#: Loop iterations per message (1,500,000: about 0.17 s of one core here).
WORK = int(os.environ.get("CPU_WORK", "1500000"))


@app.queue_trigger(arg_name="msg", queue_name="cpu-bound")
def crunch(msg: QueueMessage) -> None:
    began = time.time()
    total = 0
    for i in range(WORK):
        total += i * i % 7
    if total < 0:
        raise AssertionError(total)
    if folder := os.environ.get("CPU_TIMES"):  # when each handler ran, for the benchmark's span
        with open(os.path.join(folder, f"{os.getpid()}.times"), "a", encoding="utf-8") as out:
            out.write(f"{began} {time.time()}\n")

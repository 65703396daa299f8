"""An app for the console's tests: a quick function, a slow one, and a fragile one that poisons until told not to.

``CONSOLE_DIR`` is a folder the test owns: each handled body is appended to ``handled.txt`` there, and the
fragile function poisons its messages (``worker.Poison``) until a file ``mended`` appears there.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from worker import Poison, QueueMessage, WorkerApp

app = WorkerApp()


def folder() -> Path:
    return Path(os.environ["CONSOLE_DIR"])


def handled(function: str, msg: QueueMessage) -> None:
    with (folder() / "handled.txt").open("a", encoding="utf-8") as out:
        out.write(f"{function} {msg.get_body().decode()}\n")


@app.queue_trigger(arg_name="msg", queue_name="console-quick")
def quick(msg: QueueMessage) -> None:
    handled("quick", msg)


@app.queue_trigger(arg_name="msg", queue_name="console-slow")
async def slow(msg: QueueMessage) -> None:
    """Runs for as many seconds as the body says."""
    await asyncio.sleep(float(msg.get_body().decode()))
    handled("slow", msg)


@app.queue_trigger(arg_name="msg", queue_name="console-fragile")
def fragile(msg: QueueMessage) -> None:
    if not (folder() / "mended").exists():
        raise Poison("fragile cannot take <b>this</b> yet: the mended file is not there")
    handled("fragile", msg)

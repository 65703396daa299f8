"""``worker init [FOLDER]``: a new app folder that runs at once, laid out as a Functions app is.

It holds ``function_app.py``, ``host.json``, ``local.settings.json`` and a ``.gitignore``.
Storage is the embedded queue, so ``worker send`` and ``worker run`` there share ``.worker/queues.sqlite3``.
A storage account's connection string moves the app to Azure Storage unchanged.
local.settings.json, which may then hold a key, is owner-only. Nothing is overwritten: a clash is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from worker.backends.embedded.files import FILE_MODE

#: The trigger queue of the app ``worker init`` writes.
QUEUE = "hello"

FUNCTION_APP = f'''"""A queue-triggered app: `worker send {QUEUE} world`, then `worker run`."""

import logging

from worker import QueueMessage, WorkerApp

app = WorkerApp()


@app.queue_trigger(arg_name="msg", queue_name="{QUEUE}", connection="AzureWebJobsStorage")
def hello(msg: QueueMessage) -> None:
    # Returning deletes the message; raising retries it (then moves it to {QUEUE}-poison).
    logging.info("hello, %s", msg.get_body().decode())
'''

HOST_JSON = (
    json.dumps(
        {
            "version": "2.0",
            "functionTimeout": "00:05:00",
            "extensions": {"queues": {"batchSize": 16, "maxDequeueCount": 5}},
        },
        indent=2,
    )
    + "\n"
)

LOCAL_SETTINGS = (
    json.dumps(
        {
            "IsEncrypted": False,
            "Values": {
                "FUNCTIONS_WORKER_RUNTIME": "python",
                # The embedded queue, beside host.json; a storage account's connection string moves the app to Azure.
                "AzureWebJobsStorage": "sqlite:///.worker/queues.sqlite3",
            },
        },
        indent=2,
    )
    + "\n"
)

GITIGNORE = """.worker/
__pycache__/
.venv/
local.settings.json
"""

FILES = {
    "function_app.py": FUNCTION_APP,
    "host.json": HOST_JSON,
    "local.settings.json": LOCAL_SETTINGS,
    ".gitignore": GITIGNORE,
}


class FolderNotEmpty(Exception):
    """The folder already holds a file ``worker init`` would write."""


def init(folder: Path) -> list[Path]:
    """Write the app's files into ``folder`` (made if missing); the files written."""
    taken = [name for name in FILES if (folder / name).exists()]
    if taken:
        raise FolderNotEmpty(f"{folder} already has {', '.join(taken)}; worker init overwrites nothing")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in FILES.items():
        path = folder / name
        if name in PRIVATE:
            _write_private(path, text)
        else:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


#: The files that hold secrets once the app moves to a storage account: readable by their owner only.
PRIVATE = frozenset({"local.settings.json"})


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` new and 0600 whatever the umask: where an account key goes next must not be readable by others."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        os.fchmod(descriptor, FILE_MODE)
        file.write(text)

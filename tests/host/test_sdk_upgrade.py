"""A dependency upgraded under the worker: the Azure SDK and azure-core changed where the fast path reaches into them.

Each case patches the installed packages at interpreter start (a ``sitecustomize`` module on the worker's path),
as a later release would look to the worker, and runs ``worker run --burst`` on Azurite through a recording proxy:
every message is handled and deleted, the run exits 0 without a traceback after one warning naming the versions,
no request without a message id reaches the emulator, and the messages of other queues and of a failing handler
(in its poison queue) are all still there.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.azurite import Azurite
from tests.host.processes import worker_environment
from tests.reliability.faultproxy import FaultProxy
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

#: Patches of the installed packages, each what an upgrade could bring, run in the worker process before anything.
UPGRADES = {
    # The generated layer moved: the queue client has no ``_client`` as seen from the worker's code.
    "queue client without _client": """
import sys
from azure.storage.queue.aio import QueueClient
def _hidden(self):
    if sys._getframe(1).f_globals.get("__name__", "").startswith("worker."):
        raise AttributeError("_client")
    return self.__dict__["_moved_client"]
def _store(self, value):
    self.__dict__["_moved_client"] = value
QueueClient._client = property(_hidden, _store)
""",
    # azure-core keeps a request's URL behind a property: a copy of its __dict__ no longer sets it.
    "HttpRequest.url a property": """
from azure.core.rest import HttpRequest
HttpRequest.url = property(lambda self: self.__dict__.get("_url", ""),
                           lambda self, value: self.__dict__.__setitem__("_url", value))
""",
    # The SDK's error helper moved: its own modules (imported first) have it, the worker's import does not.
    "process_storage_error gone": """
import azure.storage.queue.aio
import azure.storage.queue._shared.response_handlers as handlers
del handlers.process_storage_error
""",
}

APP = """
from worker import WorkerApp, QueueMessage
app = WorkerApp()

@app.queue_trigger(arg_name="msg", queue_name="good")
def good(msg: QueueMessage) -> None:
    pass

@app.queue_trigger(arg_name="msg", queue_name="bad")
def bad(msg: QueueMessage) -> None:
    raise RuntimeError("always fails")
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("upgrade", sorted(UPGRADES))
def test_an_upgraded_sdk_selects_the_public_calls_and_loses_nothing(upgrade: str, azurite: Azurite, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(UPGRADES[upgrade])
    app = tmp_path / "app"
    app.mkdir()
    (app / "function_app.py").write_text(APP)
    (app / "host.yaml").write_text(
        "version: '1.0'\nextensions:\n  queues:\n    maxDequeueCount: 1\n    maxPollingInterval: 200ms\n"
    )
    proxy = FaultProxy(azurite.port).start()
    try:
        asyncio.run(_fill(proxy.connection_string))
        env = worker_environment(AzureWebJobsStorage=proxy.connection_string)
        env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
        done = subprocess.run(
            [sys.executable, "-m", "worker", "run", "--burst"], cwd=app, env=env, capture_output=True, text=True, timeout=180
        )
        operations = proxy.stats().operations
    finally:
        proxy.stop()
    assert done.returncode == 0, done.stderr[-4000:]
    assert all(line.startswith("{") for line in done.stderr.splitlines()), done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    # The one traceback is the failing handler's own, in its "handler failed" lines.
    assert {line["event"] for line in lines if "Traceback" in json.dumps(line)} == {"handler failed"}
    [warning] = [line for line in lines if line["event"].startswith("the SDK's requests are not laid out")]
    assert warning["azure_storage_queue"] and warning["azure_core"] and warning["problem"]
    assert operations["clear"] == 0 and operations["delete"] >= 20
    left = asyncio.run(_counts(azurite.connection_string))
    assert left == {"good": 0, "bad": 0, "bad-poison": 5, "other": 3}


async def _fill(connection: str) -> None:
    backend = open_backend(connection, Path("."))
    try:
        for queue in ("good", "bad", "bad-poison", "other"):  # the emulator is the test process's, shared
            await backend.delete_queue(queue)
        for queue, count in (("good", 20), ("bad", 5), ("other", 3)):
            await backend.create_queue(queue)
            for n in range(count):
                await backend.put(queue, encode(f"{queue}-{n}", "base64"))
    finally:
        await backend.close()


async def _counts(connection: str) -> dict[str, int]:
    backend = open_backend(connection, Path("."))
    try:
        return {queue: await backend.approximate_count(queue) for queue in ("good", "bad", "bad-poison", "other")}
    finally:
        await backend.close()

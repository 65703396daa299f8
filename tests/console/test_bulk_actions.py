"""Requeue all and purge from the console of a running worker whose function poisons every message it is given:
each answers at once and runs beside the request, the state shows it, and it ends having moved at most what the
poison queue held, although the host poisons every requeued message again at once; and so does ``worker poison
requeue`` beside the same worker."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_cli
from tests.console.support import APP, ConsoleHost
from tests.host.processes import WorkerProcess, worker_environment, write_host_yaml
from tests.support import free_port, poll
from worker.backends.registry import open_backend

pytestmark = pytest.mark.subprocess

TOKEN = "bulk-actions-test-token"
POISON = "console-fragile-poison"


async def counted(folder: Path, queue: str) -> int:
    """How many messages ``queue`` of the host's embedded queue holds, visible or not."""
    backend = open_backend(None, folder)
    try:
        return await backend.approximate_count(queue)
    finally:
        await backend.close()


def test_requeue_all_and_purge_answer_at_once_and_end_with_what_was_there(tmp_path: Path) -> None:
    port = free_port()
    config = write_host_yaml(tmp_path, worker={"httpPort": port, "drainTimeout": "2s"})
    worker = WorkerProcess(config, worker_environment(CONSOLE_DIR=str(tmp_path), WORKER_HTTP_TOKEN=TOKEN), app=APP)
    host = ConsoleHost(worker.start(), port, tmp_path, TOKEN)
    try:
        worker.wait_for_log("host started")
        for number in range(4):
            host.send(POISON, f"poisoned {number}")

        def fragile(state: dict[str, Any], key: str) -> list[Any]:
            return [entry for entry in state[key] if entry["function"] == "fragile"]

        def settled(poisoned: int) -> bool:
            """``poisoned`` messages in the poison queue, and none left in the trigger queue."""
            return (
                asyncio.run(counted(host.folder, POISON)) == poisoned
                and asyncio.run(counted(host.folder, "console-fragile")) == 0
            )

        for action in ("requeue-all", "purge"):
            began = time.monotonic()
            status, answer = host.request(f"/console/api/poison/fragile/{action}", method="POST", token=TOKEN)
            assert (status, answer["action"], answer["running"]) == (202, action, True), answer
            assert time.monotonic() - began < 5

            def ended(action: str = action) -> dict[str, Any] | None:
                [bulk] = fragile(host.state(), "poisonActions")
                return bulk if bulk["action"] == action and not bulk["running"] else None

            bulk = poll(ended, 20, what=f"{action} to end")
            assert (bulk["messages"], bulk["most"], bulk["error"]) == (4, 4, None)
            # Each requeued message failed again and is back in the poison queue (not taken again); purge empties it.
            poll(lambda action=action: settled(4 if action == "requeue-all" else 0), 15, what=f"the queues after {action}")
            if action == "requeue-all":  # the command, beside the same running worker, likewise ends
                ran = run_cli(tmp_path, "poison", "requeue", "console-fragile", "--json")
                assert ran.returncode == 0, ran.stderr
                assert json.loads(ran.stdout) == {"action": "requeue", "queue": POISON, "messages": 4, "before": 4}
                poll(lambda: settled(4), 15, what="the queues after worker poison requeue")
        assert [line["messages"] for line in worker.lines() if line.get("event") == "poison action from the console"] == [
            4,
            4,
        ]
    finally:
        worker.stop()

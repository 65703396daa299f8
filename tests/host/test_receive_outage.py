"""Receives that fail through a storage outage are logged once when it begins and once when it ends, with the count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import apoll, captured_logs, running
from worker import QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend, TransientError, put_creating
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode
from worker.runtime import host as host_module
from worker.runtime import listener as listener_module
from worker.settings.config import HostConfig

FAILURES = 4


async def _true(value: bool) -> bool:
    return value


async def test_an_outages_failed_receives_are_logged_once_then_counted_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = f"sqlite:///{tmp_path / 'q.sqlite3'}"
    real_open = host_module.open_backend
    failed: list[int] = []

    def failing_open(connection: str | None, base_dir: Path, **kwargs: Any) -> QueueBackend:
        backend = real_open(connection, base_dir, **kwargs)
        receive = backend.receive

        async def flaky(*args: Any, **kwargs: Any) -> Any:
            if len(failed) < FAILURES:
                failed.append(1)
                raise TransientError("storage unreachable (injected)")
            return await receive(*args, **kwargs)

        backend.receive = flaky  # type: ignore[method-assign]
        return backend

    monkeypatch.setattr(host_module, "open_backend", failing_open)
    handled: list[str] = []
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="outage")
    async def work(msg: QueueMessage) -> None:
        handled.append(msg.get_body().decode())

    sender = open_backend(storage, tmp_path)
    try:
        await put_creating(sender, "outage", encode("after the outage", "base64"))
    finally:
        await sender.close()
    config = HostConfig(
        base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=1, connections={"AzureWebJobsStorage": storage}
    )
    with captured_logs(monkeypatch, listener_module) as logs:
        async with running(app, config):
            await apoll(lambda: _true(handled == ["after the outage"]), 30, what="the message after the outage")
    # At INFO: the first failure and the end, the failures between them counted (each a DEBUG line).
    said = [line for line in logs if line["event"].startswith("receive")]
    assert [(line["event"], line["log_level"]) for line in said] == [
        ("receive failed; backing off", "error"),
        ("receives work again", "info"),
    ], said
    assert said[-1]["failed_receives"] == FAILURES

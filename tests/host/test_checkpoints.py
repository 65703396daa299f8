"""Resumable work inside one host process: ``msg.checkpoint`` replaces a held message's content, on every backend
that can update content (the embedded queue and Azurite; OCI Queue is refused at start, see test_backend_limits).

The host runs as a task on the test's event loop; the test reads the queue through a backend of its own, as another
process would. The kill -9 scenario, with real processes, is tests/host/test_checkpoint_resume.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support import apoll, running
from worker import CheckpointFailed, Poison, QueueMessage, WorkerApp
from worker.backends.queues import MessageTooLarge, QueueBackend, QueueNotFound
from worker.bindings.encoding import decode, encode
from worker.settings.config import HostConfig

QUEUE = "chunks"


@pytest.fixture
def config(tmp_path: Path, connection: str | None) -> HostConfig:
    return HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        lease_duration=600,
        drain_timeout=1,
        connections={"AzureWebJobsStorage": connection} if connection else {},
    )


def checkpointing(handler: Callable[..., Any], *, checkpoints: bool = True) -> WorkerApp:
    app = WorkerApp()
    app.queue_trigger(arg_name="msg", queue_name=QUEUE, checkpoints=checkpoints)(handler)
    return app


async def put(backend: QueueBackend, body: str, encoding: str = "base64") -> str:
    return (await backend.put(QUEUE, encode(body, encoding))).id


async def settled(host: Any, counter: str, n: int = 1) -> bool:
    return host.metrics.get(counter) >= n


async def empty(backend: QueueBackend, queue: str = QUEUE) -> bool:
    return await backend.approximate_count(queue) == 0


async def test_a_retry_reads_the_last_checkpoint_which_the_handler_sees_at_once(
    config: HostConfig, queue: QueueBackend
) -> None:
    """The first attempt checkpoints twice and fails; the retry reads the second checkpoint, and the dequeue count
    is the receives' (2), not the checkpoints'."""
    attempts: list[tuple[int, Any]] = []
    seen_after: list[Any] = []

    async def handler(msg: QueueMessage) -> None:
        attempts.append((msg.dequeue_count, msg.get_json()))
        if msg.dequeue_count == 1:
            await msg.checkpoint_async({"done": 1})
            seen_after.append(msg.get_json())
            await msg.checkpoint_async(b'{"done": 2}')
            seen_after.append(msg.get_json())
            raise RuntimeError("crash after two chunks")

    await put(queue, '{"done": 0}')
    async with running(checkpointing(handler), config) as host:
        await apoll(lambda: settled(host, "succeeded"), 20, what="the retry to succeed")
        await apoll(lambda: empty(queue), 10, what="the message to be deleted")
        assert host.metrics.get("checkpoints") == 2
        assert host.metrics.get("leases_lost") == 0
    assert seen_after == [{"done": 1}, {"done": 2}], "get_json did not show the checkpoint at once"
    assert attempts == [(1, {"done": 0}), (2, {"done": 2})]


async def test_checkpoints_and_renewals_take_turns_on_one_receipt(config: HostConfig, queue: QueueBackend) -> None:
    """A sync handler checkpoints between renewals (3 s leases): each renewal uses the receipt the checkpoint before
    it got (Azure hands out a new one at every update), each checkpoint the renewal's, and the completion the last
    one. A stale receipt anywhere would lose the lease."""
    rounds = 2
    host_box: dict[str, Any] = {}
    receipts: list[str | None] = []

    def next_renewal(msg: QueueMessage) -> None:
        metrics = host_box["host"].metrics
        before = metrics.get("lease_renewals")
        wait_until(lambda: metrics.get("lease_renewals") > before, msg)

    def handler(msg: QueueMessage) -> None:
        for step in range(1, rounds + 1):
            next_renewal(msg)
            msg.checkpoint(f"step {step}")
            receipts.append(msg.pop_receipt)
        next_renewal(msg)

    await put(queue, "step 0")
    async with running(checkpointing(handler), replace(config, lease_duration=3)) as host:
        host_box["host"] = host
        await apoll(lambda: settled(host, "succeeded"), 30, what="the handler to finish")
        await apoll(lambda: empty(queue), 10, what="the message to be deleted with the last receipt")
        assert host.metrics.get("leases_lost") == 0
        assert host.metrics.get("checkpoints") == rounds
        assert host.metrics.get("lease_renewals") >= rounds + 1
    if queue.capabilities.new_receipt_on_update:
        assert len(set(receipts)) == rounds, f"a checkpoint did not take the receipt its update returned: {receipts}"


def wait_until(check: Callable[[], bool], msg: QueueMessage, timeout: float = 20) -> None:
    """In a handler's thread: wait for ``check`` with a deadline, giving up when the host cancels the invocation."""
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        if msg.cancelled.wait(0.05):
            raise RuntimeError("the host gave up on the invocation")
    raise AssertionError(f"timed out after {timeout}s in the handler")


async def test_a_checkpoint_on_a_lost_lease_raises_and_stores_nothing(config: HostConfig, queue: QueueBackend) -> None:
    """Another receiver holds the message now (its receipt rotated behind the host's back): the checkpoint raises
    CheckpointFailed, the lease is marked lost, the completion is skipped, and the other holder reads the content it
    was given, not the checkpoint."""
    ready = threading.Event()
    go = threading.Event()
    seen: dict[str, Any] = {}

    def handler(msg: QueueMessage) -> None:
        seen["msg"] = msg
        ready.set()
        go.wait(20)
        try:
            msg.checkpoint("from the host that lost it")
        except CheckpointFailed as exc:
            seen["error"] = str(exc)
        seen["lease_lost"] = msg.lease_lost.is_set()
        seen["body"] = msg.get_body()
        returned.set()

    returned = threading.Event()
    message_id = await put(queue, "original")
    async with running(checkpointing(handler), config) as host:
        await asyncio.to_thread(ready.wait, 10)
        stolen = await queue.update(QUEUE, message_id, seen["msg"].pop_receipt, 600)
        go.set()
        await apoll(lambda: settled(host, "completions_skipped"), 10, what="the completion to be skipped")
        # The failed checkpoint marks the lease lost before it raises, so the host may skip the completion while the
        # handler has yet to record the error (it did once, on a loaded machine): wait for the handler to return.
        assert await asyncio.to_thread(returned.wait, 10), "the handler did not return"
        assert host.metrics.get("leases_lost") == 1
        assert host.metrics.get("checkpoints") == 0
    assert "was not checkpointed: its lease was lost (PopReceiptMismatch)" in seen["error"]
    assert seen["lease_lost"] is True
    assert seen["body"] == b"original", "a failed checkpoint changed what the handler sees"
    await queue.update(QUEUE, message_id, stolen.pop_receipt, 0)
    [again] = await queue.receive(QUEUE, 1, 30)
    assert decode(again.content, "base64") == b"original"


@pytest.mark.parametrize("encoding", ["base64", "none"])
async def test_a_checkpoint_is_stored_under_message_encoding_and_poisoned_as_stored(
    config: HostConfig, queue: QueueBackend, encoding: str
) -> None:
    """Content goes to the queue as a put would store it (messageEncoding), and the poison copy is of the message as
    stored: what a requeue should resume from."""

    async def handler(msg: QueueMessage) -> None:
        await msg.checkpoint_async("naïve ✓ step 1")
        raise Poison("cannot go on")

    await put(queue, "step 0", encoding)
    async with running(checkpointing(handler), replace(config, message_encoding=encoding)) as host:
        await apoll(lambda: settled(host, "poisoned"), 20, what="the message to be poisoned")

    async def poisoned() -> list[Any]:
        try:
            return await queue.peek(f"{QUEUE}-poison", 32)
        except QueueNotFound:
            return []

    [copy] = await apoll(poisoned, 10, what="the poison copy")
    assert copy.content == encode("naïve ✓ step 1", encoding)


async def test_misused_checkpoints_are_refused_before_anything_is_stored(config: HostConfig, queue: QueueBackend) -> None:
    """A checkpoint that cannot be right fails in the handler, naming the fix, and stores nothing: the blocking form
    on the event loop, a value that is not a body, content over the backend's limit once encoded, and a function
    that did not declare checkpoints."""
    errors: dict[str, str] = {}
    limit = queue.limits.max_message_bytes

    async def declared(msg: QueueMessage) -> None:
        for what, call in (
            ("blocking", lambda: msg.checkpoint("x")),
            ("type", lambda: msg.checkpoint_async(3.5)),  # type: ignore[arg-type]
            ("size", lambda: msg.checkpoint_async(b"a" * (limit * 3 // 4 + 1))),  # within the limit before base64
        ):
            try:
                result = call()
                if asyncio.iscoroutine(result):
                    await result
            except (RuntimeError, TypeError, MessageTooLarge) as exc:
                errors[what] = f"{type(exc).__name__}: {exc}"
        errors["body"] = msg.get_body().decode()

    async def undeclared(msg: QueueMessage) -> None:
        try:
            await msg.checkpoint_async("x")
        except RuntimeError as exc:
            errors["undeclared"] = str(exc)

    app = checkpointing(declared)
    app.queue_trigger(arg_name="msg", queue_name="plain")(undeclared)
    await put(queue, "untouched")
    await queue.create_queue("plain")
    await queue.put("plain", encode("x", "base64"))
    async with running(app, config) as host:
        await apoll(lambda: settled(host, "succeeded", 2), 20, what="both handlers to finish")
        assert host.metrics.get("checkpoints") == 0
    assert errors.pop("size").startswith("MessageTooLarge: message is "), errors
    assert errors == {
        "blocking": "RuntimeError: msg.checkpoint() waits for storage and would block the event loop: in an async "
        "handler, await msg.checkpoint_async(...)",
        "type": "TypeError: a checkpoint takes str, bytes, or a dict or list (stored as JSON), not float",
        "body": "untouched",
        "undeclared": "msg.checkpoint needs checkpoints=True on @app.queue_trigger, so that a backend that cannot "
        "change a message's content is refused at start",
    }

"""WorkerApp: registering queue-triggered functions with the Azure Functions v2 decorators."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker import InputStream, Out, QueueMessage
from worker.app import WorkerApp
from worker.bindings.blobs import BlobOutput
from worker.model import FunctionSpec


def test_public_api_exports_app_message_and_out() -> None:
    import worker
    from worker import QueueMessage
    from worker import WorkerApp as PublicApp

    assert PublicApp is WorkerApp
    assert QueueMessage.__module__ == "worker.message"
    # The types middleware hooks receive are public too, so that a middleware imports nothing from the runtime.
    assert set(worker.__all__) == {
        "Context",
        "InputStream",
        "InvocationFailed",
        "Middleware",
        "Out",
        "Poison",
        "QueueMessage",
        "WorkerApp",
        "Invocation",
        "FunctionSpec",
        "Result",
        "Outcome",
        "Finished",
        "Fate",
        "CheckpointFailed",
        "Delivery",
        "FunctionOptions",
        "Lease",
        "RawMessage",
        "QueueBackend",
    }
    assert all(getattr(worker, name).__module__.split(".")[1] not in {"runtime", "ops"} for name in worker.__all__)


def test_sync_handler_is_registered_with_its_settings() -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="orders", connection="OrdersStorage")
    def handle(msg: object) -> None:
        pass

    assert app.functions == [
        FunctionSpec(
            name="handle",
            handler=handle,
            arg_name="msg",
            queue_name="orders",
            connection="OrdersStorage",
            is_async=False,
            directory=str(Path(__file__).resolve().parent),
        )
    ]


def test_async_handler_is_marked_async() -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="orders")
    async def handle(msg: object) -> None:
        pass

    [spec] = app.functions
    assert spec.is_async is True


def test_a_function_that_names_no_connection_has_none() -> None:
    """None: AzureWebJobsStorage when it is set, else the embedded queue (resolved by the host at start)."""
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="orders")
    def handle(msg: object) -> None:
        pass

    assert app.functions[0].connection is None


def test_trigger_parameter_annotated_str_or_bytes_gets_the_body_kind() -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="texts")
    def text(msg: str) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="raws")
    def raw(msg: bytes) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="whole")
    def whole(msg: QueueMessage) -> None:
        pass

    @app.queue_trigger(arg_name="msgs", queue_name="batches", cardinality="many")
    def batch(msgs: list[QueueMessage]) -> None:
        pass

    assert {s.name: s.trigger_kind for s in app.functions} == {
        "text": "str",
        "raw": "bytes",
        "whole": "object",
        "batch": "object",
    }


def test_checkpoints_are_declared_on_the_trigger_and_need_the_message_itself() -> None:
    """``checkpoints=True`` is how a function says it replaces its message's content (start-up checks the backend);
    a parameter that gets the body alone has no message to checkpoint, so that is refused at once."""
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="chunks", checkpoints=True)
    def chunked(msg: QueueMessage) -> None:
        pass

    @app.queue_trigger(arg_name="msgs", queue_name="batches", cardinality="many", checkpoints=True)
    def batch(msgs: list[QueueMessage]) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="plain")
    def plain(msg: QueueMessage) -> None:
        pass

    assert {s.name: s.extra("checkpoints", False) for s in app.functions} == {"chunked": True, "batch": True, "plain": False}

    @app.queue_trigger(arg_name="msg", queue_name="texts", checkpoints=True)
    def text(msg: str) -> None:
        pass

    [problem] = app.problems
    assert (
        "function text: queue_trigger: checkpoints=True needs the QueueMessage itself as 'msg' (it is annotated str"
        in problem
    )
    assert "text" not in {s.name for s in app.functions}


def test_blob_bindings_stack_in_any_order_with_their_kinds() -> None:
    app = WorkerApp()

    @app.blob_input(arg_name="stream", path="inbox/{queueTrigger}")
    @app.queue_trigger(arg_name="msg", queue_name="orders", connection="Orders")
    @app.blob_input(arg_name="text", path="inbox/{id}.txt", connection="Blobs")
    @app.blob_input(arg_name="untyped", path="inbox/x", data_type="binary")
    @app.blob_output(arg_name="out", path="outbox/{id}")
    def handle(msg: QueueMessage, stream: InputStream, text: str, untyped, out: Out[str]) -> None:  # type: ignore[no-untyped-def]
        pass

    [spec] = app.functions
    assert sorted((b.arg_name, b.path, b.connection, b.kind) for b in spec.inputs) == [
        ("stream", "inbox/{queueTrigger}", None, "object"),
        ("text", "inbox/{id}.txt", "Blobs", "str"),
        ("untyped", "inbox/x", None, "bytes"),
    ]
    assert spec.outputs == (BlobOutput("out", "outbox/{id}", None),)


def test_blob_bindings_are_refused_on_batches_and_need_a_container() -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msgs", queue_name="orders", cardinality="many")
    @app.blob_output(arg_name="out", path="out/{id}")
    def batch(msgs: list[QueueMessage], out: Out[str]) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="orders")
    @app.blob_input(arg_name="x", path="no-container")
    def single(msg: QueueMessage, x: bytes) -> None:
        pass

    assert len(app.problems) == 2
    assert "function batch: queue_trigger: blob bindings need cardinality 'one'" in app.problems[0]
    assert "function single: blob_input 'x': blob path 'no-container' must look like 'container/blob'" in app.problems[1]
    assert app.functions == []  # neither runs without what it declared


def test_decorators_return_the_handler_unchanged() -> None:
    app = WorkerApp()

    def handle(msg: str) -> str:
        return msg.upper()

    decorated = app.function_name("shout")(app.queue_trigger(arg_name="msg", queue_name="orders")(handle))

    assert decorated is handle
    assert decorated("hi") == "HI"


def test_function_name_above_queue_trigger() -> None:
    app = WorkerApp()

    @app.function_name("x")
    @app.queue_trigger(arg_name="msg", queue_name="orders")
    def handle(msg: object) -> None:
        pass

    assert [spec.name for spec in app.functions] == ["x"]


def test_function_name_below_queue_trigger() -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="orders")
    @app.function_name("x")
    def handle(msg: object) -> None:
        pass

    assert [spec.name for spec in app.functions] == ["x"]


def test_duplicate_function_names_are_rejected() -> None:
    app = WorkerApp()

    @app.function_name("same")
    @app.queue_trigger(arg_name="msg", queue_name="first")
    def one(msg: object) -> None:
        pass

    @app.function_name("same")
    @app.queue_trigger(arg_name="msg", queue_name="second")
    def two(msg: object) -> None:
        pass

    with pytest.raises(ValueError, match="'same'"):
        _ = app.functions


def test_duplicate_python_names_are_rejected() -> None:
    """Without @app.function_name, two handlers both called ``main`` collide."""
    app = WorkerApp()

    def main(msg: object) -> None:
        pass

    def other_main(msg: object) -> None:
        pass

    other_main.__name__ = "main"
    app.queue_trigger(arg_name="msg", queue_name="first")(main)
    app.queue_trigger(arg_name="msg", queue_name="second")(other_main)

    with pytest.raises(ValueError, match="'main'"):
        _ = app.functions


def test_function_name_above_renames_before_names_are_checked() -> None:
    """Two Python functions called ``main``, one renamed from above (Azure's documented layout): no clash."""
    app = WorkerApp()

    def main(msg: object) -> None:
        pass

    app.queue_trigger(arg_name="msg", queue_name="first")(main)

    @app.function_name("other")
    @app.queue_trigger(arg_name="msg", queue_name="second")
    def main(msg: object) -> None:  # noqa: F811 - the same Python name on purpose
        pass

    assert sorted(f.name for f in app.functions) == ["main", "other"]


@pytest.mark.parametrize("queue_name", ["", "  "])
def test_a_queue_name_must_be_given(queue_name: str) -> None:
    """Whether the service takes a name depends on the backend (checked at start); that there is one does not."""
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    def handle(msg: object) -> None:
        pass

    assert app.problems == [f"function handle: queue_trigger: queue_name must be a non-empty string, got {queue_name!r}"]


@pytest.mark.parametrize("queue_name", ["abc", "a-b", "a" * 63, "0rders-2"])
def test_valid_queue_names_are_accepted(queue_name: str) -> None:
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name=queue_name)
    def handle(msg: object) -> None:
        pass

    assert app.functions[0].queue_name == queue_name


def test_handler_without_the_arg_name_parameter_is_rejected() -> None:
    app = WorkerApp()
    trigger = app.queue_trigger(arg_name="message", queue_name="orders")

    def handle(msg: object) -> None:
        pass

    trigger(handle)
    assert len(app.problems) == 1 and "has no parameter 'message' for the queue message" in app.problems[0]
    assert app.functions == []


def test_every_decorator_used_wrongly_is_kept_and_the_rest_still_register() -> None:
    """Several mistakes in one module are all listed at start, not one per run; the import itself succeeds."""
    app = WorkerApp()

    @app.queue_trigger(arg_name="msg", queue_name="a")
    def no_such_parameter(message: QueueMessage) -> None:
        pass

    @app.function_name("renamed")
    @app.queue_trigger(arg_name="msg", queue_name="b", cardinality="several")
    def bad_cardinality(msg: QueueMessage) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="c")
    @app.queue_output(arg_name="out", queue_name="d")
    def no_output_parameter(msg: QueueMessage) -> None:
        pass

    @app.retry(strategy="sometimes")
    @app.queue_trigger(arg_name="msg", queue_name="e")
    def bad_retry(msg: QueueMessage) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="fine")
    def fine(msg: QueueMessage) -> None:
        pass

    problems = app.problems
    assert [p.split(":")[0] for p in problems] == [
        "function no_such_parameter",
        "function bad_cardinality",
        "function no_output_parameter",
        "function bad_retry",
    ]
    assert "queue_output 'out': has no parameter 'out'" in problems[2]
    assert "retry:" in problems[3]
    assert [s.name for s in app.functions] == ["fine"]

"""An ``azure.functions.FunctionApp`` runs on the host unchanged: the docs sample as ``worker run``, the rest in-process.

The in-process tests run a Host on the test's event loop (as tests/host does)
over the embedded queue in the test's folder, and talk to the same queue file
through a second backend.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
import structlog
import yaml

import worker.runtime.host as host_module
from tests.compat import features_app
from tests.support import apoll, poll, running
from worker import QueueMessage, WorkerApp
from worker.backends.queues import QueueBackend, QueueNotFound, RawMessage
from worker.backends.registry import open_backend
from worker.bindings.encoding import decode, encode
from worker.compat.functions import SkippedFunction, from_function_app
from worker.compat.loading import AppLoadError, load_app
from worker.settings.config import HostConfig

REPO = Path(__file__).resolve().parents[2]
DOCS_SAMPLE = Path(__file__).resolve().parent / "docs_sample"
HTTP_NOT_RUN = "function HttpHello has a http trigger; this host runs queue triggers only; it is not run"


EMBEDDED = "sqlite:///.worker/queues.sqlite3"


@pytest.fixture(autouse=True)
def _embedded_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    """AzureWebJobsStorage names the embedded queue beside host.yaml, chosen explicitly as a user would."""
    monkeypatch.setenv("AzureWebJobsStorage", EMBEDDED)


@pytest.fixture
def features() -> Iterator[Any]:
    features_app.seen.clear()
    yield features_app
    features_app.seen.clear()


@pytest.fixture
def config(tmp_path: Path) -> HostConfig:
    return HostConfig(
        base_dir=tmp_path,
        max_polling_interval=0.2,
        lease_duration=600,
        new_batch_threshold=8,
        drain_timeout=1,
        max_dequeue_count=2,
        connections={"AzureWebJobsStorage": EMBEDDED},
    )


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[QueueBackend]:
    """The embedded queue a host with base_dir ``tmp_path`` uses, as another process would see it."""
    b = open_backend(None, tmp_path)
    yield b
    await b.close()


async def put(backend: QueueBackend, queue: str, body: str) -> str:
    await backend.create_queue(queue)
    return (await backend.put(queue, encode(body, "base64"))).id


async def bodies(backend: QueueBackend, queue: str) -> list[str]:
    """The bodies waiting on ``queue`` (none when it does not exist)."""
    try:
        return [decode(m.content, "base64").decode("utf-8") for m in await backend.peek(queue, 32)]
    except QueueNotFound:
        return []


def calls(features: Any, function: str) -> list[tuple[func.QueueMessage, str]]:
    return [(message, thread) for name, message, thread in features.seen if name == function]


# -- the documentation's sample as a real `worker run` ---------------------------------------------------------------


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER__")}
    env["AzureWebJobsStorage"] = EMBEDDED
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(DOCS_SAMPLE)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ beside the sample
    return env


def _worker(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=cwd,
        env=_worker_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _count(cwd: Path, queue: str) -> int:
    result = _worker(cwd, "queues", "--json", "--config", "host.yaml")
    assert result.returncode == 0, result.stderr
    return next((q["approximateMessageCount"] for q in json.loads(result.stdout) if q["name"] == queue), -1)


@pytest.mark.subprocess
def test_docs_sample_runs_unchanged_under_worker_run(tmp_path: Path) -> None:
    (tmp_path / "host.yaml").write_text(
        yaml.safe_dump({"version": "1.0", "extensions": {"queues": {"maxPollingInterval": "200ms"}}}), encoding="utf-8"
    )
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--app", "function_app:app", "--config", "host.yaml"],
            cwd=tmp_path,
            env=_worker_env(),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:

        def started() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"worker exited with {proc.returncode}:\n{log_path.read_text()}")
            return '"host started"' in log_path.read_text()

        poll(started, 30, what="the worker to start")
        sent = _worker(tmp_path, "send", "myqueue-items", "hello from the docs", "--config", "host.yaml")
        assert sent.returncode == 0, sent.stderr

        line = "Python Queue trigger processed a message: hello from the docs"
        poll(lambda: line in log_path.read_text(), 30, what="the sample's log line")
        poll(lambda: _count(tmp_path, "myqueue-items") == 0, 30, what="myqueue-items to empty")

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log_path.read_text()
    stopped = [json.loads(x) for x in text.splitlines() if '"host stopped"' in x]
    assert stopped and stopped[-1]["succeeded"] == 1, text
    assert "Auth level is not applied" not in text  # azure-functions' notice for non-HTTP apps is kept out


@pytest.mark.subprocess
def test_function_app_without_queue_triggers_exits_2_naming_each_function(tmp_path: Path) -> None:
    (tmp_path / "web_only_app.py").write_text(
        "import azure.functions as func\n"
        "app = func.FunctionApp()\n"
        "@app.route(route='hello')\n"
        "def hello(req: func.HttpRequest) -> func.HttpResponse:\n"
        "    return func.HttpResponse('hi')\n"
        "@app.timer_trigger(schedule='0 */5 * * * *', arg_name='timer')\n"
        "def tick(timer: func.TimerRequest) -> None:\n"
        "    pass\n",
        encoding="utf-8",
    )
    result = _worker(tmp_path, "run", "--burst", "--app", "web_only_app:app")

    assert result.returncode == 2, result.stderr
    assert "web_only_app:app is an azure.functions.FunctionApp without a queue-triggered function" in result.stderr
    assert "function hello has a http trigger; this host runs queue triggers only; it is not run" in result.stderr
    assert "function tick has a timer trigger; this host runs queue triggers only; it is not run" in result.stderr
    assert "Traceback" not in result.stderr


# -- translation -------------------------------------------------------------------------------------------------------


def test_function_names_queues_and_connections_are_honoured(features: Any) -> None:
    converted = from_function_app(features.app)

    specs = {spec.name: spec for spec in converted.app.functions}
    assert sorted(specs) == ["AsyncAudit", "Echo", "ProcessOrder", "fragile"]  # fragile has no @app.function_name
    assert {name: (s.queue_name, s.arg_name, s.connection) for name, s in specs.items()} == {
        "ProcessOrder": ("orders", "order", "AzureWebJobsStorage"),
        "AsyncAudit": ("audit", "item", "AzureWebJobsStorage"),
        "fragile": ("fragile", "job", "AzureWebJobsStorage"),
        "Echo": ("echo", "message", "AzureWebJobsStorage"),
    }
    assert [(b.queue_name, b.connection) for b in specs["ProcessOrder"].outputs] == [("outqueue", "AzureWebJobsStorage")]
    assert [b.queue_name for b in specs["Echo"].outputs] == ["echo-out"]


def test_sync_functions_stay_sync_and_async_ones_async(features: Any) -> None:
    specs = {spec.name: spec for spec in from_function_app(features.app).app.functions}

    assert {name: spec.is_async for name, spec in specs.items()} == {
        "ProcessOrder": False,
        "AsyncAudit": True,
        "fragile": False,
        "Echo": False,
    }
    assert not asyncio.iscoroutinefunction(specs["ProcessOrder"].handler)
    assert asyncio.iscoroutinefunction(specs["AsyncAudit"].handler)


def test_non_queue_triggers_are_listed_as_not_run(features: Any) -> None:
    converted = from_function_app(features.app)

    assert converted.skipped == (SkippedFunction("HttpHello", "httpTrigger", HTTP_NOT_RUN),)
    assert "HttpHello" not in {spec.name for spec in converted.app.functions}


def test_load_app_logs_one_warning_counting_the_functions_not_run(tmp_path: Path) -> None:
    with structlog.testing.capture_logs() as logs:
        app = load_app("tests.compat.features_app:app", tmp_path)

    assert isinstance(app, WorkerApp)
    assert len(app.functions) == 4
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert [(w["event"], w["count"]) for w in warnings] == [
        ("functions not run: this host runs enabled queue-triggered functions only", 1)
    ]
    assert app.not_run == (HTTP_NOT_RUN,)  # the list, logged at DEBUG and shown by the console


def test_function_app_without_queue_triggers_is_refused_by_load_app(monkeypatch: pytest.MonkeyPatch) -> None:
    web_only = func.FunctionApp()

    @web_only.timer_trigger(schedule="0 */5 * * * *", arg_name="timer")
    def tick(timer: func.TimerRequest) -> None:
        pass

    module = type(sys)("compat_web_only")
    module.app = web_only  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "compat_web_only", module)

    assert from_function_app(web_only).app.functions == []
    with pytest.raises(AppLoadError, match="(?s)without a queue-triggered function .*function tick has a timer trigger"):
        load_app("compat_web_only:app", Path.cwd())


def test_converting_the_same_app_twice_works(features: Any) -> None:
    """FunctionApp.get_functions() refuses every name on a second call; the conversion must not."""
    first = from_function_app(features.app)
    second = from_function_app(features.app)

    assert [s.name for s in first.app.functions] == [s.name for s in second.app.functions]


def test_every_problem_of_every_function_is_listed_and_the_sound_functions_still_convert() -> None:
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="msg", queue_name="images", connection="AzureWebJobsStorage")
    @app.table_input(arg_name="row", table_name="sizes", connection="AzureWebJobsStorage")
    @app.generic_output_binding(arg_name="bus", type="serviceBus", queue_name="done", connection="Bus")
    def resize(msg: func.QueueMessage, row: str, bus: func.Out[str]) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="%ORDERS_QUEUE%", connection="AzureWebJobsStorage")
    @app.blob_output(arg_name="out", path="%ARCHIVE%/{id}", connection="AzureWebJobsStorage")
    def orders(msg: dict, out: func.Out[str]) -> None:  # type: ignore[type-arg]
        pass

    @app.queue_trigger(arg_name="message", queue_name="jobs", connection="AzureWebJobsStorage")
    def job(msg: func.QueueMessage, table: str) -> None:
        pass

    @app.queue_trigger(arg_name="msg", queue_name="plain", connection="")
    def plain(msg: func.QueueMessage) -> None:
        pass

    converted = from_function_app(app, environ={})

    assert [(s.name, s.connection) for s in converted.app.functions] == [("plain", "AzureWebJobsStorage")]
    assert converted.skipped == ()
    assert sorted(converted.problems) == sorted(
        [
            "function resize, input binding table (row): this host does not provide this binding type (it provides "
            "queue outputs and blob inputs and outputs)",
            "function resize, output binding serviceBus (bus): this host does not provide this binding type (it provides "
            "queue outputs and blob inputs and outputs)",
            "function orders, trigger queueTrigger (msg): parameter msg is annotated dict; a queue trigger binds "
            "func.QueueMessage, str or bytes",
            "function orders, trigger queueTrigger (msg): the queue name '%ORDERS_QUEUE%' refers to the app setting "
            "ORDERS_QUEUE, which is not set",
            "function orders, output binding blob (out): the path '%ARCHIVE%/{id}' refers to the app setting ARCHIVE, "
            "which is not set",
            "function job: job() has no parameter for binding(s) message",
            "function job: job() has no binding for parameter(s) msg, table",
        ]
    )


def test_queue_name_and_path_settings_are_read_from_the_app_settings() -> None:
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="msg", queue_name="%ORDERS_QUEUE%", connection="AzureWebJobsStorage")
    @app.blob_output(arg_name="out", path="%ARCHIVE%/{id}.json", connection="AzureWebJobsStorage")
    def orders(msg: func.QueueMessage, out: func.Out[str]) -> None:
        pass

    [spec] = from_function_app(app, environ={"ORDERS_QUEUE": "orders-eu", "ARCHIVE": "archive-eu"}).app.functions
    assert spec.queue_name == "orders-eu"
    assert [b.path for b in spec.outputs] == ["archive-eu/{id}.json"]


def test_disabled_functions_are_listed_and_the_rest_run() -> None:
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="msg", queue_name="one", connection="AzureWebJobsStorage")
    def first(msg: func.QueueMessage) -> None:
        pass

    @app.function_name("Second")
    @app.queue_trigger(arg_name="msg", queue_name="two", connection="AzureWebJobsStorage")
    def second(msg: func.QueueMessage) -> None:
        pass

    converted = from_function_app(
        app, environ={"AzureWebJobs.Second.Disabled": "true", "AzureWebJobs.first.Disabled": "false"}
    )
    assert [s.name for s in converted.app.functions] == ["first"]
    assert converted.disabled == ("Second",)
    assert from_function_app(app, environ={"AzureWebJobs__first__Disabled": "1"}).disabled == ("first",)


def test_trigger_parameters_typed_str_or_bytes_get_the_body() -> None:
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="msg", queue_name="texts", connection="AzureWebJobsStorage")
    @app.queue_output(arg_name="$return", queue_name="echo", connection="AzureWebJobsStorage")
    def text(msg: str) -> str:
        return msg.upper()

    @app.queue_trigger(arg_name="msg", queue_name="raw", connection="AzureWebJobsStorage")
    @app.queue_output(arg_name="$return", queue_name="echo", connection="AzureWebJobsStorage")
    def raw(msg: bytes) -> bytes:
        return msg[::-1]

    specs = {s.name: s for s in from_function_app(app, environ={}).app.functions}
    assert {name: s.trigger_kind for name, s in specs.items()} == {"text": "str", "raw": "bytes"}
    out: Any = worker_out()
    specs["text"].handler(msg="héllo", **{spec_return(specs["text"]): out})
    assert out.get() == "HÉLLO"
    specs["raw"].handler(msg=b"abc", **{spec_return(specs["raw"]): out})
    assert out.get() == b"cba"


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("text", "text"),
        (b"bytes", b"bytes"),
        (func.QueueMessage(body="from a message"), b"from a message"),
        (["one", func.QueueMessage(body="two")], ["one", b"two"]),
    ],
)
def test_queue_outputs_take_what_the_python_worker_converter_takes(value: Any, sent: Any) -> None:
    [spec] = from_function_app(_returning(value), environ={}).app.functions
    out: Any = worker_out()
    spec.handler(msg=_message(), **{spec_return(spec): out})
    assert out.get() == sent


@pytest.mark.parametrize("value", [{"a": 1}, 17, [b"bytes in a list"]])
def test_queue_outputs_refuse_what_the_python_worker_converter_refuses(value: Any) -> None:
    [spec] = from_function_app(_returning(value), environ={}).app.functions
    with pytest.raises(TypeError, match="a queue output"):
        spec.handler(msg=_message(), **{spec_return(spec): worker_out()})


def _returning(value: Any) -> func.FunctionApp:
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="msg", queue_name="jobs", connection="AzureWebJobsStorage")
    @app.queue_output(arg_name="$return", queue_name="out", connection="AzureWebJobsStorage")
    def job(msg: func.QueueMessage) -> Any:
        return value

    return app


def _message() -> QueueMessage:
    return QueueMessage(
        id="m1", body=b"x", dequeue_count=1, insertion_time=None, expiration_time=None, time_next_visible=None
    )


def worker_out() -> Any:
    from worker import Out

    return Out()


def spec_return(spec: Any) -> str:
    [binding] = spec.outputs
    return binding.arg_name


def test_functions_of_a_registered_blueprint_run_and_a_bare_blueprint_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bp = func.Blueprint()

    @bp.function_name(name="FromBlueprint")
    @bp.queue_trigger(arg_name="msg", queue_name="bp-jobs", connection="AzureWebJobsStorage")
    def from_blueprint(msg: func.QueueMessage) -> None:
        pass

    app = func.FunctionApp()
    app.register_functions(bp)
    assert [(s.name, s.queue_name) for s in from_function_app(app).app.functions] == [("FromBlueprint", "bp-jobs")]

    module = type(sys)("compat_blueprint_only")
    module.bp = bp  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "compat_blueprint_only", module)
    with pytest.raises(AppLoadError, match="is an azure.functions.Blueprint; register it in a FunctionApp"):
        load_app("compat_blueprint_only:bp", Path.cwd())


def test_returning_a_value_without_a_return_binding_fails_the_invocation() -> None:
    """As in Functions' Python worker: the value would otherwise be dropped without a word."""
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="msg", queue_name="jobs", connection="AzureWebJobsStorage")
    def job(msg: func.QueueMessage) -> str:
        return "lost"

    [spec] = from_function_app(app).app.functions
    with pytest.raises(RuntimeError, match="without a \\$return binding returned a non-None value"):
        spec.handler(msg=_message())


# -- running in a host -------------------------------------------------------------------------------------------------


async def test_handler_receives_an_azure_functions_queue_message_with_the_received_attributes(
    features: Any, config: HostConfig, backend: QueueBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    received: list[RawMessage] = []
    real_open = host_module.open_backend

    def spying_open(connection: str | None, base_dir: Path, **kwargs: Any) -> QueueBackend:
        opened = real_open(connection, base_dir, **kwargs)
        receive = opened.receive

        async def recorded(*args: Any, **kwargs: Any) -> list[RawMessage]:
            raws = await receive(*args, **kwargs)
            received.extend(raws)
            return raws

        opened.receive = recorded  # type: ignore[method-assign]
        return opened

    monkeypatch.setattr(host_module, "open_backend", spying_open)
    message_id = await put(backend, "orders", '{"order": 17}')
    async with running(from_function_app(features.app).app, config):
        await apoll(lambda: _now(calls(features, "ProcessOrder")), 15, what="ProcessOrder to be called")

    [(message, _thread)] = calls(features, "ProcessOrder")
    [raw] = [r for r in received if r.id == message_id]
    assert isinstance(message, func.QueueMessage)
    assert message.id == message_id
    assert message.get_body() == b'{"order": 17}'
    assert message.get_json() == {"order": 17}
    assert message.dequeue_count == 1
    assert message.pop_receipt and message.pop_receipt == raw.pop_receipt
    assert message.insertion_time == raw.insertion_time
    assert message.expiration_time == raw.expiration_time
    assert message.time_next_visible == raw.time_next_visible


async def test_output_is_sent_when_the_function_succeeds_and_not_when_it_fails(
    features: Any, config: HostConfig, backend: QueueBackend
) -> None:
    await put(backend, "orders", "A1")
    fragile_id = await put(backend, "fragile", "B2")
    async with running(from_function_app(features.app).app, config) as host:
        await apoll(lambda: _now(host.metrics.get("poisoned", "fragile") == 1), 15, what="fragile's message in poison")
        await apoll(lambda: _now(host.metrics.get("succeeded", "ProcessOrder") == 1), 15, what="ProcessOrder")

    assert await bodies(backend, "outqueue") == ["processed A1"]
    assert await bodies(backend, "fragile-out") == []
    attempts = calls(features, "fragile")
    assert [(m.id, m.dequeue_count) for m, _ in attempts] == [(fragile_id, 1), (fragile_id, 2)]  # max_dequeue_count 2


async def test_sync_function_runs_on_a_handler_thread_and_async_one_on_the_loop(
    features: Any, config: HostConfig, backend: QueueBackend
) -> None:
    await put(backend, "orders", "sync")
    await put(backend, "audit", "async")
    async with running(from_function_app(features.app).app, config):
        await apoll(
            lambda: _now(calls(features, "ProcessOrder") and calls(features, "AsyncAudit")), 15, what="both functions"
        )

    [(_, sync_thread)] = calls(features, "ProcessOrder")
    [(audited, async_thread)] = calls(features, "AsyncAudit")
    loop_thread = threading.current_thread().name
    assert sync_thread != loop_thread and sync_thread.startswith("handler")
    assert async_thread == loop_thread
    assert audited.get_body() == b"async"


async def test_return_binding_sends_the_return_value_and_context_is_passed(
    features: Any, config: HostConfig, backend: QueueBackend
) -> None:
    await put(backend, "echo", "hi")
    async with running(from_function_app(features.app).app, config):
        await apoll(lambda: bodies(backend, "echo-out"), 15, what="Echo's return value on echo-out")

    [sent] = await bodies(backend, "echo-out")
    function_name, invocation_id, body = sent.split(" ")
    assert (function_name, body) == ("Echo", "hi")
    uuid.UUID(invocation_id)


async def _now(value: Any) -> Any:
    return value


def test_an_app_that_fails_at_import_is_refused_naming_its_own_files_and_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "import_error_app.py").write_text("import json\n\nimport import_error_helper\n", encoding="utf-8")
    (tmp_path / "import_error_helper.py").write_text(
        "def connect():\n    raise ConnectionError('sign-in refused')\n\n\nconnect()\n", encoding="utf-8"
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("import_error_app", "import_error_helper"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    with pytest.raises(AppLoadError) as caught:
        load_app("import_error_app:app", tmp_path)
    assert str(caught.value).splitlines() == [
        "cannot import app module 'import_error_app': ConnectionError: sign-in refused",
        f'  File "{tmp_path / "import_error_app.py"}", line 3, in <module>',
        "    import import_error_helper",
        f'  File "{tmp_path / "import_error_helper.py"}", line 5, in <module>',
        "    connect()",
        f'  File "{tmp_path / "import_error_helper.py"}", line 2, in connect',
        "    raise ConnectionError('sign-in refused')",
    ]  # the app's frames, innermost last; none of the host's or importlib's


def test_a_function_app_whose_only_queue_function_is_refused_is_refused_for_that_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: "without a queue-triggered function this host can run (it has no functions)"."""
    only = func.FunctionApp()

    @only.queue_trigger(arg_name="msg", queue_name="orders", connection="AzureWebJobsStorage")
    @only.blob_output(arg_name="out", path="UPPER/x.txt", connection="AzureWebJobsStorage")
    def copy(msg: func.QueueMessage, out: func.Out[str]) -> None:
        out.set("x")

    module = type(sys)("compat_only_refused")
    module.app = only  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "compat_only_refused", module)
    with pytest.raises(AppLoadError) as caught:
        load_app("compat_only_refused:app", Path.cwd())
    assert "blob path 'UPPER/x.txt': container name 'UPPER' is not valid" in str(caught.value)
    assert "no functions" not in str(caught.value) and "without a queue-triggered function" not in str(caught.value)

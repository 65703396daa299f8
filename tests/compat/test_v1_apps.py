"""Functions v1 apps (a folder per function, each with function.json) run unchanged with ``worker run`` in their folder.

``tests/compat/v1_app`` is such an app, written for these tests to hold what
v1 apps use: ``scriptFile`` and ``entryPoint`` given or left to their defaults,
sync and async entry points, typed and untyped parameters, ``dataType``, blob
in -> blob out by ``{queueTrigger}``, ``$return`` to a blob, a queue output,
relative imports within a function's folder and of ``shared_code`` beside it
(``..shared_code`` and ``__app__.shared_code``), ``disabled`` naming a setting,
and an HTTP function. The functions not run raise at import: importing them
would fail the start. The Functions Python worker's own v1 queue app runs in
test_python_worker_apps.py, and its v1 Event Grid app's queue function here.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import azure.functions as func
import pytest
from azure.functions.blob import InputStream

from tests.azurite import Azurite
from tests.cli import run_cli
from tests.compat.test_function_app import bodies, put
from tests.compat.test_python_worker_apps import module_from_file
from tests.host.processes import worker_environment
from tests.support import apoll, running
from worker.backends.registry import open_backend, open_blob_store
from worker.compat.loading import AppLoadError, load_app
from worker.settings.config import HostConfig

V1_APP = Path(__file__).resolve().parent / "v1_app"


@pytest.fixture(autouse=True)
def own_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A v1 app loaded here puts its folder on sys.path and its modules under ``__app__``: both undone after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in [name for name in sys.modules if name == "__app__" or name.startswith("__app__.")]:
        del sys.modules[name]


@pytest.mark.subprocess
def test_worker_run_in_a_v1_app_folder_runs_its_queue_functions(azurite: Azurite, tmp_path: Path) -> None:
    """On Azurite (the embedded queue runs the same conversion; the storage is what differs)."""
    storage = azurite.connection_string
    tag = uuid.uuid4().hex[:8]
    settings = {
        "AzureWebJobsStorage": storage,
        "COPY_QUEUE": f"copy-{tag}",
        "REPORT_QUEUE": f"report-{tag}",
        "UNTYPED_QUEUE": f"untyped-{tag}",
        "FORWARD_QUEUE": f"forward-{tag}",
        "PAUSED_OFF": "true",
    }
    blob = f"{tag}.txt"

    async def seed() -> str:
        queues, blobs = open_backend(storage, tmp_path), open_blob_store(storage, tmp_path)
        try:
            await blobs.write("inbox", blob, b"payload")
            await put(queues, settings["COPY_QUEUE"], blob)
            await put(queues, settings["UNTYPED_QUEUE"], blob)
            return await put(queues, settings["REPORT_QUEUE"], "order-7")
        finally:
            await queues.close()
            await blobs.close()

    order_id = asyncio.run(seed())
    imports = tmp_path / "imports.txt"
    ran = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--burst"],
        cwd=V1_APP,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=worker_environment() | settings | {"V1_IMPORTS": str(imports)},
    )
    assert ran.returncode == 0, ran.stderr
    lines = [json.loads(line) for line in ran.stderr.splitlines() if line.startswith("{")]
    [host] = [line for line in lines if line["event"] == "host started"]
    assert imports.read_text().split() == [str(host["pid"])]  # imported once, by the process that runs it
    [not_run] = [line for line in lines if str(line["event"]).startswith("functions not run")]
    assert not_run["count"] == 2  # Paused and Hello, in one line

    async def results() -> tuple[bytes | None, bytes | None, list[str]]:
        queues, blobs = open_backend(storage, tmp_path), open_blob_store(storage, tmp_path)
        try:
            copied, report = await blobs.read("outbox", blob), await blobs.read("reports", f"{order_id}.txt")
            return (copied and copied.data, report and report.data, await bodies(queues, settings["FORWARD_QUEUE"]))
        finally:
            await queues.close()
            await blobs.close()

    copied, report, forwarded = asyncio.run(results())
    assert copied == f"[{blob}] payload".encode()  # blob in -> blob out by {queueTrigger}, through ..shared_code
    assert report == b"[Report: order-7]"  # async run() in report.py, $return, __app__.shared_code and from . import
    assert forwarded == [blob]  # untyped parameters, dataType string, a queue output


def _function(root: Path, name: str, function_json: str, code: str, script: str = "__init__.py") -> None:
    (root / name).mkdir(parents=True)
    (root / name / "function.json").write_text(function_json, encoding="utf-8")
    (root / name / script).write_text(textwrap.dedent(code), encoding="utf-8")


QUEUE = '{"bindings": [{"type": "queueTrigger", "direction": "in", "name": "msg", "queueName": "q"}]}'


def test_what_keeps_a_v1_function_from_running_is_listed_each_with_its_file(tmp_path: Path) -> None:
    app = tmp_path / "app"
    (app / "shared").mkdir(parents=True)
    (app / "shared" / "__init__.py").write_text("", encoding="utf-8")
    (app / "shared" / "settings.py").write_text("import os\n\nREGION = os.environ['REGION_NOT_SET']\n", encoding="utf-8")
    _function(app, "Broken", QUEUE, "from ..shared.settings import REGION\n\ndef main(msg):\n    pass\n")
    _function(app, "NoEntry", QUEUE, "def handle(msg):\n    pass\n")
    _function(app, "NotJson", '{"bindings": [}', "def main(msg):\n    pass\n")
    _function(app, "NoScript", QUEUE.replace('"bindings"', '"scriptFile": "run.py", "bindings"'), "x = 1\n")
    _function(app, "Fine", QUEUE, "def main(msg):\n    pass\n")

    with pytest.raises(AppLoadError) as caught:
        load_app(str(app), tmp_path)
    text = str(caught.value)
    assert "5 problem(s)" not in text and "4 problem(s)" in text, text
    assert "function Broken" in text and "cannot import __app__.Broken: KeyError: 'REGION_NOT_SET'" in text
    assert f'File "{app / "shared" / "settings.py"}", line 3, in <module>' in text  # the app's own line ...
    assert "importlib" not in text and "worker/compat" not in text  # ... and none of the host's
    assert "__init__.py has no function 'main'" in text
    assert f"function NotJson ({app / 'NotJson' / 'function.json'}): cannot be read:" in text and "line 1" in text
    assert f"scriptFile {app / 'NoScript' / 'run.py'} does not exist" in text


def test_a_return_output_is_named_return_where_the_start_refuses_it(azurite: Azurite, tmp_path: Path) -> None:
    """Before: named ``__azure_functions_return__``, the conversion's name for it, which the app's author never wrote."""
    to = (
        '{{"bindings": [{{"type": "queueTrigger", "direction": "in", "name": "msg", "queueName": "inbox"}}, '
        '{{"type": "{kind}", "direction": "out", "name": "$return", {where}}}]}}'
    )
    code = "def main(msg: str) -> str:\n    return msg\n"
    _function(tmp_path, "ToBlob", to.format(kind="blob", where='"path": "UPPER/x.txt"'), code)
    _function(tmp_path, "ToQueue", to.format(kind="queue", where='"queueName": "Bad_Name"'), code)
    (tmp_path / "host.json").write_text('{"version": "2.0"}', encoding="utf-8")

    ran = run_cli(tmp_path, "run", "--no-supervisor", "--burst", env={"AzureWebJobsStorage": azurite.connection_string})
    assert ran.returncode == 2, ran.stderr
    assert (
        "function ToBlob: blob_output '$return': blob path 'UPPER/x.txt': container name 'UPPER' is not valid" in ran.stderr
    )
    assert "function ToQueue, output binding queue ($return): queue name 'Bad_Name' is not valid" in ran.stderr
    assert "__azure_functions_return__" not in ran.stderr


def test_disabled_is_a_bool_its_text_or_a_setting_and_a_disabled_function_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", f"sqlite:///{tmp_path / 'q.sqlite3'}")
    monkeypatch.setenv("OFF_SETTING", "1")
    monkeypatch.delenv("OFF_UNSET", raising=False)
    never = "raise RuntimeError('a disabled function is not imported')\n"
    for name, disabled in (("Bool", "true"), ("Text", '"True"'), ("Setting", '"OFF_SETTING"')):
        _function(tmp_path / "app", name, QUEUE.replace('{"bindings"', f'{{"disabled": {disabled}, "bindings"'), never)
    for name, disabled in (("Enabled", "false"), ("Unset", '"OFF_UNSET"')):
        # Functions reads binding types in any case.
        described = QUEUE.replace('{"bindings"', f'{{"disabled": {disabled}, "bindings"').replace("queueT", "QueueT")
        _function(tmp_path / "app", name, described, "def main(msg):\n    pass\n")

    app = load_app(str(tmp_path / "app"), tmp_path)
    assert sorted(spec.name for spec in app.functions) == ["Enabled", "Unset"]
    assert sorted(app.not_run) == [
        'function Bool is disabled ("disabled": true in function.json); it is not run',
        'function Setting is disabled ("disabled": "OFF_SETTING" in function.json, and OFF_SETTING is 1); it is not run',
        'function Text is disabled ("disabled": true in function.json); it is not run',
    ]


async def test_the_python_workers_v1_eventgrid_app_runs_its_queue_function(tmp_path: Path) -> None:
    """tests/compat/apps/eventgrid_functions (unmodified): Event Grid delivers an event to a storage queue, whose
    function (``__init__.py``, the default scriptFile) writes it to a blob that the app's HTTP function reads back.
    This host runs the queue function and plays the rest, as that repository's test_eventgrid_output_binding
    checks it; the four other functions (Event Grid and HTTP triggers) are not run, nor imported."""
    app_dir = Path(__file__).resolve().parent / "apps" / "eventgrid_functions"
    storage = "sqlite:///queues.sqlite3"
    config = HostConfig(
        base_dir=tmp_path, max_polling_interval=0.2, drain_timeout=1, connections={"AzureWebJobsStorage": storage}
    )
    app = load_app(str(app_dir), tmp_path)
    assert [spec.name for spec in app.functions] == ["eventgrid_output_binding_message_to_blobstore"]
    assert len(app.not_run) == 4

    event = {
        "id": "test-id",
        "subject": "test-subject",
        "dataVersion": "1.0",
        "eventType": "test-event-1",
        "data": {"test_uuid": uuid.uuid4().hex},
        "eventTime": "2026-01-01T00:00:00Z",
    }
    queues, blobs = open_backend(storage, tmp_path), open_blob_store(storage, tmp_path)
    try:
        await put(queues, "test-event-grid-storage-queue", json.dumps(event))
        async with running(app, config):
            written = await apoll(
                lambda: blobs.read("python-worker-tests", "test-eventgrid-output-binding.txt"),
                20,
                what="the blob the queue function writes",
            )
    finally:
        await queues.close()
        await blobs.close()
    success = module_from_file(app_dir / "eventgrid_output_binding_success" / "__init__.py", "eventgrid_success").main
    stream = InputStream(data=written.data, name="python-worker-tests/test-eventgrid-output-binding.txt")
    response = json.loads(success(func.HttpRequest(method="GET", url="http://localhost/api/x", body=b""), file=stream))
    for field in ("data", "id", "eventType", "subject", "dataVersion"):
        assert response[field] == event[field], field


def test_a_function_json_retry_policy_is_kept_for_the_warning_and_not_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", f"sqlite:///{tmp_path / 'q.sqlite3'}")
    retried = QUEUE.replace(
        '{"bindings"', '{"retry": {"strategy": "fixedDelay", "maxRetryCount": 4, "delayInterval": "00:00:10"}, "bindings"'
    )
    _function(tmp_path / "app", "Retried", retried, "def main(msg):\n    pass\n")
    _function(tmp_path / "app", "Plain", QUEUE, "def main(msg):\n    pass\n")

    app = load_app(str(tmp_path / "app"), tmp_path)
    assert app.ignored_retry == ("Retried",)  # Functions does not apply it to a queue trigger: the host says so
    assert [spec.retry for spec in app.functions] == [None, None]

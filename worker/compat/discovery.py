"""Which app ``worker run`` runs and where its folder is, found from the files alone, without importing it.

:func:`discover` finds the app when ``--app`` is not given. :func:`app_directory` finds its settings' folder.
:mod:`.loading` imports the app and the host; this module does not.
So ``worker run``'s supervisor, which runs no app, loads neither.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from worker.settings import functions_json

#: The file the Functions Python v2 model starts from, in the app's folder (``PYTHON_SCRIPT_FILE_NAME`` names another).
SCRIPT_FILE = "function_app.py"
SCRIPT_SETTING = "PYTHON_SCRIPT_FILE_NAME"
#: What each function's folder of a Functions v1 app holds (an app without ``function_app.py``).
FUNCTION_JSON = "function.json"
#: An AWS SAM app's template, in its folder.
TEMPLATE_FILES = ("template.yaml", "template.yml")


class AppLoadError(ValueError):
    """The app cannot be imported, is not an app, or cannot run as it is; the message lists every problem."""


def discover(folder: Path, environ: Mapping[str, str]) -> str:
    """What ``worker run`` runs without ``--app``, found as Functions finds it in ``folder``.

    ``function_app.py`` (the v2 model; ``PYTHON_SCRIPT_FILE_NAME`` names another) as a module name; else,
    when function folders (``*/function.json``) are there, the folder itself: a v1 app; else the folder's AWS SAM
    ``template.yaml``.
    """
    name = environ.get(SCRIPT_SETTING) or SCRIPT_FILE
    script = folder / name
    if Path(name).name != name or script.suffix != ".py":
        raise AppLoadError(f"{SCRIPT_SETTING}={name!r} must name a .py file in the app's folder")
    if script.is_file():
        return script.stem
    if function_files(folder):
        return str(folder.resolve())
    if SCRIPT_SETTING not in environ and (template := template_in(folder)) is not None:
        return template.name  # an AWS SAM app: its Lambda SQS functions
    raise AppLoadError(
        f"no app to run: no {name} in {folder} (the Functions Python entry point"
        + ("" if name != SCRIPT_FILE else f"; {SCRIPT_SETTING} names another")
        + f"), no function folders (*/{FUNCTION_JSON}, a v1 app) and no AWS SAM template.yaml; run in the app's "
        "folder, or give --app MODULE:ATTR"
    )


def v2_folder(target: str) -> Path | None:
    """The folder ``--app`` names when it is a Functions v2 app's (a folder, not a package, that is not a v1 app's),
    or None; :func:`discover` finds its script, as ``worker run`` in that folder would."""
    folder = Path(target)
    if ":" in target or not folder.is_dir() or (folder / "__init__.py").is_file() or function_files(folder):
        return None
    return folder.resolve()


def is_v1_target(target: str) -> bool:
    """Whether ``--app`` names a Functions v1 app's folder (one holding ``*/function.json``) rather than a module."""
    return bool(function_files(Path(target)))


def function_files(folder: Path) -> list[Path]:
    """The ``function.json`` of each function folder in ``folder``: how Functions finds a v1 app's functions."""
    return sorted(folder.glob(f"*/{FUNCTION_JSON}")) if folder.is_dir() else []


def is_template(target: str) -> bool:
    """Whether ``worker run --app`` names a SAM template rather than a module."""
    return target.endswith((".yaml", ".yml"))


def template_in(folder: Path) -> Path | None:
    """The SAM template of ``folder``, if it has one."""
    return next((folder / name for name in TEMPLATE_FILES if (folder / name).is_file()), None)


def app_directory(target: str) -> Path | None:
    """The folder of the module ``MODULE:ATTR`` names (or the v1 app folder, or a SAM template's), found without
    importing anything."""
    if is_v1_target(target) or v2_folder(target) is not None:
        return Path(target).resolve()
    if is_template(target):
        path = Path(target)
        return (path if path.is_absolute() else Path(os.getcwd()) / path).parent.resolve()
    parts = target.partition(":")[0].split(".")
    if not all(parts):
        return None
    for folder in (os.getcwd(), *sys.path):
        base = Path(folder or ".", *parts)
        if base.with_suffix(".py").is_file():
            return base.parent.resolve()
        if (base / "__init__.py").is_file():
            return base.resolve()
    return None


def queue_readers(folder: Path, environ: Mapping[str, str]) -> dict[str, set[str | None]]:
    """The queues the Functions app in ``folder`` is triggered by, each with the connection settings its functions
    name (None: the default), read from its files without running any of it.

    Why: ``worker send`` should know when the message it sends goes through another connection than the one the
    app reads that queue through (a new embedded queue, say, where the app reads Azurite). A v1 app's
    function.json files give them exactly; a v2 script gives those of its ``queue_trigger`` (and ``generic_trigger``
    of type ``queueTrigger``) decorators written with literal arguments, which is how they are written.
    ``%Setting%`` queue names are resolved from ``environ``; what cannot be read is left out.
    """
    found: dict[str, set[str | None]] = {}

    def add(queue: object, connection: object) -> None:
        if not isinstance(queue, str) or not queue:
            return
        if queue.startswith("%") and queue.endswith("%") and len(queue) > 2:
            if (queue := environ.get(queue[1:-1], "")) == "":
                return
        found.setdefault(queue, set()).add(connection if isinstance(connection, str) and connection else None)

    name = environ.get(SCRIPT_SETTING) or SCRIPT_FILE
    if (folder / name).is_file():
        for call in _decorator_calls(folder / name):
            if call.get("type", "queueTrigger") == "queueTrigger":
                add(call.get("queue_name"), call.get("connection"))
        return found
    for file in function_files(folder):
        try:
            described = functions_json.parse(file.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError, functions_json.JsonFileError):
            continue
        bindings = described.get("bindings") if isinstance(described, dict) else None
        for binding in bindings if isinstance(bindings, list) else []:
            if isinstance(binding, dict) and str(binding.get("type", "")).lower() == "queuetrigger":
                add(binding.get("queueName"), binding.get("connection"))
    return found


def _decorator_calls(script: Path) -> list[dict[str, object]]:
    """The literal keyword arguments of each ``queue_trigger(...)`` and ``generic_trigger(...)`` call in ``script``."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    calls = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("queue_trigger", "generic_trigger")
        ):
            fields: dict[str, object] = {
                k.arg: k.value.value for k in node.keywords if k.arg and isinstance(k.value, ast.Constant)
            }
            if node.func.attr == "generic_trigger" and "type" not in fields:
                continue
            calls.append(fields)
    return calls

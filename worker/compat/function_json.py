"""Run a Functions Python v1 app (a folder per function, each with ``function.json``) on this host, unchanged.

Most apps older than the v2 model have no ``function_app.py``, and Functions still runs them.
Each queue-triggered function is described as the v2 decorators would, for ``from_functions``.
Files are read as the Python worker reads them; modules import as ``__app__.<folder>[.<script>]``.
So relative imports and ``from __app__.shared_code import x`` work as on Functions.
Functions with other triggers are listed as not run, their modules never imported.
Every problem is a line naming its function, so the app is refused with all of them.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure.functions.decorators.core import Binding, DataType
from azure.functions.decorators.function_app import Function
from azure.functions.decorators.function_name import FunctionName
from azure.functions.decorators.generic import GenericInputBinding, GenericOutputBinding, GenericTrigger

from worker.compat.converted import ConvertedApp, SkippedFunction
from worker.compat.functions import BLOB, QUEUE, QUEUE_TRIGGER, from_functions, skipped_function
from worker.compat.tracebacks import import_failure
from worker.settings import functions_json
from worker.settings.connections import Service

#: The package a v1 app's folder is imported as, as the Python worker names it.
APP_PACKAGE = "__app__"
DEFAULT_SCRIPT = "__init__.py"
DEFAULT_ENTRY_POINT = "main"
#: The binding types this host provides, by their lower-case spelling (Functions reads types in any case).
_KNOWN_TYPES = {known.lower(): known for known in (QUEUE_TRIGGER, QUEUE, BLOB)}


@dataclass(frozen=True, slots=True)
class _Read:
    """One function folder as read: its queue-triggered Function, or why it is not run, or its problems."""

    function: Function | None = None
    not_run: SkippedFunction | None = None
    problems: tuple[str, ...] = ()
    #: Its function.json has a ``retry`` policy, which Functions does not apply to a queue trigger.
    retry: bool = False


def from_folder(
    root: Path,
    files: list[Path],
    environ: Mapping[str, str],
    connection_problem: Callable[[str, Service], str | None] | None = None,
) -> ConvertedApp:
    """The v1 app in ``root`` converted: its queue-triggered functions in a WorkerApp, the rest listed.

    ``files`` are its functions' function.json files (:func:`worker.compat.loading.function_files`).
    """
    root = root.resolve()
    _install_app_package(root)
    functions: list[Function] = []
    not_run: list[SkippedFunction] = []
    problems: list[str] = []
    retry: list[str] = []
    for file in files:
        read = _read_function(root, file, environ)
        functions += [read.function] if read.function is not None else []
        not_run += [read.not_run] if read.not_run is not None else []
        problems += read.problems
        retry += [file.parent.name] if read.retry else []
    converted = from_functions(functions, environ, connection_problem)
    return ConvertedApp(
        converted.app,
        (*not_run, *converted.skipped),
        converted.disabled,
        (*problems, *converted.problems),
        (*retry, *converted.ignored_retry),
    )


def _install_app_package(root: Path) -> None:
    """Make ``__app__`` the app's folder (a package without ``__init__``) and put the folder on ``sys.path``.

    Modules imported under another app's ``__app__`` before are forgotten: names under it are this app's.
    """
    for name in [name for name in sys.modules if name.startswith(f"{APP_PACKAGE}.")]:
        del sys.modules[name]
    spec = importlib.machinery.ModuleSpec(APP_PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [str(root)]
    sys.modules[APP_PACKAGE] = importlib.util.module_from_spec(spec)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def _read_function(root: Path, file: Path, environ: Mapping[str, str]) -> _Read:
    folder = file.parent
    name = folder.name
    where = f"function {name} ({file})"
    try:
        described = functions_json.parse(file.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, functions_json.JsonFileError) as exc:
        return _Read(problems=(f"{where}: cannot be read: {exc}",))
    bindings = described.get("bindings") if isinstance(described, dict) else None
    if not isinstance(bindings, list) or not all(isinstance(b, dict) for b in bindings):
        return _Read(problems=(f'{where}: has no "bindings" list of objects',))
    triggers = [b for b in bindings if _type(b).lower().endswith("trigger")]
    if len(triggers) != 1:
        return _Read(problems=(f"{where}: has {len(triggers)} triggers; a function has exactly one",))
    trigger_type = _type(triggers[0])
    if trigger_type != QUEUE_TRIGGER:
        return _Read(not_run=skipped_function(name, trigger_type))
    if (off := _disabled(described.get("disabled", False), environ)) is not None:
        return _Read(not_run=SkippedFunction(name, trigger_type, f"function {name} is disabled ({off}); it is not run"))
    entry, problem = _entry_point(root, folder, described)
    if entry is None:
        return _Read(problems=(f"{where}: {problem}",))
    function = Function(entry, str(folder / str(described.get("scriptFile") or DEFAULT_SCRIPT)))
    function.add_setting(FunctionName(name))  # the folder names the function, whatever its entry point is called
    try:
        for binding in bindings:
            _add(function, binding)
    except KeyError as exc:
        return _Read(problems=(f"{where}: a binding has no {exc}",))
    except ValueError as exc:
        return _Read(problems=(f"{where}: {exc}",))
    return _Read(function=function, retry=described.get("retry") is not None)


def _disabled(value: Any, environ: Mapping[str, str]) -> str | None:
    """Why function.json's ``disabled`` switches the function off, or None: a bool (or its text), or a setting's name."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        value = value.strip().lower() == "true"
    if isinstance(value, bool):
        return '"disabled": true in function.json' if value else None
    if isinstance(value, str) and environ.get(value, "").strip().lower() in ("true", "1"):
        return f'"disabled": "{value}" in function.json, and {value} is {environ[value].strip()}'
    return None


def _entry_point(root: Path, folder: Path, described: Mapping[str, Any]) -> tuple[Callable[..., Any] | None, str]:
    """Import the function's script as the Python worker does and return its entry point, or why it cannot be."""
    script = (folder / str(described.get("scriptFile") or DEFAULT_SCRIPT)).resolve()
    entry_point = str(described.get("entryPoint") or DEFAULT_ENTRY_POINT)
    if script.suffix != ".py" or not script.is_relative_to(root):
        return None, f"scriptFile {script} is not a .py file in the app's folder {root}"
    if not script.is_file():
        return None, f"scriptFile {script} does not exist"
    parts = script.relative_to(root).with_suffix("").parts
    module_name = ".".join((APP_PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        return None, import_failure(f"cannot import {module_name}", exc, root)
    entry = getattr(module, entry_point, None)
    if not inspect.isfunction(entry):
        return None, f"{script.name} has no function {entry_point!r} (function.json's entryPoint, default main)"
    return entry, ""


def _add(function: Function, fields: Mapping[str, Any]) -> None:
    """One function.json binding, as the v2 generic decorators record it (every field kept)."""
    extra = {key: value for key, value in fields.items() if key not in ("name", "type", "direction", "dataType")}
    name, kind, direction = str(fields["name"]), _type(fields), str(fields.get("direction", "in")).lower()
    if "type" not in fields:
        raise KeyError("type")
    data_type = _data_type(fields.get("dataType"))
    binding: Binding
    if kind.lower().endswith("trigger"):
        function.add_trigger(GenericTrigger(name=name, type=kind, data_type=data_type, **extra))
        return
    if direction == "out":
        binding = GenericOutputBinding(name=name, type=kind, data_type=data_type, **extra)
    elif direction == "in":
        binding = GenericInputBinding(name=name, type=kind, data_type=data_type, **extra)
    else:
        raise ValueError(f"binding {name} has direction {direction!r}; a binding is in or out")
    function.add_binding(binding)


def _type(fields: Mapping[str, Any]) -> str:
    """A binding's type; Functions reads types in any case, so the ones this host provides are spelled its way."""
    kind = str(fields.get("type", ""))
    return _KNOWN_TYPES.get(kind.lower(), kind)


def _data_type(value: Any) -> DataType | None:
    """function.json's ``dataType`` (``string``, ``binary``, ``stream``); anything else is left undefined."""
    try:
        return DataType[str(value).upper()] if value else None
    except KeyError:
        return None

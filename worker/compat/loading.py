"""Loading the app ``worker run --app`` names, as a WorkerApp.

It takes ``MODULE:ATTR``, a v1 app's ``FOLDER``, or an AWS SAM ``template.yaml``.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import structlog

from worker.app import WorkerApp
from worker.compat.converted import ConvertedApp, as_written
from worker.compat.discovery import (
    AppLoadError,
    app_directory,
    discover,
    function_files,
    is_template,
    is_v1_target,
    v2_folder,
)
from worker.compat.sam import from_template
from worker.compat.tracebacks import import_failure
from worker.settings.connections import Service

#: The oldest azure-functions whose FunctionApp this host reads (pyproject's azure-functions extra says the same).
AZURE_FUNCTIONS_FLOOR = (1, 20)


def load_app(
    target: str,
    search_path: Path,
    *,
    connection_problem: Callable[[str | None, Service], str | None] | None = None,
    check: Callable[[WorkerApp], list[str]] | None = None,
    found: Sequence[str] = (),
) -> WorkerApp:
    """Import ``MODULE:ATTR`` (looked up from ``search_path`` first), or a v1 app's folder, and check it can run.

    Without ``:ATTR``, the module's app is its ``app``, else the one WorkerApp or FunctionApp it defines.
    A folder holding ``*/function.json`` is a Functions v1 app (:mod:`worker.compat.function_json`). A target
    ending in ``.yaml`` or ``.yml`` is an AWS SAM template whose SQS-triggered Lambda functions are registered into
    a WorkerApp (:mod:`worker.compat.sam`).

    The app is a WorkerApp, or an ``azure.functions.FunctionApp`` whose queue-triggered functions are
    registered into one (:mod:`worker.compat.functions`); the functions not run (another trigger, or switched
    off) are counted in one warning and listed at DEBUG. ``connection_problem`` checks a Functions
    binding's connection as it is converted, and ``check`` the converted app (the CLI passes its
    start-up checks, :mod:`worker.ops.preflight`), so that every problem found is listed in one AppLoadError,
    after ``found`` (what the caller found already: the environment's problems).
    """
    problems: list[str] = list(found)
    if is_v1_target(target):
        return _checked(_v1_app(target, connection_problem, problems), target, problems, check)
    first: list[str] = []
    if (app_folder := v2_folder(target)) is not None:  # a v2 app's folder: its script, as worker run there finds it
        target = discover(app_folder, os.environ)
        if is_template(target):
            target = str(app_folder / target)
        first = [str(app_folder)]
    if is_template(target):
        return _checked(_template_app(target, search_path, problems), target, problems, check)
    module_name, attr = _module_target(target)
    module = _import_module(module_name, search_path, first)
    attr, app = _module_app(module, module_name, attr)
    target = f"{module_name}:{attr}"
    app = _from_function_app(app, target, connection_problem, problems)
    if not isinstance(app, WorkerApp):
        raise AppLoadError(f"{target} is a {type(app).__name__}, not a worker.WorkerApp or an azure.functions.FunctionApp")
    return _checked(app, target, problems, check)


def _module_target(target: str) -> tuple[str, str]:
    """The module and attribute (empty when not given) that ``MODULE[:ATTR]`` names."""
    module_name, colon, attr = target.partition(":")
    if not module_name or (colon and not attr):
        raise AppLoadError(f"--app must look like MODULE or MODULE:ATTR (for example function_app:app), got {target!r}")
    return module_name, attr


def _import_module(module_name: str, search_path: Path, first: list[str]) -> Any:
    """The app's module, imported from ``search_path`` or the working folder; ``first`` (the app's own folder, when
    named) goes before everything else on ``sys.path``."""
    for path in (str(search_path), os.getcwd(), *first):
        if path in sys.path and path in first:
            sys.path.remove(path)
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        folder = app_directory(module_name) or search_path
        raise AppLoadError(import_failure(f"cannot import app module {module_name!r}", exc, folder)) from None


def _module_app(module: Any, module_name: str, attr: str) -> tuple[str, Any]:
    """The name and object of the module's app: ``attr`` when given, else the one :func:`_the_app` finds."""
    if not attr:
        return _the_app(module, module_name)
    app = getattr(module, attr, None)
    if app is None:
        raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}")
    return attr, app


def _from_function_app(
    app: Any, target: str, connection_problem: Callable[[str | None, Service], str | None] | None, problems: list[str]
) -> Any:
    """``app`` converted to a WorkerApp if it is an ``azure.functions.FunctionApp``; else ``app`` as it is.

    azure-functions is then imported already (the app's module did it), so apps that do not use it never import it,
    and it stays an optional dependency.
    """
    azure_functions = sys.modules.get("azure.functions")
    if isinstance(app, WorkerApp) or azure_functions is None:
        return app
    if isinstance(app, azure_functions.Blueprint):
        raise AppLoadError(
            f"{target} is an azure.functions.Blueprint; register it in a FunctionApp "
            "(app.register_functions(bp)) and give --app the FunctionApp"
        )
    if not isinstance(app, azure_functions.FunctionRegister):
        return app
    from worker.compat.functions import FunctionAppError, from_function_app

    if (too_old := _version_problem()) is not None:  # its FunctionApp lacks what the conversion reads
        raise _refused(target, [*problems, too_old])
    try:
        converted = from_function_app(app, connection_problem=connection_problem)
    except FunctionAppError as exc:
        raise AppLoadError(f"{target}: {exc}") from None
    return _converted(
        converted,
        f"{target} is an azure.functions.FunctionApp without a queue-triggered function this host can run",
        problems,
    )


def _v1_app(
    target: str, connection_problem: Callable[[str | None, Service], str | None] | None, problems: list[str]
) -> WorkerApp:
    """The v1 app in folder ``target``, converted (azure-functions describes its functions, as for a FunctionApp).

    The installed version is checked before anything of it is imported: an old one fails the import, and the user
    must hear that it is too old, not that it is missing.
    """
    if (too_old := _version_problem()) is not None:
        raise _refused(target, [*problems, too_old])
    try:
        from worker.compat.function_json import from_folder
        from worker.compat.functions import FunctionAppError
    except ImportError as exc:
        raise _refused(
            target,
            [*problems, f"a Functions v1 app needs azure-functions ({exc}); pip install 'queueworker[azure-functions]'"],
        ) from None
    try:
        converted = from_folder(Path(target), function_files(Path(target)), os.environ, connection_problem)
    except FunctionAppError as exc:
        raise AppLoadError(f"{target}: {exc}") from None
    return _converted(
        converted, f"{target} is a Functions v1 app without a queue-triggered function this host can run", problems
    )


def _template_app(target: str, search_path: Path, problems: list[str]) -> WorkerApp:
    """The SQS-triggered Lambda functions of a SAM template (:mod:`worker.compat.sam`), as a WorkerApp."""
    path = Path(target) if Path(target).is_absolute() else search_path / target
    if not path.is_file():
        path = Path(os.getcwd()) / target
    if not path.is_file():
        raise AppLoadError(f"SAM template {target} does not exist")
    try:
        converted = from_template(path, os.environ)
    except ValueError as exc:
        raise AppLoadError(f"{target}: {exc}") from None
    return _converted(converted, f"{target} has no SQS-triggered Python function this host can run", problems)


def _converted(converted: ConvertedApp, nothing_to_run: str, problems: list[str]) -> WorkerApp:
    """The WorkerApp of a converted app (Functions or Lambda); what it does not run logged and kept, its problems
    added; ``nothing_to_run`` is the refusal when it runs nothing and nothing else is wrong."""
    not_run = [skipped.message for skipped in converted.skipped]
    not_run += [f"function {name} is disabled (AzureWebJobs.{name}.Disabled)" for name in converted.disabled]
    if not_run:
        log = structlog.get_logger("worker.compat.loading")
        log.warning(
            "functions not run: this host runs enabled queue-triggered functions only", count=len(not_run), listed_at="DEBUG"
        )
        for line in not_run:
            log.debug(line)
    problems.extend(converted.problems)
    if not converted.app.functions and not problems and not converted.app.problems:
        listed = "".join(f"\n  {line}" for line in not_run)
        raise AppLoadError(nothing_to_run + (f":{listed}" if listed else " (it has no functions)"))
    converted.app.not_run = tuple(not_run)
    converted.app.ignored_retry = converted.ignored_retry
    return converted.app


def _checked(app: WorkerApp, target: str, problems: list[str], check: Callable[[WorkerApp], list[str]] | None) -> WorkerApp:
    """``app`` if nothing stops it from running; else one AppLoadError listing every problem."""
    problems.extend(app.problems)  # decorators used wrongly, every one of them
    try:
        functions = app.functions
    except ValueError as exc:
        raise AppLoadError(f"{target}: {exc}") from None
    if not functions and not problems:
        raise AppLoadError(f"{target} registers no functions; decorate a handler with @app.queue_trigger")
    if check is not None:
        problems.extend(check(app))
    if problems:
        raise _refused(target, problems)
    return app


def _refused(target: str, problems: Sequence[str]) -> AppLoadError:
    """The error listing every reason ``target`` cannot run, one to a line."""
    # A problem's own further lines (an import error's frames) go deeper than the problems.
    listed = "".join("\n  " + as_written(line).replace("\n", "\n    ") for line in problems)
    return AppLoadError(f"{target} cannot run; {len(problems)} problem(s):{listed}")


def _version_problem() -> str | None:
    """Why the installed azure-functions is too old for this host, or None."""
    try:
        installed = metadata.version("azure-functions")
    except metadata.PackageNotFoundError:  # imported from a folder, not installed: nothing to go by
        return None
    numbers = tuple(int(part) for part in re.findall(r"\d+", installed)[:2])
    if numbers >= AZURE_FUNCTIONS_FLOOR:
        return None
    floor = ".".join(map(str, AZURE_FUNCTIONS_FLOOR))
    return (
        f"azure-functions {installed} is installed; this host needs {floor} or later "
        f"(pip install 'azure-functions>={floor}')"
    )


def _the_app(module: Any, module_name: str) -> tuple[str, Any]:
    """The name and object of a module's app: ``app`` if it is one, else the one app object it defines."""
    azure_functions = sys.modules.get("azure.functions")

    def is_app(value: object) -> bool:
        if isinstance(value, WorkerApp):
            return True
        return (
            azure_functions is not None
            and isinstance(value, azure_functions.FunctionRegister)
            and not isinstance(value, azure_functions.Blueprint)
        )

    found = {name: value for name, value in vars(module).items() if not name.startswith("_") and is_app(value)}
    if "app" in found:
        return "app", found["app"]
    distinct = {id(value) for value in found.values()}
    if len(distinct) == 1:
        name = sorted(found)[0]
        return name, found[name]
    if not found:
        raise AppLoadError(f"module {module_name!r} defines no app (a worker.WorkerApp or an azure.functions.FunctionApp)")
    raise AppLoadError(
        f"module {module_name!r} defines {len(found)} apps ({', '.join(sorted(found))}): give --app {module_name}:NAME"
    )

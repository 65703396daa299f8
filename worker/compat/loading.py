"""Finding and importing the app ``worker run --app MODULE:ATTR`` names, and turning a FunctionApp into a WorkerApp."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

import structlog

from worker.app import WorkerApp
from worker.settings.connections import Service

#: The app ``worker run`` runs without ``--app``: the sample pipeline.
DEFAULT_APP = "functions.function_app:app"


class AppLoadError(ValueError):
    """The app cannot be imported, is not an app, or cannot run as it is; the message lists every problem."""


def load_app(
    target: str,
    search_path: Path,
    *,
    connection_problem: Callable[[str | None, Service], str | None] | None = None,
    check: Callable[[WorkerApp], list[str]] | None = None,
) -> WorkerApp:
    """Import ``MODULE:ATTR`` (looked up from ``search_path`` first) and check it is an app that can run.

    The app is a WorkerApp, or an ``azure.functions.FunctionApp`` whose queue-triggered functions are
    registered into one (:mod:`worker.compat.functions`); a warning is logged for each function not run
    (another trigger, or switched off with ``AzureWebJobs.<name>.Disabled``). ``connection_problem`` checks a
    FunctionApp binding's connection as it is converted, and ``check`` the converted app (the CLI passes its
    start-up checks, :mod:`worker.ops.preflight`), so that every problem found is listed in one AppLoadError.
    """
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise AppLoadError(f"--app must look like MODULE:ATTR (for example {DEFAULT_APP}), got {target!r}")
    for folder in (str(search_path), os.getcwd()):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise AppLoadError(f"cannot import app module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    app = getattr(module, attr, None)
    if app is None:
        raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}")
    problems: list[str] = []
    not_run: list[str] = []
    # An azure.functions.FunctionApp: azure-functions is then imported already (the app's module did it),
    # so apps that do not use it never import it, and it stays an optional dependency.
    azure_functions = sys.modules.get("azure.functions")
    if not isinstance(app, WorkerApp) and azure_functions is not None:
        if isinstance(app, azure_functions.Blueprint):
            raise AppLoadError(
                f"{target} is an azure.functions.Blueprint; register it in a FunctionApp "
                "(app.register_functions(bp)) and give --app the FunctionApp"
            )
        if isinstance(app, azure_functions.FunctionRegister):
            from worker.compat.functions import FunctionAppError, from_function_app

            try:
                converted = from_function_app(app, connection_problem=connection_problem)
            except FunctionAppError as exc:
                raise AppLoadError(f"{target}: {exc}") from None
            log = structlog.get_logger("worker.compat.loading")
            for skipped in converted.skipped:
                log.warning(skipped.message, function=skipped.name, trigger=skipped.trigger_type)
                not_run.append(skipped.message)
            for name in converted.disabled:
                log.warning("function is disabled by its AzureWebJobs.<name>.Disabled setting; it is not run",
                            function=name)
                not_run.append(f"function {name} is disabled (AzureWebJobs.{name}.Disabled)")
            problems.extend(converted.problems)
            if not converted.app.functions and not problems:
                listed = "".join(f"\n  {line}" for line in not_run)
                raise AppLoadError(
                    f"{target} is an azure.functions.FunctionApp without a queue-triggered function this host can run"
                    + (f":{listed}" if listed else " (it has no functions)")
                )
            app = converted.app
    if not isinstance(app, WorkerApp):
        raise AppLoadError(f"{target} is a {type(app).__name__}, not a worker.WorkerApp or an azure.functions.FunctionApp")
    try:
        functions = app.functions
    except ValueError as exc:
        raise AppLoadError(f"{target}: {exc}") from None
    if not functions and not problems:
        raise AppLoadError(f"{target} registers no functions; decorate a handler with @app.queue_trigger")
    if check is not None:
        problems.extend(check(app))
    if problems:
        listed = "".join(f"\n  {line}" for line in problems)
        raise AppLoadError(f"{target} cannot run; {len(problems)} problem(s):{listed}")
    return app


def app_directory(target: str) -> Path | None:
    """The folder of the module ``MODULE:ATTR`` names, found on the import path without importing anything."""
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

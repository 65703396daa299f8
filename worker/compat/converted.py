"""What converting another platform's app gives: what this host runs, what it does not, and what stops it.

The app is an Azure Functions FunctionApp or a SAM template's Lambda functions.
The result holds a WorkerApp, the functions not run and why, and the problems.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.app import WorkerApp

#: The arg_name of a Functions output binding that takes the function's return value.
RETURN = "$return"
#: What the conversion calls the ``$return`` output: the host passes outputs as keyword arguments, and "$return" is
#: no identifier. A line for the app's author says ``$return`` instead (:func:`as_written`).
RETURN_ARG = "__azure_functions_return__"


@dataclass(frozen=True, slots=True)
class SkippedFunction:
    """A function (or a Lambda function's event) that this host does not run, and why."""

    name: str
    #: The trigger's binding type as in function.json (``httpTrigger``, ``timerTrigger`` ...), or the SAM event's
    #: type (``Schedule``, ``Api`` ...).
    trigger_type: str
    #: One sentence for the log, naming the function.
    message: str


@dataclass(frozen=True, slots=True)
class ConvertedApp:
    """The functions this host runs, as a WorkerApp, and the rest."""

    app: WorkerApp
    #: Functions with a trigger this host does not run (listed at start, not run).
    skipped: tuple[SkippedFunction, ...]
    #: Names of functions switched off with ``AzureWebJobs.<name>.Disabled`` (listed at start, not run).
    disabled: tuple[str, ...] = ()
    #: Why queue-triggered functions cannot run, one line each naming the function and binding: refuse the app.
    problems: tuple[str, ...] = ()
    #: Functions whose code gives a retry policy (``@app.retry``, function.json's ``retry``), which Functions does not
    #: apply to a queue trigger and neither does this host (warned about at start).
    ignored_retry: tuple[str, ...] = ()


def as_written(line: str) -> str:
    """``line`` (a start-up problem) naming a ``$return`` output as the app wrote it, not as the conversion calls it.

    Why: the host's own checks name a binding by its arg_name, which for a converted ``$return`` is
    :data:`RETURN_ARG`, a name the app's author never wrote and cannot find in the app.
    """
    return line.replace(RETURN_ARG, RETURN)

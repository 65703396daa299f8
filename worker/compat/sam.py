"""Run the SQS-triggered Lambda functions of an AWS SAM template (``template.yaml``) on this host, unchanged.

A Lambda SQS function then runs on a laptop or Kubernetes, its visibility renewed, with no 15-minute cap.
:func:`from_template` registers each ``Type: SQS`` event; its handler calls the function as Lambda does.
docs/lambda.md maps each template property to a setting (``BatchSize``, ``Timeout``, the redrive policy).
Each function runs in worker processes of its own (:data:`FUNCTION_ENV`), as Lambda isolates functions.
``FilterCriteria`` applies as in Lambda (:mod:`worker.compat.lambda_filters`).
Other events and runtimes are listed as not run; every import or filter problem is listed and refused.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import structlog

from worker.app import WorkerApp
from worker.backends.failures import ConnectionStringError
from worker.backends.sqs.connection import FIFO_SUFFIX, SQS_LIMITS, SqsConnection, parse_sqs_connection
from worker.compat.cloudformation import ACCOUNT_ID, Resolver, Unresolvable, read_template
from worker.compat.converted import ConvertedApp, SkippedFunction
from worker.compat.lambda_filters import FilterError, parse_filters
from worker.compat.lambda_sqs import REPORT_BATCH_ITEM_FAILURES, LambdaFunction, lambda_handler

log = structlog.get_logger("worker.compat.sam")

#: The template ``worker run`` looks for beside ``function_app.py``, and the names ``--app`` takes as one.
#: The connection setting the template's queues are read through.
CONNECTION = "AWS_SQS"
#: The variable that tells a worker process which one of a template's functions it runs: ``worker run`` starts a
#: process for each, as Lambda isolates each function (its own modules, environment and Lambda's own variables).
FUNCTION_ENV = "WORKER_SAM_FUNCTION"
#: Lambda's defaults: a function's timeout and memory, an event source's batch size.
DEFAULT_TIMEOUT = 3
DEFAULT_MEMORY_MB = 128
DEFAULT_BATCH_SIZE = 10
#: SQS's visibility timeout for a queue made without one (CreateQueue's ``VisibilityTimeout`` default).
DEFAULT_VISIBILITY_TIMEOUT = 30


def _region(environ: Mapping[str, str]) -> str:
    """``AWS::Region``: the ``AWS_SQS`` connection's region, else the SDKs' region variables, else us-east-1."""
    connection = environ.get(f"AzureWebJobs{CONNECTION}") or environ.get(CONNECTION)
    if connection:
        try:
            return parse_sqs_connection(connection).region
        except ConnectionStringError:
            pass
    return environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def _queue_urls(environ: Mapping[str, str], region: str) -> Callable[[str], str]:
    """A queue's URL by its name, as CloudFormation's ``!Ref`` gives it: what GetQueueUrl answers through the
    ``AWS_SQS`` connection (the account's own, or an emulator's), looked up once per queue; where that cannot be had
    (no connection, a queue not made yet, no network), the URL of SQS's own form with :data:`ACCOUNT_ID`."""
    connection = None
    if text := environ.get(f"AzureWebJobs{CONNECTION}") or environ.get(CONNECTION):
        try:
            connection = parse_sqs_connection(text)
        except ConnectionStringError:
            pass
    base = (
        connection.endpoint.rstrip("/")
        if connection is not None and connection.endpoint
        else f"https://sqs.{region}.amazonaws.com"
    )
    found: dict[str, str] = {}
    client: list[Any] = []

    def url(queue: str) -> str:
        if queue not in found:
            found[queue] = _looked_up(connection, client, queue) or f"{base}/{ACCOUNT_ID}/{queue}"
        return found[queue]

    return url


def _looked_up(connection: SqsConnection | None, client: list[Any], queue: str) -> str | None:
    """GetQueueUrl of ``queue`` (one short attempt); None where it cannot be had."""
    if connection is None or importlib.util.find_spec("botocore") is None:
        return None
    try:
        from worker.backends.sqs.urls import queue_url

        return queue_url(connection, client, queue)
    except Exception as exc:
        log.info(
            "queue URL not looked up; !Ref of the queue gives its URL of SQS's form",
            queue=queue,
            error=f"{type(exc).__name__}: {exc}",
        )
        return None


def runnable_functions(path: Path) -> list[str]:
    """The logical ids of the template's functions this host runs (an enabled SQS event, a Python runtime, not an
    image), read from the template alone: nothing is imported, so ``worker run``'s supervisor can start a process for
    each."""
    template = read_template(path)
    globals_ = (template.get("Globals") or {}).get("Function") or {}
    found = []
    for logical_id, resource in (template.get("Resources") or {}).items():
        if (resource or {}).get("Type") != "AWS::Serverless::Function":
            continue
        properties = _merged(globals_, resource.get("Properties") or {})
        if properties.get("PackageType") == "Image" or not str(properties.get("Runtime", "python")).startswith("python"):
            continue
        events = (properties.get("Events") or {}).values()
        if any(
            (event or {}).get("Type") == "SQS"
            and str(((event or {}).get("Properties") or {}).get("Enabled", True)).lower() != "false"
            for event in events
        ):
            found.append(str(logical_id))
    return found


def _lambda_variables(environ: MutableMapping[str, str], name: str, properties: Mapping[str, Any], region: str) -> None:
    """Lambda's own variables of the function's runtime, for a process that runs this one function: the function's
    own, whatever the environment says, as Lambda reserves them; the region only where the environment names none."""
    environ.update(
        {
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(properties.get("MemorySize") or DEFAULT_MEMORY_MB),
            "_HANDLER": str(properties.get("Handler") or ""),
        }
    )
    environ.setdefault("AWS_REGION", region)
    environ.setdefault("AWS_DEFAULT_REGION", region)


def _merged(globals_: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A function's properties over ``Globals.Function``; maps (Environment, Variables) merge, as SAM merges them."""
    merged = dict(globals_)
    for key, value in own.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def _queue_names(template: Mapping[str, Any], resolver: Resolver) -> dict[str, str]:
    """Each ``AWS::SQS::Queue``'s name by logical id: its QueueName, else the id (``.fifo`` for a FIFO queue)."""
    names = {}
    for logical_id, resource in (template.get("Resources") or {}).items():
        if (resource or {}).get("Type") != "AWS::SQS::Queue":
            continue
        properties = resource.get("Properties") or {}
        try:
            name = str(resolver.resolve(properties["QueueName"])) if "QueueName" in properties else None
        except Unresolvable:
            name = None
        fifo = str(properties.get("FifoQueue", "")).lower() == "true"
        names[logical_id] = name or (logical_id + (FIFO_SUFFIX if fifo else ""))
    return names


def _queue_of(source: Any, resolver: Resolver) -> tuple[str, str | None]:
    """The queue an event's ``Queue`` names (resolved already: an ARN, or a name or URL as ``!Ref`` gives it), and
    its resource's logical id when the template defines it."""
    text = str(source)
    name = text.rsplit(":", 1)[-1] if text.startswith("arn:") else text.rstrip("/").rsplit("/", 1)[-1]
    return name, next((logical_id for logical_id, queue in resolver.names.items() if queue == name), None)


def from_template(path: Path, environ: MutableMapping[str, str]) -> ConvertedApp:
    """The SQS-triggered functions of the SAM template at ``path`` as a WorkerApp; the rest listed, the problems
    gathered. Raises ValueError for a file that is no template."""
    template = read_template(path)
    folder = path.parent.resolve()
    region = _region(environ)
    resolver = Resolver(template, region, stack_name=folder.name, queue_url=_queue_urls(environ, region))
    resolver.names.update(_queue_names(template, resolver))
    globals_ = (template.get("Globals") or {}).get("Function") or {}
    app = WorkerApp()
    skipped: list[SkippedFunction] = []
    problems: list[str] = []
    variables: dict[str, tuple[str, str]] = {}
    modules: dict[str, Path] = {}
    # worker run starts a process for each function (FUNCTION_ENV names its one); loaded otherwise, all in this one.
    only = environ.get(FUNCTION_ENV)
    alone = only is not None or len(runnable_functions(path)) == 1
    for logical_id, resource in (template.get("Resources") or {}).items():
        if (resource or {}).get("Type") != "AWS::Serverless::Function":
            continue
        if only is not None and logical_id != only:
            continue
        try:
            properties = resolver.resolve(_merged(globals_, resource.get("Properties") or {}))
        except Unresolvable as exc:
            problems.append(f"function {logical_id}: {exc}")
            continue
        name = str(properties.get("FunctionName") or logical_id)
        events = properties.get("Events") or {}
        sqs_events = {event: spec for event, spec in events.items() if (spec or {}).get("Type") == "SQS"}
        skipped.extend(_other_events(name, events, sqs_events))
        if not sqs_events:
            continue
        if (not_python := _not_python(name, properties)) is not None:
            skipped.append(not_python)
            continue
        _set_variables(name, properties, environ, variables, problems)
        if alone:
            _lambda_variables(environ, name, properties, resolver.region)
        handler = _import_handler(properties, folder, name, modules, problems)
        for event, spec in sqs_events.items():
            event_name = name if len(sqs_events) == 1 else f"{name}-{event}"
            _register(
                app, event_name, spec.get("Properties") or {}, properties, handler, template, resolver, skipped, problems
            )
    return ConvertedApp(app, tuple(skipped), (), tuple(problems))


def _other_events(name: str, events: Mapping[str, Any], sqs_events: Mapping[str, Any]) -> list[SkippedFunction]:
    """The function's events other than its SQS ones, each listed as not run."""
    skipped = []
    for event, spec in events.items():
        if event not in sqs_events:
            kind = str((spec or {}).get("Type"))
            skipped.append(
                SkippedFunction(
                    name,
                    kind,
                    f"function {name}: event {event} of type {kind} is not run (this host runs SQS events only)",
                )
            )
    return skipped


def _not_python(name: str, properties: Mapping[str, Any]) -> SkippedFunction | None:
    """The function listed as not run when it is packaged as an image or has another runtime than Python."""
    runtime = str(properties.get("Runtime", "python"))
    if properties.get("PackageType") == "Image" or not runtime.startswith("python"):
        return SkippedFunction(
            name,
            "SQS",
            f"function {name} is not run: its runtime is {properties.get('PackageType') or runtime}, not Python",
        )
    return None


def _set_variables(
    name: str,
    properties: Mapping[str, Any],
    environ: MutableMapping[str, str],
    variables: dict[str, tuple[str, str]],
    problems: list[str],
) -> None:
    """Set the function's ``Environment.Variables`` where the environment has none of its own; ``variables`` holds
    what the functions loaded before set (name and value, by variable), and a different value is a problem."""
    for key, value in ((properties.get("Environment") or {}).get("Variables") or {}).items():
        value = "" if value is None else str(value)
        if key in variables:
            if variables[key][1] != value:
                problems.append(
                    f"function {name}: environment variable {key} is {value!r} here and "
                    f"{variables[key][1]!r} in function {variables[key][0]}; one process has one "
                    "environment (worker run runs each function in a process of its own)"
                )
            continue
        variables[key] = (name, value)
        if key not in environ:
            environ[key] = value
        elif environ[key] != value:
            log.info("template environment variable set otherwise in the environment; the environment's kept", variable=key)


def _import_handler(
    properties: Mapping[str, Any], folder: Path, name: str, modules: dict[str, Path], problems: list[str]
) -> Any:
    """The function's handler, imported with its CodeUri first on the import path; None (a problem said) if not."""
    handler_name = str(properties.get("Handler") or "")
    module_name, _, attr = handler_name.rpartition(".")
    if not module_name or not attr:
        problems.append(f"function {name}: Handler {handler_name!r} is not MODULE.FUNCTION")
        return None
    code = (folder / str(properties.get("CodeUri") or ".")).resolve()
    if not code.is_dir():
        problems.append(
            f"function {name}: CodeUri {properties.get('CodeUri')!r} is not a folder (sam build unpacks "
            "archives; give the folder)"
        )
        return None
    top = module_name.split(".")[0]
    if top in modules and modules[top] != code:
        problems.append(
            f"function {name}: module {top!r} is in {code} and in {modules[top]}; one process imports "
            "one module of a name (worker run runs each function in a process of its own)"
        )
        return None
    modules[top] = code
    if str(code) not in sys.path:
        sys.path.insert(0, str(code))
    try:
        handler = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:
        problems.append(f"function {name}: cannot import Handler {handler_name}: {type(exc).__name__}: {exc}")
        return None
    if not callable(handler):
        problems.append(f"function {name}: Handler {handler_name} is not a function")
        return None
    return handler


def _register(
    app: WorkerApp,
    name: str,
    event: Mapping[str, Any],
    properties: Mapping[str, Any],
    handler: Any,
    template: Mapping[str, Any],
    resolver: Resolver,
    skipped: list[SkippedFunction],
    problems: list[str],
) -> None:
    """One SQS event of a function, as a queue trigger of ``app`` with the settings the template gives it."""
    if str(event.get("Enabled", True)).lower() == "false":
        skipped.append(SkippedFunction(name, "SQS", f"function {name} is not run: its SQS event has Enabled: false"))
        return
    filters: tuple[dict[str, Any], ...] = ()
    if "FilterCriteria" in event:
        try:
            filters = parse_filters(event["FilterCriteria"])
        except FilterError as exc:
            problems.append(f"function {name}: FilterCriteria: {exc}")
    queue, logical_id = _queue_of(event.get("Queue"), resolver)
    settings: dict[str, Any] = {
        "message_encoding": "none",
        "function_timeout": float(properties.get("Timeout") or DEFAULT_TIMEOUT),
    }
    batch_size = int(event.get("BatchSize") or DEFAULT_BATCH_SIZE)
    if batch_size > SQS_LIMITS.max_batch:
        log.warning(
            "BatchSize is more than one SQS receive brings; batches of at most that many",
            function=name,
            batch_size=batch_size,
            at_most=SQS_LIMITS.max_batch,
        )
    settings["batch_size"] = min(batch_size, SQS_LIMITS.max_batch)
    window = float(event.get("MaximumBatchingWindowInSeconds") or 0)
    concurrency = (event.get("ScalingConfig") or {}).get("MaximumConcurrency")
    if concurrency:
        settings["max_concurrency"] = int(concurrency)
    queue_resource = (template.get("Resources") or {}).get(logical_id) or {} if logical_id else {}
    queue_properties = queue_resource.get("Properties") or {}
    if "VisibilityTimeout" in queue_properties:
        settings["visibility_timeout"] = float(queue_properties["VisibilityTimeout"])
    elif logical_id:  # a queue the template makes without one has SQS's default
        settings["visibility_timeout"] = float(DEFAULT_VISIBILITY_TIMEOUT)
    redrive = queue_properties.get("RedrivePolicy") or {}
    if isinstance(redrive, Mapping) and "maxReceiveCount" in redrive:
        settings["max_dequeue_count"] = int(redrive["maxReceiveCount"])
    if handler is None:
        return
    function = LambdaFunction(
        name=name,
        handler=handler,
        queue=queue,
        queue_arn=f"arn:aws:sqs:{resolver.region}:{ACCOUNT_ID}:{queue}",
        region=resolver.region,
        timeout=settings["function_timeout"],
        memory_mb=int(properties.get("MemorySize") or DEFAULT_MEMORY_MB),
        reports_failures=REPORT_BATCH_ITEM_FAILURES in (event.get("FunctionResponseTypes") or []),
        filters=filters,
    )
    options = {"batching_window": window} if window > 0 else {}
    app.queue_trigger(
        arg_name="messages", queue_name=queue, connection=CONNECTION, cardinality="many", settings=settings, **options
    )(lambda_handler(function, ACCOUNT_ID))

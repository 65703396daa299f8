"""host.yaml: the host's settings, shaped like Azure Functions' host.json.

host.json itself loads too, read as Functions reads it (:mod:`worker.settings.functions_json`).
Keys host.json has but this host ignores (its ``retry`` too) are listed in ``HostConfig.ignored_keys``.
Any other unknown key, wrong type or bad value is an error naming the key and line.
Environment overrides: ``AzureFunctionsJobHost__...``, then ``WORKER__...``, which wins.
Other top-level sections (``spark:``) are kept for their readers (:mod:`worker.settings.sections`).
A ``functions:`` section overrides settings per function (:meth:`HostConfig.for_function`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from worker.backends.queues import Limits
from worker.observability.logs import FUNCTIONS_LEVELS
from worker.settings import functions_json
from worker.settings import sections as foreign
from worker.settings.connections import ResolvedConnection, Service, resolve
from worker.settings.function_settings import FUNCTION_SETTINGS, IN_SECTION, PerFunction, default_threshold
from worker.settings.retry import RetryPolicy
from worker.settings.schema import (
    WEEK,
    Between,
    ConfigError,
    ConfigErrors,
    Setting,
    likely,
    parse_boolean,
    parse_duration,
    parse_integer,
    parse_number,
    parse_text,
    raise_all,
    unknown,
)
from worker.settings.sections import Section

__all__ = [
    "ConfigError",
    "ConfigErrors",
    "FunctionOptions",
    "FunctionOverrides",
    "HostConfig",
    "load_config",
    "parse_duration",
    "parse_http_host",
]

ENV_PREFIX = "WORKER__"
#: Functions' own override of host.json by app setting; matched in any case, as .NET's configuration does.
FUNCTIONS_ENV_PREFIX = "AzureFunctionsJobHost__"
#: Functions app settings that stand for a setting of the host's, and the key each gives where none is set.
FUNCTIONS_COUNT_SETTINGS = {
    "FUNCTIONS_WORKER_PROCESS_COUNT": "worker.processes",
    "PYTHON_THREADPOOL_THREAD_COUNT": "worker.handlerThreads",
}
#: Functions app settings a migrating app commonly carries that mean nothing to this host: named once at start.
UNUSED_FUNCTIONS_SETTINGS = (
    "APPINSIGHTS_INSTRUMENTATIONKEY",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "AzureWebJobsDashboard",
    "AzureWebJobsFeatureFlags",
    "AzureWebJobsSecretStorageType",
    "ENABLE_ORYX_BUILD",
    "FUNCTIONS_EXTENSION_VERSION",
    "FUNCTIONS_WORKER_RUNTIME_VERSION",
    "FUNCTIONS_WORKER_SHARED_MEMORY_DATA_TRANSFER_ENABLED",
    "PYTHON_ENABLE_DEBUG_LOGGING",
    "PYTHON_ENABLE_INIT_INDEXING",
    "PYTHON_ENABLE_WORKER_EXTENSIONS",
    "PYTHON_ISOLATE_WORKER_DEPENDENCIES",
    "SCM_DO_BUILD_DURING_DEPLOYMENT",
    "WEBSITE_CONTENTAZUREFILECONNECTIONSTRING",
    "WEBSITE_CONTENTSHARE",
    "WEBSITE_MAX_DYNAMIC_APPLICATION_SCALE_OUT",
    "WEBSITE_RUN_FROM_PACKAGE",
    "WEBSITE_TIME_ZONE",
)


def unused_functions_settings(environ: Mapping[str, str]) -> list[str]:
    """The Functions app settings in ``environ`` that this host does not use, so that start can name them once
    rather than drop them without a word."""
    return [name for name in UNUSED_FUNCTIONS_SETTINGS if name in environ]


#: host.json keys that mean something to the Functions host but nothing here.
IGNORED_HOST_JSON_KEYS = frozenset(
    {
        "logging.applicationInsights",
        "logging.fileLoggingMode",
        "logging.console",
        "extensionBundle",
        "aggregator",
        "healthMonitor",
        "managedDependency",
        "concurrency",
        "singleton",
        "watchDirectories",
        "watchFiles",
        "customHandler",
        "languageWorkers",
        "console",
        "extensions.http",
        "extensions.blobs",
        "extensions.serviceBus",
        "extensions.eventHubs",
        "extensions.durableTask",
    }
)


def _version(value: Any) -> str:
    """``version: 1.0`` unquoted reads as a number in YAML; it is still the version text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return parse_text(value)


def _log_levels(value: Any) -> dict[str, str]:
    """host.json's ``logging.logLevel``: Functions' categories (``default``, ``Host.Results``, ``Function``,
    ``Function.<name>``, ``Function.<name>.User``, a library's logger) to its level names (Trace ... None)."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of categories to levels, got {value!r}")
    levels: dict[str, str] = {}
    for category, level in value.items():
        if not isinstance(level, str) or level.lower() not in FUNCTIONS_LEVELS:
            raise ValueError(
                f"{category}: expected one of Trace, Debug, Information, Warning, Error, Critical, None; got {level!r}"
            )
        levels[str(category)] = level
    return levels


def _names(value: Any) -> tuple[str, ...]:
    """A list of ``module:attribute`` names (``worker.middleware``)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"expected a list of module:attribute names, got {value!r}")
    return tuple(value)


def parse_http_host(value: Any) -> str:
    """``worker.httpHost``: an address of this machine to listen on, or a host name that resolves to one."""
    host = parse_text(value).strip()
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if not re.fullmatch(
        r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*", host
    ):
        raise ValueError(f"expected an address to listen on (0.0.0.0, 127.0.0.1, ::) or a host name, got {value!r}")
    return host


def _host_names(value: Any) -> tuple[str, ...]:
    """``worker.httpAllowedHosts``: the names, besides loopback's and ``worker.httpHost``, requests may reach this
    worker by."""
    if isinstance(value, str):
        value = [value]
    names = []
    for item in value if isinstance(value, list) else [value]:
        try:
            names.append(parse_http_host(item))
        except ValueError:
            raise ValueError(f"expected a list of host names (worker.example.com), got {value!r}") from None
    return tuple(names)


#: Every global key: the per-function settings' (:mod:`.function_settings`), then the host's own.
_SCHEMA: dict[str, Setting] = {
    "version": Setting("version", _version),
    **{entry.global_key: entry for entry in FUNCTION_SETTINGS if entry.global_key is not None},
    "worker.leaseRenewalFraction": Setting("lease_renewal_fraction", parse_number, Between(0.1, 0.9)),
    "worker.drainTimeout": Setting("drain_timeout", parse_duration, Between(0, 86400, "s")),
    "worker.burstStorageTimeout": Setting("burst_storage_timeout", parse_duration, Between(1, WEEK, "s")),
    "worker.maxInFlight": Setting("max_in_flight", parse_integer, Between(1, 100_000)),
    "worker.handlerThreads": Setting("handler_threads", parse_integer, Between(1, 1024)),
    "worker.httpPort": Setting("http_port", parse_integer, Between(0, 65535)),
    "worker.httpHost": Setting("http_host", parse_http_host),
    "worker.httpTokenFile": Setting("http_token_file", parse_text),
    "worker.httpOpenData": Setting("http_open_data", parse_boolean),
    "worker.httpAllowedHosts": Setting("http_allowed_hosts", _host_names),
    "worker.httpMaxConnections": Setting("http_max_connections", parse_integer, Between(1, 10_000)),
    "worker.httpHeaderTimeout": Setting("http_header_timeout", parse_duration, Between(0.1, 3600, "s")),
    "worker.httpIdleTimeout": Setting("http_idle_timeout", parse_duration, Between(0.1, 86400, "s")),
    "worker.invocationLogs": Setting("invocation_logs", parse_boolean),
    "worker.middleware": Setting("middleware", _names),
    "worker.processes": Setting("processes", parse_integer, Between(1, 256)),
    "logging.logLevel": Setting("log_levels", _log_levels),
}

#: The top-level keys the host reads itself. Any other top-level mapping, but host.json's that the host ignores, is
#: a section for the part of the worker that declares it (:mod:`worker.settings.sections`).
OWN_SECTIONS = frozenset({key.split(".")[0] for key in _SCHEMA} | {"connections", "functions"})


@dataclass(frozen=True, slots=True)
class FunctionOverrides:
    """One ``functions.<name>`` section: the settings it changes, and where it stands (file:line).

    ``derived`` names the settings in ``settings`` the section did not give but follow from one it gave
    (newBatchThreshold from batchSize), so that they are not taken for the user's own values.
    """

    settings: Mapping[str, Any]
    where: str
    derived: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class FunctionOptions(PerFunction):
    """The settings one function runs with: its ``functions:`` section over the global ones.

    As the WebJobs SDK keeps QueuesOptions apart from the host's options, a
    listener, an invocation and a completion carry only these, never the
    host's whole configuration (ports, Spark, connections). The fields, one
    per setting a function may have of its own, are :class:`PerFunction`'s
    (:mod:`worker.settings.function_settings`), whose global values :class:`HostConfig` holds.
    """

    #: The fields the user gave (in host.yaml, the environment, code or a template), as against defaults: a default
    #: past a backend's limit takes the limit, while a value given past it is refused (:meth:`within`).
    given: frozenset[str] = frozenset()

    def within(self, limits: Limits, service: str) -> tuple[FunctionOptions, list[str]]:
        """These options with every default a service does not take (SQS returns 10 messages a receive, not
        Functions' 16) set to the service's limit, and a line for each such change; values the user gave are left
        for :meth:`Limits.exceeded` to refuse. newBatchThreshold, when not given, follows a batch size cut so."""
        changes: dict[str, Any] = {}
        said = []
        for option, limit, meaning in limits.bounds():
            value = getattr(self, option)
            if option not in self.given and value > limit:
                changes[option] = type(value)(limit)
                said.append(f"{_key(option)} {value:g} -> {limit:g} ({service}: at most {limit:g} {meaning})")
        if "batch_size" in changes and "new_batch_threshold" not in self.given:
            changes["new_batch_threshold"] = default_threshold(changes["batch_size"])
        return (dataclasses.replace(self, **changes), said) if changes else (self, [])

    def apart_from(self, config: HostConfig) -> dict[str, Any]:
        """The settings a ``functions:`` section may set that differ here from ``config``'s global values, by
        field: what the host names when it loads the function."""
        return {
            entry.attr: getattr(self, entry.attr)
            for entry in IN_SECTION.values()
            if getattr(self, entry.attr) != getattr(config, entry.attr)
        }


#: The HostConfig fields a FunctionOptions copies.
_FUNCTION_OPTIONS = tuple(entry.attr for entry in FUNCTION_SETTINGS)


@dataclass(frozen=True, slots=True)
class HostConfig(PerFunction):
    """Every setting the host reads, with Azure Functions' defaults where it has one.

    Durations are seconds. The settings a function may have of its own (batch size, lease, retry ...) are
    :class:`PerFunction`'s fields (:mod:`worker.settings.function_settings`), here with their global values.
    """

    version: str = "1.0"
    #: Renew when this fraction of the lease has passed (Functions: half).
    lease_renewal_fraction: float = 0.5
    #: What running handlers get after SIGTERM: 20 s, so that a whole stop fits Kubernetes' default grace (30 s).
    drain_timeout: float = 20.0
    #: How long ``worker run --burst`` waits for storage it cannot reach before it gives up and exits non-zero.
    burst_storage_timeout: float = 60.0
    #: Messages held at once across all functions (received and not yet completed).
    max_in_flight: int = 64
    #: Threads that run synchronous handlers; a sync message waits for one. By default as many as the Functions
    #: Python worker's pool (``ThreadPoolExecutor``'s default, min(32, processors + 4)): a few more threads than
    #: cores, since more only take turns at one interpreter lock, and on a busy machine they contend for it.
    handler_threads: int = field(default_factory=lambda: min(32, (os.cpu_count() or 1) + 4))
    #: Port of /healthz, /readyz, /metrics and /leases; 0 (the default) turns the server off.
    http_port: int = 0
    #: Address the endpoints listen on: every interface, because probes and scrapes come to the pod's address.
    http_host: str = "0.0.0.0"
    #: File holding the bearer token that guards /metrics and /leases (relative to host.yaml's folder); the token
    #: itself is read at start (:mod:`worker.settings.http_token`), never kept here.
    http_token_file: str | None = None
    #: Serve /leases and the console's data without a token on an address beyond loopback (worker.runtime.guard).
    http_open_data: bool = False
    #: Host names, besides loopback's and http_host, that requests may name (refusing the rest stops DNS rebinding).
    http_allowed_hosts: tuple[str, ...] = ()
    #: Connections to the endpoints open at once; past it a new one is closed at once (worker.runtime.connections).
    #: Few: probes, a scraper and a console need a handful, and each holds a file descriptor messages may need.
    http_max_connections: int = 64
    #: Longest a new connection may take to send its request's headers, in seconds.
    http_header_timeout: float = 10.0
    #: Longest a connection may stay idle between requests, in seconds: above a minute, Prometheus' usual interval.
    http_idle_timeout: float = 75.0
    #: An INFO line when each invocation starts (Executing) and ends (Executed), as Functions logs them.
    invocation_logs: bool = True
    #: Middleware to add, as ``module:attribute`` names, after the host's own and the app's.
    middleware: tuple[str, ...] = ()
    #: Worker processes ``worker run`` starts under a supervisor (FUNCTIONS_WORKER_PROCESS_COUNT); 1: no supervisor.
    processes: int = 1
    #: Log levels by Functions category (host.json's ``logging.logLevel``); ``worker run --log-level`` wins.
    log_levels: Mapping[str, str] = field(default_factory=dict)
    #: Named connection strings; an environment variable of the same name wins.
    connections: Mapping[str, str] = field(default_factory=dict)
    #: Folder relative paths (the embedded queue file) are resolved against: host.yaml's.
    base_dir: Path = field(default_factory=Path.cwd)
    #: The ``functions:`` section: settings of single functions, by function name.
    functions: Mapping[str, FunctionOverrides] = field(default_factory=dict)
    #: Top-level sections the host does not read itself (``spark:``), by name, as given: what declares a section reads
    #: it (:mod:`worker.settings.sections`); one that nothing declares is refused at start.
    sections: Mapping[str, Section] = field(default_factory=dict)
    #: Keys read but not used (copied from host.json), for the host to warn about.
    ignored_keys: tuple[str, ...] = ()
    #: The file the settings were read from (host.yaml or host.json); None for the defaults.
    source: Path | None = None
    #: The fields the settings gave (the file, the environment), as against defaults; None for a HostConfig made in
    #: code, where every field whose value differs from its default counts as given. Where a value came from, not a
    #: setting: two configs of the same values are equal.
    given: frozenset[str] | None = field(default=None, compare=False)

    def differences(self) -> dict[str, str]:
        """The settings that differ from the defaults, by host.yaml key, as text for people (the console).

        Connection strings and the mappings of other sections (Spark's properties) may hold secrets: only their
        names are given. Where the files are and the ``functions:`` sections (shown with each function) are left out.
        """
        default = HostConfig()
        keys = {setting.attr: key for key, setting in _SCHEMA.items()}
        found: dict[str, str] = {}
        for item in dataclasses.fields(self):
            if item.name in ("base_dir", "source", "ignored_keys", "functions", "sections", "given"):
                continue
            value = getattr(self, item.name)
            if value == getattr(default, item.name):
                continue
            if item.name == "connections":
                text = ", ".join(sorted(value))
            elif isinstance(value, RetryPolicy):
                text = value.describe()
            elif isinstance(value, Mapping):
                text = ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
            elif isinstance(value, tuple):
                text = ", ".join(map(str, value))
            else:
                text = "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
            found[keys.get(item.name, item.name)] = text
        for name, section in sorted(self.sections.items()):
            for key, value in section.values.items():
                found[f"{name}.{key}"] = ", ".join(sorted(map(str, value))) if isinstance(value, Mapping) else str(value)
        return found

    def for_function(
        self, name: str, code_retry: RetryPolicy | None = None, code_settings: Mapping[str, Any] | None = None
    ) -> FunctionOptions:
        """The settings function ``name`` runs with: its ``functions:`` section over the global ones.

        ``code_retry`` is a retry policy given in code (``@app.retry``); the
        function's own host.yaml ``retry`` wins over it, and it wins over the
        global ``retry``: the most specific setting wins.
        ``code_settings`` (FunctionOptions fields given with the code: a SAM
        template's) stand likewise between the two. The result's ``given`` names what any of these gave.
        """
        section = self.functions.get(name)
        overrides = {**(code_settings or {}), **(section.settings if section is not None else {})}
        if code_retry is not None and "retry" not in overrides:
            overrides["retry"] = code_retry
        values = {attr: overrides.get(attr, getattr(self, attr)) for attr in _FUNCTION_OPTIONS}
        given = set(self.given_fields()) | set(code_settings or {}) | ({"retry"} if code_retry is not None else set())
        if section is not None:
            given |= set(section.settings) - section.derived
        return FunctionOptions(**values, given=frozenset(given) & set(_FUNCTION_OPTIONS))

    def given_fields(self) -> frozenset[str]:
        """The fields the user gave: :attr:`given` as read, or (made in code) every field unlike its default."""
        if self.given is not None:
            return self.given
        default = HostConfig()
        return frozenset(attr for attr in _FUNCTION_OPTIONS if getattr(self, attr) != getattr(default, attr))

    def key_of(self, function: str, attr: str) -> str:
        """The host.yaml key that gives function ``function`` its ``attr`` (a HostConfig field), for messages.

        ``functions.<name>.<key> (file:line)`` where the function's section sets it, else the global key.
        """
        section = self.functions.get(function)
        if section is not None and attr in section.settings:
            key = next(key for key, entry in IN_SECTION.items() if entry.attr == attr)
            return f"functions.{function}.{key} ({section.where})"
        return next(key for key, setting in _SCHEMA.items() if setting.attr == attr)

    def resolve_connection(
        self, name: str | None, service: Service = "queue", *, embedded_default: bool = False
    ) -> ResolvedConnection:
        """Resolve a binding's ``connection`` as Functions does (:mod:`worker.settings.connections`), reading it now.

        Raises ConnectionSettingError (MissingConnection with Functions' message) when it resolves to nothing.
        """
        return resolve(name, service, environ=os.environ, connections=self.connections, embedded_default=embedded_default)

    def connection_string(self, name: str | None, service: Service = "queue") -> str | None:
        """The connection string of ``name``; None is the embedded queue's default file.

        ``name`` None is a binding that names no connection (a WorkerApp's, or
        a CLI command without ``--connection``): ``AzureWebJobsStorage`` when
        it is set, else the embedded queue. A named one must resolve.
        """
        return self.resolve_connection(name, service, embedded_default=name is None).value


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path to the 1-based line where its key stands, for error messages."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, prefix: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                path = (*prefix, str(key_node.value))
                lines[path] = key_node.start_mark.line + 1
                walk(value_node, path)

    if root is not None:
        walk(root, ())
    return lines


def _foreign(name: str, value: Any) -> bool:
    """Whether the top-level ``name`` is a section for another part of the worker to read: a mapping (or nothing,
    its keys all commented out) under a name that is not the host's own, nor likely a misspelling of one
    (``extension:``), which the loader refuses as it is."""
    return (
        name not in OWN_SECTIONS
        and name not in IGNORED_HOST_JSON_KEYS
        and (value is None or isinstance(value, dict))
        and likely(name, OWN_SECTIONS) is None
    )


def _flatten(tree: Any, prefix: str, out: dict[str, Any], where: str) -> None:
    """Flatten nested mappings to dotted keys, stopping at ignored host.json sections."""
    if not isinstance(tree, dict):
        raise ConfigError(prefix.rstrip(".") or "(top level)", f"expected a mapping, got {tree!r}", where)
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if path in IGNORED_HOST_JSON_KEYS or path in ("connections", "functions"):
            out[path] = value
        elif value is None and any(known.startswith(path + ".") for known in _SCHEMA):
            continue  # a section whose keys are all commented out
        elif isinstance(value, dict) and path not in _SCHEMA:
            _flatten(value, path + ".", out, where)
        else:
            out[path] = value


def _env_value(raw: str) -> Any:
    """An environment variable's text read as a YAML scalar (``4``, ``true``), else as the text it is."""
    try:
        return yaml.safe_load(raw) if raw.strip() else raw
    except (yaml.YAMLError, RecursionError):  # read as the text it is, which its setting then refuses
        return raw


def _env_overrides(environ: Mapping[str, str]) -> dict[tuple[str, ...], tuple[Any, str]]:
    """``WORKER__a__b=v`` becomes ``{("a", "b"): (v parsed as a YAML scalar, "environment WORKER__a__b")}``."""
    found: dict[tuple[str, ...], tuple[Any, str]] = {}
    for name, raw in environ.items():
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            found[tuple(name[len(ENV_PREFIX) :].split("__"))] = (_env_value(raw), f"environment {name}")
    return found


#: Every key path the host knows, lower-cased, to its spelling: Functions' overrides are matched in any case.
_SPELLINGS = {
    ".".join(parts[:end]).lower(): ".".join(parts[:end])
    for key in [*_SCHEMA, *IGNORED_HOST_JSON_KEYS, "connections", "functions"]
    for parts in [key.split(".")]
    for end in range(1, len(parts) + 1)
}


def _functions_overrides(environ: Mapping[str, str]) -> tuple[dict[tuple[str, ...], tuple[Any, str]], list[str]]:
    """Functions' ``AzureFunctionsJobHost__a__b=v`` app settings, as :func:`_env_overrides` gives the host's, and the
    host.json keys they set that the host does not use.

    Why: Functions overrides host.json per environment with these, and an app moved here carries them; dropped,
    production's own ``maxDequeueCount`` would quietly be the file's. The prefix and the known keys are matched in
    any case, as .NET's configuration matches them; a key under one the host ignores (``extensionBundle__id``) is
    that ignored key, and ``functions__0`` (host.json's list of functions to load) is ignored as the list is, and
    ``retry__...`` as host.json's ``retry`` is.
    """
    found: dict[tuple[str, ...], tuple[Any, str]] = {}
    ignored: list[str] = []
    size = len(FUNCTIONS_ENV_PREFIX)
    for name, raw in environ.items():
        if name[:size].lower() != FUNCTIONS_ENV_PREFIX.lower() or len(name) <= size:
            continue
        parts: list[str] = []
        for part in name[size:].split("__"):
            spelled = _SPELLINGS.get(".".join([*parts, part]).lower())
            parts = spelled.split(".") if spelled else [*parts, part]
            if ".".join(parts) in IGNORED_HOST_JSON_KEYS:
                break
        key = ".".join(parts)
        if key in IGNORED_HOST_JSON_KEYS or (parts[0] == "functions" and len(parts) == 2 and parts[1].isdigit()):
            ignored.append(parts[0] if parts[0] == "functions" else key)
            continue
        if parts[0] == "retry":  # host.json's retry, which Functions does not apply to queue triggers
            ignored.append("retry")
            continue
        found[tuple(parts)] = (_env_value(raw), f"environment {name}")
    return found, ignored


def load_config(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> HostConfig:
    """Read host.yaml (or defaults when ``path`` is None or the default file is absent) plus overrides.

    Raises ConfigError naming the key, and the file and line where it stands; one naming the file for a file
    nested deeper than Python's recursion limit (5,000 ``[``, say), which the parsers and checks cannot walk.
    """
    try:
        return _load_config(path, environ)
    except RecursionError:
        raise ConfigError("(syntax)", functions_json.TOO_DEEP, str(path)) from None


@dataclass
class _Gathered:
    """What the file and the environment give, before any of it is read: each key's value and where it stands."""

    values: dict[str, tuple[Any, str]] = field(default_factory=dict)
    #: host.json keys the host does not use.
    ignored: list[str] = field(default_factory=list)
    #: file:line of every key in the file, for errors inside sections read whole (functions:).
    line_of: dict[str, str] = field(default_factory=dict)
    #: Top-level sections for other parts of the worker (``spark:``), where each of their keys stands in the file,
    #: and the environment's values for them.
    given: dict[str, Any] = field(default_factory=dict)
    origins: dict[tuple[str, ...], str] = field(default_factory=dict)
    overrides: list[tuple[tuple[str, ...], Any, str]] = field(default_factory=list)
    base_dir: Path = field(default_factory=Path.cwd)


@dataclass
class _Read:
    """The settings read so far; what is read once every key is in (each function's section, log categories and
    retry fields from the environment); and every problem, not just the first: one run shows all there is to fix."""

    settings: dict[str, Any] = field(default_factory=dict)
    connections: dict[str, str] = field(default_factory=dict)
    log_levels: dict[str, tuple[Any, str]] = field(default_factory=dict)
    retry_fields: dict[str, Any] = field(default_factory=dict)
    functions: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    errors: list[ConfigError] = field(default_factory=list)


def _load_config(path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None) -> HostConfig:
    environ = os.environ if environ is None else environ
    found = _Gathered()
    if path is not None:
        _gather_file(Path(path), found)
    _gather_environment(environ, found)
    read = _Read()
    for key, (value, where) in found.values.items():
        try:
            _read_key(key, value, where, read, found)
        except ConfigError as exc:
            read.errors.append(exc)
    _read_collected(read, environ)
    settings = read.settings
    given_keys = frozenset(settings)
    threshold_given = "new_batch_threshold" in settings
    if not threshold_given:
        settings["new_batch_threshold"] = default_threshold(settings.get("batch_size", 16))
    functions = _read_functions(read, derive_threshold=not threshold_given)
    raise_all(read.errors)
    return HostConfig(
        **settings,
        connections=read.connections,
        functions=functions,
        base_dir=found.base_dir,
        sections=foreign.gather(found.given, found.origins, found.overrides),
        ignored_keys=tuple(sorted(set(found.ignored))),
        source=Path(path).resolve() if path is not None else None,
        given=given_keys,
    )


def _gather_file(file: Path, found: _Gathered) -> None:
    """The file's keys, flattened, with their lines; its top-level sections for other parts of the worker apart."""
    found.base_dir = file.resolve().parent
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("(file)", f"cannot read {file}: {exc.strerror or exc}") from exc
    tree, text = _parse_file(file, text)
    key_lines = _key_lines(text)
    lines = {".".join(key): line for key, line in key_lines.items()}
    found.line_of.update((key, f"{file}:{line}") for key, line in lines.items())
    tree = tree if tree is not None else {}
    if isinstance(tree, dict):
        given = {str(name): tree.pop(name) for name, value in list(tree.items()) if _foreign(str(name), value)}
        found.given.update(given)
        found.origins.update((key, f"{file}:{line}") for key, line in key_lines.items() if key[0] in found.given)
    flat: dict[str, Any] = {}
    _flatten(tree, "", flat, str(file))
    for key, value in flat.items():
        if key == "retry" and file.suffix.lower() == ".json":  # Functions' retry: not for queue triggers
            found.ignored.append(key)
            continue
        line = lines.get(key)
        found.values[key] = (value, f"{file}:{line}" if line else str(file))


def _parse_file(file: Path, text: str) -> tuple[Any, str]:
    """The file's tree, as JSON (host.json) or YAML, and the text to find its keys' lines in (YAML's)."""
    if file.suffix.lower() == ".json":
        try:
            tree = functions_json.parse(text)
        except functions_json.JsonFileError as exc:
            raise ConfigError("(syntax)", f"not valid JSON: {exc}", f"{file}:{exc.line}") from None
        # Lines of keys, for messages: the same text as YAML (JSON is YAML, once its comments are blanks and
        # its tabs, which JSON allows only between tokens, spaces).
        return tree, functions_json.without_comments(text).replace("\t", "  ")
    try:
        return yaml.safe_load(text), text
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{file}:{mark.line + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError("(syntax)", f"not valid YAML: {problem}", at) from exc


def _gather_environment(environ: Mapping[str, str], found: _Gathered) -> None:
    """Functions' app settings over the file, then the host's own over both; those under another part's section
    (``WORKER__spark__master``) kept for that section."""
    functions_env, functions_ignored = _functions_overrides(environ)
    found.ignored += functions_ignored
    for parts, (value, where) in [*functions_env.items(), *_env_overrides(environ).items()]:
        if len(parts) > 1 and (parts[0] in found.given or _foreign(parts[0], {})):
            found.overrides.append((parts, value, where))
        else:
            found.values[".".join(parts)] = (value, where)


def _read_collected(read: _Read, environ: Mapping[str, str]) -> None:
    """Read what the environment gives in parts (log categories, retry fields) and Functions' process and thread
    counts where no setting gave them."""
    for category, (value, where) in read.log_levels.items():
        try:
            level = _SCHEMA["logging.logLevel"].read(f"logging.logLevel.{category}", {category: value}, where)
        except ConfigError as exc:
            read.errors.append(exc)
            continue
        read.settings["log_levels"] = {**read.settings.get("log_levels", {}), **level}
    for variable, key in FUNCTIONS_COUNT_SETTINGS.items():
        setting = _SCHEMA[key]
        if setting.attr not in read.settings and variable in environ:
            try:
                read.settings[setting.attr] = setting.read(
                    variable, _env_value(environ[variable]), f"environment {variable}"
                )
            except ConfigError as exc:
                read.errors.append(exc)
    if read.retry_fields:
        try:
            read.settings["retry"] = _SCHEMA["retry"].read("retry", read.retry_fields, "environment WORKER__retry__...")
        except ConfigError as exc:
            read.errors.append(exc)


def _read_functions(read: _Read, *, derive_threshold: bool) -> dict[str, FunctionOverrides]:
    """Each ``functions.<name>`` section read, once the global values are known."""
    functions: dict[str, FunctionOverrides] = {}
    for name, (fields, where) in read.functions.items():
        try:
            functions[name] = _function_overrides(name, fields, where, derive_threshold=derive_threshold)
        except ConfigError as exc:
            read.errors.append(exc)
    return functions


def _read_key(key: str, value: Any, where: str, read: _Read, found: _Gathered) -> None:
    """Put one flattened key where it belongs: a setting read against the schema, or a section collected whole."""
    if key in IGNORED_HOST_JSON_KEYS:
        found.ignored.append(key)
        return
    if key == "connections" or key.startswith("connections."):
        read.connections.update(_connections(key, value, where))
        return
    if key.startswith("logging.logLevel."):  # one category's level from the environment
        read.log_levels[key[len("logging.logLevel.") :]] = (value, where)
        return
    if key == "functions" and isinstance(value, list):  # host.json's list of the functions to load
        found.ignored.append(key)
        return
    if key == "functions" or key.startswith("functions."):
        _function_sections(key, value, where, lambda k: found.line_of.get(k, ""), read.functions)
        return
    if key.startswith("retry."):  # one retry field from the environment
        read.retry_fields[key[len("retry.") :]] = value
        return
    if key == "worker.httpToken":  # a secret in a settings file ends up in images, repositories and logs
        raise ConfigError(
            key,
            "the token does not belong in the settings: set the environment variable "
            "WORKER_HTTP_TOKEN, or worker.httpTokenFile to a file holding it",
            where,
        )
    setting = _SCHEMA.get(key)
    if setting is None:
        inside = sorted(known[len(key) + 1 :] for known in _SCHEMA if known.startswith(key + "."))
        if inside:  # a known section given a scalar or a list
            raise ConfigError(key, f"expected a mapping of {', '.join(inside)}; got {value!r}", where)
        raise ConfigError(key, unknown(key, [*_SCHEMA, "connections", "functions"], "known keys"), where)
    read.settings[setting.attr] = setting.read(key, value, where)


def _key(attr: str) -> str:
    """The global host.yaml key of a HostConfig field, for messages."""
    return next(key for key, setting in _SCHEMA.items() if setting.attr == attr)


def _function_sections(
    key: str, value: Any, where: str, lines: Callable[[str], str], found: dict[str, tuple[dict[str, Any], str]]
) -> None:
    """Collect ``functions:`` (the whole section from a file) or one ``functions.<name>.<key>`` (the environment)."""
    if key == "functions":
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected a mapping of function names to their settings, got {value!r}", where)
        for name, fields in value.items():
            if not isinstance(fields, dict):
                raise ConfigError(
                    f"functions.{name}",
                    f"expected a mapping of settings, got {fields!r}",
                    lines(f"functions.{name}") or where,
                )
            at = lines(f"functions.{name}") or where
            existing = found.setdefault(str(name), ({}, at))[0]
            for field_key, field_value in fields.items():
                existing[str(field_key)] = (field_value, lines(f"functions.{name}.{field_key}") or at)
        return
    parts = key.split(".")
    if len(parts) < 3:
        raise ConfigError(key, "expected functions.<function name>.<setting>", where)
    name, field_key = parts[1], parts[2]
    existing = found.setdefault(name, ({}, where))[0]
    if field_key == "retry" and len(parts) > 3:  # WORKER__functions__f__retry__strategy=...
        retry, _ = existing.get("retry", ({}, where))
        existing["retry"] = ({**(retry if isinstance(retry, dict) else {}), parts[3]: value}, where)
    else:
        existing[field_key] = (value, where)


def _function_overrides(
    name: str, fields: Mapping[str, tuple[Any, str]], where: str, *, derive_threshold: bool
) -> FunctionOverrides:
    """Parse one function's section against the schema of the keys a function may set."""
    settings: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for field_key, (value, at) in fields.items():
        dotted = f"functions.{name}.{field_key}"
        setting = IN_SECTION.get(field_key)
        try:
            if setting is None:
                raise ConfigError(dotted, unknown(field_key, IN_SECTION, "a function may set"), at)
            settings[setting.attr] = setting.read(dotted, value, at)
        except ConfigError as exc:
            errors.append(exc)
    raise_all(errors)
    if derive_threshold and "batch_size" in settings and "new_batch_threshold" not in settings:
        settings["new_batch_threshold"] = default_threshold(settings["batch_size"])
        return FunctionOverrides(settings, where, derived=frozenset({"new_batch_threshold"}))
    return FunctionOverrides(settings, where)


def _connections(key: str, value: Any, where: str) -> dict[str, str]:
    """``connections: {Name: "conn string"}``, or one ``connections.Name`` from the environment."""
    if key == "connections":
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(key, "expected a mapping of names to connection strings", where)
        return {str(k): v for k, v in value.items()}
    if not isinstance(value, str):
        raise ConfigError(key, "expected a connection string", where)
    return {key.split(".", 1)[1]: value}

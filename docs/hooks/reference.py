"""The references, written from the code at build time so that they cannot drift from it.

- ``reference/cli.md``: every ``worker`` command, subcommand and argument, walked from the CLI's own argparse parser
  (``worker.ops.cli._parser``), with its help text, default and choices.
- ``reference/settings.md``: every key host.yaml and host.json accept, from the settings schema
  (``worker.settings.config``), the per-function settings' table (``worker.settings.function_settings``, which
  words each of its own) and the sections the host's middleware declare (Spark's ``spark:``): its type (from
  the parser the schema reads it with), its default (from ``HostConfig``, or the section's dataclass), its range
  (from the schema's check), the Functions setting it mirrors and what it means. A key of a schema with no meaning
  below, or a meaning for a key no schema has any longer, fails the build.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from worker.middleware import builtin
from worker.ops import cli
from worker.settings import config as settings
from worker.settings import function_settings
from worker.settings import schema as checks

CLI_PAGE = "reference/cli.md"
SETTINGS_PAGE = "reference/settings.md"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, CLI_PAGE, content=cli_page()))
    files.append(File.generated(config, SETTINGS_PAGE, content=settings_page()))
    return files


def on_page_content(html: str, page: Page, **_: Any) -> str:
    """The docstrings' Sphinx roles (``:class:`Out```) shown as the code they name, as the mkdocstrings handler
    leaves the role's name in front of it."""
    return re.sub(r":(?:attr|class|meth|func|mod|data|exc|obj):(?=<code>)", "", html)


# -- worker commands ---------------------------------------------------------------------------------------------


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_commands(sub, (*path, name)))
    return found


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _argument(action: argparse.Action) -> tuple[str, str, str]:
    """The argument as typed, its default, and what it does (with its choices)."""
    if action.option_strings:
        name = ", ".join(f"`{option}`" for option in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (
                action.dest.upper() if not action.choices else "{" + ",".join(map(str, action.choices)) + "}"
            )
            name += f" `{metavar}`"
    else:
        name = f"`{action.metavar or action.dest}`"
        if action.nargs in ("?", "*"):
            name += " (optional)"
        elif action.nargs == "+":
            name += " (one or more)"
    default = action.default
    if action.nargs == 0 or default in (None, argparse.SUPPRESS) or default is False:
        shown = ""
    else:
        shown = f"`{default:g}`" if isinstance(default, float) else f"`{default}`"
    help_text = (action.help or "") % {"default": action.default, "prog": "worker"} if action.help else ""
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        help_text = f"{help_text} (one of {', '.join(f'`{choice}`' for choice in action.choices)})".strip()
    return name, shown, help_text


def cli_page() -> str:
    parser = cli._parser()
    lines = [
        "# worker commands",
        "",
        "Generated from the `worker` command's own parser at build time: every command, subcommand and argument, "
        "with what `--help` says of it. Exit codes: 0 success; 1 a queue operation failed; 2 bad arguments, "
        "settings or app; 3 a process recycled after a timeout (`worker run --no-supervisor` only).",
        "",
        "Shell completion: `source <(worker completion bash)` (or `zsh`), for instance in `~/.bashrc`.",
        "",
    ]
    for path, sub in _commands(parser):
        if not path:
            continue
        title = " ".join(("worker", *path))
        lines += [f"## {title}", "", _cell(sub.description or ""), "", "```text", sub.format_usage().strip(), "```", ""]
        rows = [
            _argument(action)
            for action in sub._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        ]
        children = [action for action in sub._actions if isinstance(action, argparse._SubParsersAction)]
        for action in children:
            lines += ["| subcommand | what it does |", "|---|---|"]
            for choice in action._choices_actions:
                anchor = f"{title} {choice.dest}".replace(" ", "-")
                lines.append(f"| [`{choice.dest}`](#{anchor}) | {_cell(choice.help)} |")
            lines.append("")
        if rows:
            lines += ["| argument | default | what it does |", "|---|---|---|"]
            lines += [f"| {name} | {default} | {_cell(help_text)} |" for name, default, help_text in rows]
            lines.append("")
    return "\n".join(lines)


# -- settings -----------------------------------------------------------------------------------------------------

#: What each key of the host's own and the sections' means, and the Azure Functions setting it mirrors ("" where
#: Functions has none). The per-function settings carry their own (:data:`PER_FUNCTION`).
MEANINGS: dict[str, tuple[str, str]] = {
    "version": ("accepted as in host.json", "`version`"),
    "worker.leaseRenewalFraction": ("renew when this part of the lease has passed", "none: Functions renews at half"),
    "worker.drainTimeout": (
        "time running handlers get after SIGTERM (a stop then takes at most 7 s more: "
        "[shutdown](../leases.md#what-happens-to-a-message))",
        "",
    ),
    "worker.burstStorageTimeout": (
        "how long `worker run --burst` waits for storage it cannot reach before it exits 1, saying so in one line",
        "",
    ),
    "worker.maxInFlight": ("messages held at once across all functions", ""),
    "worker.handlerThreads": ("threads for synchronous handlers", "`PYTHON_THREADPOOL_THREAD_COUNT`"),
    "worker.httpPort": ("port of `/healthz`, `/readyz`, `/metrics`, `/leases` and the web console at `/`; 0: off", ""),
    "worker.httpHost": (
        "address the endpoints listen on (`worker run --http-host` wins); see [Running and operating](../operating.md)",
        "",
    ),
    "worker.httpTokenFile": (
        "file (relative to host.yaml's folder) holding the bearer token `/metrics`, `/leases` "
        "and the console's data require (and the console's poison actions); or set "
        "`WORKER_HTTP_TOKEN` (not both). "
        "`worker.httpToken` is refused: a token does not belong in the settings",
        "",
    ),
    "worker.httpOpenData": (
        "with no token, serve `/leases` and the console's data on a `worker.httpHost` beyond "
        "loopback too (anyone who reaches the address reads them; warned at start). Without it "
        "they answer 403 there (on loopback they answer, with a warning at start)",
        "",
    ),
    "worker.httpAllowedHosts": (
        "names, besides `localhost`, IP addresses and `worker.httpHost`, that requests may "
        "reach the endpoints by (the `Host` header); any other answers 421 (DNS rebinding)",
        "",
    ),
    "worker.httpMaxConnections": (
        "connections to the endpoints open at once; past it a new one is closed at once, "
        "unless one that has waited over a second for its request gives way (see "
        "[Running and operating](../operating.md#limits-on-the-endpoints-connections))",
        "",
    ),
    "worker.httpHeaderTimeout": (
        "longest a new connection to the endpoints may take to send its request's headers; then it is closed",
        "",
    ),
    "worker.httpIdleTimeout": (
        "longest a connection to the endpoints may stay idle between requests; then it is closed",
        "",
    ),
    "worker.invocationLogs": (
        "an INFO line when each invocation starts (`Executing`) and ends (`Executed`, with outcome and duration)",
        "the Functions host's own Executing / Executed lines",
    ),
    "worker.middleware": ("middleware to add after the host's own and the app's, as `module:attribute`", ""),
    "worker.processes": (
        "worker processes under one supervisor (`worker run --processes N` wins)",
        "`FUNCTIONS_WORKER_PROCESS_COUNT`",
    ),
    "spark.master": ("where Spark runs: `local[n]`, `spark://`, `sc://` (Spark Connect), `yarn`, `k8s://`", ""),
    "spark.appName": ("Spark application name", ""),
    "spark.conf": ("Spark properties, given to the session builder", ""),
    "spark.startTimeout": ("how long making the session and its warm-up job may take before the start counts as failed", ""),
    "spark.checkTimeout": ("how long the check that a session is alive (and a Connect session's release) may wait", ""),
    "spark.webUi": (
        "a Spark Connect server's web UI (`http://host:port`), where the host cancels jobs an interrupt missed",
        "",
    ),
    "logging.logLevel": (
        "log levels by Functions category (`default`, `Host`, `Function`, `Function.<name>`, "
        "`Function.<name>.User`, a library's logger); `worker run --log-level` wins",
        "`logging.logLevel`",
    ),
}

#: The per-function settings, by their global key; one of single functions only (maxConcurrency) by its key.
PER_FUNCTION = {entry.global_key or entry.key: entry for entry in function_settings.FUNCTION_SETTINGS}

#: The settings' types, by the function the schema parses them with.
TYPES: dict[str, str] = {
    "parse_integer": "whole number",
    "parse_boolean": "true or false",
    "parse_number": "number",
    "parse_text": "text",
    "_version": "text",
    "parse_duration": "duration",
    "_optional_duration": "duration, or -1",
    "parse_conf": "map of Spark properties",
    "_log_levels": "map of category to level",
    "_names": "list of `module:attribute`",
    "parse_http_host": "address or host name",
    "_host_names": "list of host names",
    "parse_master": "Spark master",
    "parse_web_ui": "URL",
    "_retry_policy": "retry policy",
}

#: The host's own settings whose defaults are shown as durations; a per-function setting's are when it reads one.
DURATION_ATTRIBUTES = {"drain_timeout"}
DURATION_PARSERS = (checks.parse_duration, function_settings._optional_duration)


def _hms(seconds: float) -> str:
    whole = int(seconds)
    if whole != seconds or whole >= 86400:
        return f"{seconds:g}s"
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _default(setting: checks.Setting) -> str:
    """A key's default, from HostConfig; a per-function setting's computed one as its table words it."""
    attr, per_function = setting.attr, isinstance(setting, function_settings.FunctionSetting)
    if per_function and setting.default_text:
        return setting.default_text
    field = next(f for f in dataclasses.fields(settings.HostConfig) if f.name == attr)
    if field.default_factory is not dataclasses.MISSING:  # computed at start
        if attr == "handler_threads":
            return "processors + 4, at most 32"
        return "none" if not field.default_factory() else str(field.default_factory())
    duration = setting.parse in DURATION_PARSERS if per_function else attr in DURATION_ATTRIBUTES
    return _shown(field.default, duration=duration, attr=attr)


def _shown(value: Any, *, duration: bool, attr: str = "") -> str:
    """A default as the page shows it: durations as host.json writes them."""
    if value is None or value == () or value == {}:
        return "none"
    if duration:
        return f"`{_hms(value)}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and math.isfinite(value) and value == int(value) and attr != "lease_renewal_fraction":
        return f"`{int(value)}`"
    return f"`{value}`"


def _kind(setting: Any) -> str:
    name = getattr(setting.parse, "__name__", "")
    if name not in TYPES:
        raise PluginError(f"settings reference: no type name for {name!r}; add it to docs/hooks/reference.py")
    return TYPES[name]


def _range(setting: Any) -> str:
    check = setting.check
    if isinstance(check, (checks.Between, checks.OneOf)):
        text = str(check)
        return f"{text}, or `-1`" if setting.parse is function_settings._optional_duration else text
    return ""


def settings_page() -> str:
    schema = settings._SCHEMA
    documented = set(MEANINGS)
    sections = builtin.settings_sections([])
    known = (set(schema) - set(PER_FUNCTION)) | {f"{s.name}.{key}" for s in sections for key in s.keys}
    if missing := sorted(known - documented):
        raise PluginError(f"settings reference: keys of the schema with no meaning in docs/hooks/reference.py: {missing}")
    if stale := sorted(documented - known):
        raise PluginError(f"settings reference: meanings for keys the schema no longer has: {stale}")
    lines = [
        "# Settings",
        "",
        "Generated from the settings schema at build time: every key host.yaml (and host.json) accepts, with its "
        "type, default and range as the loader checks them, and the Azure Functions setting it mirrors. "
        "[Settings](../settings.md) tells how the file is found, read and overridden.",
        "",
        "Durations accept `hh:mm:ss`, `d.hh:mm:ss`, `250ms`, `30s`, `10m`, `2h`, `1d` or seconds. Every key can be "
        "set from the environment: `WORKER__` and the key's parts joined by `__` "
        "(`WORKER__extensions__queues__batchSize=4`).",
        "",
        "| key | type | default | range | Functions | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for key, setting in schema.items():
        meaning, functions = (entry.meaning, entry.functions) if (entry := PER_FUNCTION.get(key)) else MEANINGS[key]
        if functions == f"`{key}`":
            functions = "the same key"
        lines.append(
            f"| `{key}` | {_kind(setting)} | {_default(setting)} | {_cell(_range(setting))} | "
            f"{functions} | {_cell(meaning)} |"
        )
    lines += [
        "| `connections.<name>` | connection string, or `<name>__serviceUri` ... entries | none | | app settings "
        "(`AzureWebJobsStorage`, `<name>__queueServiceUri`) | looked up after the environment, as Functions looks "
        "up app settings; see [Backends](../backends.md) |",
        "",
        "## Per function",
        "",
        "A `functions.<name>` section sets these for one function (`WORKER__functions__<name>__<key>` from the "
        "environment); each has the range of the global key it stands for.",
        "",
        "| key | global key | type | range | meaning |",
        "|---|---|---|---|---|",
    ]
    for key, setting in function_settings.IN_SECTION.items():
        shown = f"`{setting.global_key}`" if setting.global_key else "(per function only)"
        lines.append(
            f"| `functions.<name>.{key}` | {shown} | {_kind(setting)} | {_cell(_range(setting))} | "
            f"{_cell(setting.meaning)} |"
        )
    lines += [
        "",
        "## Sections the middleware read",
        "",
        "The host does not read these sections itself: each is declared, read and checked by the middleware "
        "named, and set from the environment the same way (`WORKER__spark__master`; "
        "`WORKER__spark__conf__<property>` sets one Spark property). A wrong value is refused at start, listed "
        "with the other problems; a top-level section that nothing reads is refused by its name.",
    ]
    for section in sections:
        defaults = section.defaults()
        lines += [
            "",
            f"### `{section.name}`: {section.about}",
            "",
            "| key | type | default | range | meaning |",
            "|---|---|---|---|---|",
        ]
        for key, setting in section.keys.items():
            dotted = f"{section.name}.{key}"
            default = _shown(defaults[key], duration=setting.parse is checks.parse_duration)
            lines.append(
                f"| `{dotted}` | {_kind(setting)} | {default} | {_cell(_range(setting))} | {_cell(MEANINGS[dotted][0])} |"
            )
    lines += [
        "",
        "## host.json keys accepted and not used",
        "",
        "These keys mean something to the Functions host only; a host.json that has them loads, with a warning "
        "naming the file:",
        "",
        ", ".join(f"`{key}`" for key in sorted(settings.IGNORED_HOST_JSON_KEYS)),
        "",
    ]
    return "\n".join(lines)

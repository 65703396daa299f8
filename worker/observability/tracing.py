"""Whether the standard ``OTEL_*`` variables ask for OpenTelemetry traces, and why they cannot be had.

This module never imports OpenTelemetry, so the core runs without the ``otel`` extra.
Traces are on only when an exporter or endpoint variable asks; ``OTEL_SDK_DISABLED=true`` wins.
(The SDK alone exports to ``localhost:4318``, logging failures wherever no collector runs.)
Asked for but impossible (no extra, an unknown exporter or protocol), the start is refused in one line.
Every other variable is the SDK's to read (:mod:`worker.observability.otel`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.observability.otel import Telemetry

#: The service name traces carry unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names one.
SERVICE_NAME = "queueworker"
#: What installs the SDK and the OTLP/HTTP exporter.
OTEL_INSTALL = "pip install 'queueworker[otel]'"
#: The exporters this host can build (``OTEL_TRACES_EXPORTER``, comma-separated as the specification allows).
EXPORTERS = ("otlp", "console", "none")
#: The one OTLP protocol shipped: the HTTP exporter (the specification's default).
PROTOCOL = "http/protobuf"
#: Variables that ask for traces, in the order they are named in messages.
ASKING = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: Modules the extra brings, each of which must be importable.
_MODULES = {
    "opentelemetry.sdk.trace": "OpenTelemetry SDK",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter": "OTLP/HTTP exporter",
}


def disabled(environ: Mapping[str, str]) -> bool:
    """``OTEL_SDK_DISABLED=true`` (case-insensitive, as the specification's booleans): no traces at all."""
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def exporters(environ: Mapping[str, str]) -> list[str]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``), without ``none``."""
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    return [name for name in names if name != "none"]


def requested(environ: Mapping[str, str]) -> str | None:
    """The variable that asks for traces, or None when none does (or ``OTEL_SDK_DISABLED`` is true)."""
    if disabled(environ):
        return None
    for name in ASKING:
        value = environ.get(name, "").strip()
        if value and not (name == "OTEL_TRACES_EXPORTER" and not exporters(environ)):
            return name
    return None


def problem(environ: Mapping[str, str]) -> str | None:
    """Why the traces the variables ask for cannot be had here (one line with the fix), or None."""
    asking = requested(environ)
    if asking is None:
        return None
    chosen = exporters(environ)
    if unknown := [name for name in chosen if name not in EXPORTERS]:
        return f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}: this host exports traces with {', '.join(EXPORTERS)}"
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or PROTOCOL
    ).strip()
    if "otlp" in chosen and protocol != PROTOCOL:
        return f"OTLP protocol {protocol!r} is not shipped: this host exports OTLP as {PROTOCOL}"
    missing = [what for module, what in _MODULES.items() if not _importable(module)]
    if missing:
        return f"{asking} asks for OpenTelemetry traces, but the {' and '.join(missing)} are not installed: {OTEL_INSTALL}"
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or made unimportable
        return False


def start(environ: Mapping[str, str], service: str) -> Telemetry | None:
    """The SDK's tracer provider and exporters as the variables ask (``service``: the default service name), or None
    when they ask for nothing. Call :func:`problem` first: this assumes there is none."""
    if requested(environ) is None:
        return None
    from worker.observability.otel import Telemetry

    return Telemetry.from_environment(exporters(environ), service)

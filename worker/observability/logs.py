"""The host's structured log: one stream of lines, JSON off a terminal, with no secret in any of them.

Logs go to stderr: readable lines on a terminal, JSON lines elsewhere (a
container's log collector). The standard ``logging`` module (handlers' own
lines, libraries) is routed through the same renderer, so the stream stays one
object per line, and every line passes the redaction of account keys and SAS
signatures, whoever wrote it.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import TextIO

import structlog

#: Secrets as they appear in connection strings and URLs: account keys, SAS signatures and tokens.
_SECRET = re.compile(
    r"(?P<key>AccountKey|SharedAccessSignature|sig|SharedAccessKey)\s*=\s*(?P<value>[^;&\s\"']+)", re.IGNORECASE
)


def redact(text: str) -> str:
    """``text`` with every account key, SAS token and signature replaced by ``***``."""
    return _SECRET.sub(lambda m: f"{m.group('key')}=***", text)


def _redact_value(value: object) -> object:
    """``value`` without secrets: strings redacted, containers walked, other objects by the repr renderers show."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_redact_value(v) for v in value)
    shown = repr(value)  # what both renderers print for an object that is not JSON
    redacted = redact(shown)
    return value if redacted == shown else redacted


def _redact_event(_logger: object, _method: str, event: dict[str, object]) -> dict[str, object]:
    """A structlog processor: no log line carries a secret, whichever library put it in the message."""
    return {key: _redact_value(value) for key, value in event.items()}


def info_enabled() -> bool:
    """Whether INFO lines are written at all (``worker run --log-level``): lines that would be dropped need not be built.

    ``configure_logging`` sets the root logger's level, so the answer is read there rather than kept in a global.
    """
    return logging.getLogger().isEnabledFor(logging.INFO)


def configure_logging(level: str = "INFO", json_lines: bool | None = None, stream: TextIO | None = None) -> None:
    """Send structlog and stdlib logging to ``stream`` (stderr); JSON unless it is a terminal."""
    stream = sys.stderr if stream is None else stream
    if json_lines is None:
        json_lines = not stream.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, _redact_event, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line (print() writes the text and its newline apart): the processes of `--processes N`
        # share one stderr, and two lines must never interleave into one that is not JSON.
        logger_factory=structlog.WriteLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    # Lines from the standard logging module (handlers' own logging.info, libraries) go out in the same
    # form, so that the stream stays one JSON object per line.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _redact_event,
            renderer,
        ],
    ))
    # Python warnings (pyspark's UserWarnings, pandas' FutureWarnings) become log lines too, not raw stderr text.
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)  # handlers' own logging.info lines show, as in Functions
    # The Azure SDK logs every request at INFO: noise, and the place secrets would leak from first.
    logging.getLogger("azure").setLevel(max(numeric, logging.WARNING))
    # azure-identity logs each failed sign-in at WARNING as a page of text; the host's own line names the
    # connection and the cause once per failed call instead.
    logging.getLogger("azure.identity").setLevel(max(numeric, logging.ERROR))

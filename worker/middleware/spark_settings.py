"""Spark's settings: host.yaml's ``spark:`` section, declared, read and checked by Spark's middleware itself.

The host's loader keeps ``spark:`` as given (:mod:`worker.settings.sections`).
:data:`SECTION` says which keys it has, and how each is checked.
So a wrong one is listed with the other start problems, naming its file and line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.model import FunctionSpec
from worker.settings.config import HostConfig
from worker.settings.schema import Between, Setting, parse_duration, parse_text
from worker.settings.sections import SectionSchema


@dataclass
class SparkSettings:
    """Where and how Spark runs; the defaults are the ``spark:`` section's."""

    #: Where Spark runs: local[*], a cluster master, or a Spark Connect sc:// URL.
    master: str = "local[*]"
    app_name: str = "queueworker"
    #: Spark properties for the session builder (spark.sql.shuffle.partitions, ...).
    conf: dict[str, str] = field(default_factory=dict)
    #: Where the JVM's log goes; None leaves Spark's own logging as it is.
    log_file: Path | None = None
    #: How long making the session and its warm-up job may take; past it the start has failed (``/readyz`` says
    #: why) and it is tried again (by the Spark middleware after a pause, or by the next handler that asks). A
    #: cluster whose master or executors never come, or a Connect server that accepts connections and answers
    #: nothing, would otherwise hold the start for ever.
    start_timeout: float = 180.0
    #: How long the check that a session is alive (one call to the JVM or the Connect server), and a Connect
    #: session's release, may wait; past it the session counts as gone.
    check_timeout: float = 30.0
    #: The Spark Connect server's web UI (``http://host:4040``): through it the host cancels the jobs an interrupt
    #: could not reach (:mod:`worker.middleware.connect_jobs`). None: such jobs are reported, not cancelled.
    web_ui: str | None = None


def parse_master(value: Any) -> str:
    """``spark.master``: local[n], a cluster's master, or a Spark Connect server."""
    master = parse_text(value)
    if not re.match(r"^(local(\[(\*|\d+)\])?|local-cluster\[.*\]|spark://.+|sc://.+|yarn|k8s://.+|mesos://.+)$", master):
        raise ValueError(
            f"expected a Spark master (local[*], spark://host:port, sc://host:port, yarn, k8s://...), got {master!r}"
        )
    return master


def parse_conf(value: Any) -> dict[str, str]:
    """``spark.conf``: Spark property names to values, given to the SparkSession builder as text."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of Spark properties to values, got {value!r}")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def parse_web_ui(value: Any) -> str:
    """``spark.webUi``: the http(s) address of a Spark Connect server's web UI."""
    url = parse_text(value)
    if not re.match(r"^https?://[^/\s]+/?$", url):
        raise ValueError(f"expected the web UI's address, as http://host:port, got {url!r}")
    return url


#: The function option Spark's middleware reads, declared here so that the host knows it without importing the
#: middleware's module (which is imported only where Spark is asked for).
FUNCTION_OPTIONS = {
    "spark": "spark=True: the handler runs Spark, so the session starts with the host rather than at its first call",
}

#: The ``spark:`` section: its keys, each read into the :class:`SparkSettings` field of the same meaning.
SECTION = SectionSchema(
    "spark",
    {
        "master": Setting("master", parse_master),
        "appName": Setting("app_name", parse_text),
        "conf": Setting("conf", parse_conf),
        "startTimeout": Setting("start_timeout", parse_duration, Between(1, 86400, "s")),
        "checkTimeout": Setting("check_timeout", parse_duration, Between(1, 3600, "s")),
        "webUi": Setting("web_ui", parse_web_ui),
    },
    SparkSettings,
    about="Spark's middleware: where and how Spark runs",
)


def from_config(config: HostConfig) -> SparkSettings:
    """The settings ``config``'s ``spark:`` section gives (the defaults for what it leaves out), with the JVM's log
    in ``.worker/spark.log`` beside host.yaml. Raises ConfigError(s) for a wrong value; the host refuses those at
    start, listed with its other problems."""
    return SparkSettings(
        **SECTION.read(config.sections.get(SECTION.name)), log_file=config.base_dir / ".worker" / "spark.log"
    )


def asked_for(config: HostConfig, functions: Sequence[FunctionSpec], given_spark: bool) -> bool:
    """Whether the host builds Spark's middleware: a function says ``spark=True``, host.yaml has a ``spark:``
    section, the app or host.yaml gives a Spark middleware (``given_spark``), or the app imported
    :mod:`worker.spark` (its handlers may call ``spark.session()`` without the flag). An app that asks for none of
    these gets no Spark middleware, and its process never imports Spark's module."""
    return (
        given_spark
        or SECTION.name in config.sections
        or any(f.extra("spark") for f in functions)
        or "worker.spark" in sys.modules
    )

"""Spark for handlers: ``from worker import spark; spark.session()``.

In a handler, :func:`session` gives the process's SparkSession, made at first use from host.yaml's ``spark:``.
Its jobs are tagged, so the host can cancel them when it gives up (:mod:`worker.middleware.spark`).
No state is kept here: the session belongs to the running host's Spark middleware.
Spark belongs in sync handlers: they run on the host's threads, and Spark's tags are per thread.
The JVM logs to ``.worker/spark.log`` beside host.yaml.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.middleware.spark import SparkProvider, active_provider

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _provider() -> SparkProvider:
    provider = active_provider.get()
    if provider is None:
        raise RuntimeError(
            "worker.spark.session() answers inside a handler run by the host of an app that asks for Spark (a "
            "function with spark=True, a spark: section in host.yaml, or `from worker import spark` at the top of "
            "the app's module); outside a handler, make a session with "
            "worker.middleware.spark.SparkProvider(SparkSettings(...)).session()"
        )
    return provider


def session() -> SparkSession:
    """The worker's SparkSession; its jobs are tagged with the running invocation so the host can cancel them."""
    return _provider().session()


def is_remote() -> bool:
    """True when ``spark.master`` is a Spark Connect URL: the session has no SparkContext, RDDs or JVM."""
    return _provider().remote

"""Spark for handlers: ``from worker import spark; spark.session()``.

Inside a handler the host runs, :func:`session` gives the worker process's
SparkSession, made at first use from host.yaml's ``spark:`` section
(``local[*]`` by default, a cluster master, or a Spark Connect ``sc://`` URL),
with the handler's Spark jobs tagged so that the host can cancel them when it
gives up on the invocation (:mod:`worker.middleware.spark` does the work). No
state is kept here: the session belongs to the running host's Spark
middleware, found through the invocation's context.

Spark work belongs in synchronous handlers: they run in the host's threads, and
Spark's tags are per thread. The JVM's own logging goes to ``.worker/spark.log``
beside host.yaml, not into the worker's structured log.
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

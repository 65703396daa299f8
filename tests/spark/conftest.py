"""Fixtures of the Spark tests: a standalone cluster, started once per run when a test asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.spark.cluster import StandaloneCluster


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    yield cluster
    cluster.stop()

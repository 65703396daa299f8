"""Fixtures of the Spark tests: a standalone cluster and a Spark Connect server, each started once per run if asked for."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.spark.cluster import ConnectServer, StandaloneCluster


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = ConnectServer(tmp_path_factory.mktemp("spark-connect")).start()
    yield server
    server.stop()

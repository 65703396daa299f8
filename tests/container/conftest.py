"""The container tests' podman, base image and images, made once per run (the tests run as one group, on one process).

Each image is deploy/Dockerfile (or, for compose.yaml's Azurite, deploy/azurite.Dockerfile) as shipped, built with
only the base image replaced by the one made offline
(tests/container/podman.py); podman's layer cache and the base image stay on the machine between runs, so a warm
run rebuilds only what changed.
"""

from __future__ import annotations

import os

import pytest

from tests.container.podman import AZURITE_DOCKERFILE, Image, Podman, base_image, build, podman

#: The extras of the queue-only image: the worker with azure-functions, without PySpark (and so without Java).
QUEUE_ONLY_EXTRAS = "azure-functions"


@pytest.fixture(scope="session")
def containers() -> Podman:
    """podman with the tests' containers.conf; a failure naming the install command when a tool is missing."""
    return podman(dict(os.environ))


@pytest.fixture(scope="session")
def base(containers: Podman) -> str:
    return base_image(containers)


@pytest.fixture(scope="session")
def image(containers: Podman, base: str, tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The shipped image: the Dockerfile's default extras (the sample Spark pipeline)."""
    return build(containers, base, "localhost/queueworker-test:spark", tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="session")
def queue_image(containers: Podman, base: str, tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The queue-only image: ``--build-arg EXTRAS=azure-functions``, neither PySpark nor Java."""
    return build(
        containers, base, "localhost/queueworker-test:queue", tmp_path_factory.mktemp("image"), f"EXTRAS={QUEUE_ONLY_EXTRAS}"
    )


@pytest.fixture(scope="session")
def azurite_image(containers: Podman, base: str, tmp_path_factory: pytest.TempPathFactory) -> Image:
    """compose.yaml's Azurite: deploy/azurite.Dockerfile, package-lock.json's Azurite on the same base image."""
    return build(
        containers,
        base,
        "localhost/queueworker-test:azurite",
        tmp_path_factory.mktemp("image"),
        dockerfile=AZURITE_DOCKERFILE,
    )

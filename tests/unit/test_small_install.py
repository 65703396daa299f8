"""A small install: ``pip install queueworker`` without the ``oci`` extra runs the embedded queue and Azure Storage.

The OCI SDK is made missing here the way Python itself knows a missing module:
``sys.modules["oci"] = None`` makes ``import oci`` fail and ``find_spec`` answer
None. tests/deploy/test_wheel.py installs the built wheel into a fresh
virtualenv where the SDK is really absent.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.cli import run_cli

REPO = Path(__file__).resolve().parents[2]


def test_worker_version_is_the_packages(tmp_path: Path) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    ran = run_cli(tmp_path, "--version")
    assert (ran.returncode, ran.stdout) == (0, f"worker {version}\n")

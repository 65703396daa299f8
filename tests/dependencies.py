"""Declared ranges are tested ranges: the suite against the lowest and the newest versions of the direct dependencies.

``make test-deps`` (not part of ``make test``) runs this. For each run it makes a virtualenv of its own under
``.venv-deps/<run>``, installs the project with the extras ``make test`` installs, then runs the fast tier (what
``make check`` runs), the conformance suite on Azurite, OCI Queue's test server and moto (their fixtures start them),
and the Spark tests on a local master (pyspark's code paths: the fast tier leaves Spark out). The runs:

- ``lowest``: every package of ``PACKAGES`` pinned at the lower bound pyproject.toml declares for it (read from it,
  so that what is declared is what is tested); everything else as pip resolves it;
- ``newest``: no pins and no constraints.txt, so each is the newest release pip finds for this Python;
- ``lowest-<package>`` (``--each``): that package alone at its lower bound, the rest as in ``newest``, which says
  which package a failure of ``lowest`` belongs to. (Not the rest at constraints.txt's versions: its pins of the
  packages released with botocore, s3transfer's for one, leave no room for an old botocore.)

It prints a table (package, version, result per run) and exits 1 when a run failed. Each run's output is in
``.venv-deps/<run>.log``; a venv is made again from scratch each time. Runs go one after another (each uses the
machine's two cores through ``pytest -n 2``).

    python -m tests.dependencies                 # lowest, then newest
    python -m tests.dependencies --runs lowest   # one of them
    python -m tests.dependencies --each          # and each package alone at its lower bound
    python -m tests.dependencies --each --runs   # only each package alone
    python -m tests.dependencies --pin oci==2.170.0 --runs lowest   # a higher bound tried before it is declared

A pin below the declared bound cannot install beside the project (``pip install -e .`` requires the bound): to try
one, lower the bound in pyproject.toml and run ``--runs lowest``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENVS = REPO / ".venv-deps"
#: The packages whose ranges are tested: the SDKs the backends and the compat layer call, and the libraries under
#: every invocation.
PACKAGES = ("azure-storage-queue", "azure-core", "botocore", "oci", "azure-functions", "pyspark", "structlog", "tenacity")
#: The extras ``make test`` installs (the Makefile's), so that the fast tier finds what it imports.
EXTRAS = "test,spark,connect,oci,sqs,otel,browser,docs,azure-functions"
#: Packages released in step with a pinned one, pinned with it: boto3 X.Y.Z requires botocore X.Y.*, and moto needs
#: boto3; left free, pip walks back through hundreds of boto3 releases to find the one that matches.
COMPANIONS = {"botocore": "boto3"}
#: The Makefile's FAST_TIER.
FAST_TIER = "not (azurite or oci or sqs or spark or subprocess or slow or container)"
#: What each run runs, as pytest arguments: the fast tier, the conformance suite on the servers (its embedded-store
#: half is in the fast tier), and the Spark tests on a local master.
SUITES = {
    "fast tier": ["-n", "2", "-m", FAST_TIER],
    "conformance": ["-n", "2", "tests/conformance", "-m", "azurite or oci or sqs"],
    "spark local": ["tests/spark", "-k", "local"],
}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lower_bounds() -> dict[str, str]:
    """Each of ``PACKAGES`` -> the lower bound pyproject.toml declares for it (its dependencies or an extra)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    bounds: dict[str, str] = {}
    for requirement in requirements:
        match = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*([^;]*)", requirement)
        assert match, requirement
        name = normalise(match.group(1))
        lowest = re.search(r">=\s*([^,\s]+)", match.group(2))
        if name in PACKAGES and lowest:
            if name in bounds and bounds[name] != lowest.group(1):
                raise SystemExit(f"pyproject.toml declares two lower bounds for {name}: {bounds[name]}, {lowest.group(1)}")
            bounds[name] = lowest.group(1)
    missing = [name for name in PACKAGES if name not in bounds]
    if missing:
        raise SystemExit(f"pyproject.toml declares no lower bound for {', '.join(missing)}")
    return bounds


def run(command: list[str], log, **kwargs) -> int:
    log.write(f"\n$ {' '.join(command)}\n")
    log.flush()
    return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, **kwargs).returncode


def summary(log_path: Path, start: int) -> str:
    """pytest's last line (``3 failed, 900 passed in 60.00s``), from what the run wrote after ``start``."""
    with log_path.open() as log:
        log.seek(start)
        lines = [
            line.strip().strip("=").strip()
            for line in log
            if re.match(r"(=+ )?\d+ (passed|failed|errors?|deselected|skipped)\b.* in [\d.]+s", line)
        ]
    return lines[-1] if lines else "no summary"


def one_run(name: str, pins: dict[str, str]) -> tuple[dict[str, str], list[tuple[str, str]], bool]:
    """Make the venv, install, run the suites: (installed versions of PACKAGES, (suite, summary) pairs, passed)."""
    venv = VENVS / name
    shutil.rmtree(venv, ignore_errors=True)
    log_path = VENVS / f"{name}.log"
    python = venv / "bin" / "python"
    results: list[tuple[str, str]] = []
    with log_path.open("w") as log:
        started = time.monotonic()
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
        requirements = ["-e", f".[{EXTRAS}]"] + [f"{package}=={version}" for package, version in pins.items()]
        if (
            run([sys.executable, "-m", "venv", str(venv)], log)
            or run(pip + ["--upgrade", "pip"], log)
            or run(pip + requirements, log)
        ):
            return {}, [("install", "failed: see " + str(log_path.relative_to(REPO)))], False
        results.append(("install", f"{time.monotonic() - started:.0f} s"))
        listing = subprocess.run(
            [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        versions = {normalise(p["name"]): p["version"] for p in json.loads(listing)}
        log.write("\n" + "\n".join(f"{p}=={versions.get(p, '-')}" for p in PACKAGES) + "\n")
        passed = True
        # As make test runs the suite: its byte-code caches written (the Makefile's PYTEST_ENV); and without the
        # caller's VIRTUAL_ENV, which names another venv than the run's.
        environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
        environment.pop("VIRTUAL_ENV", None)
        for suite, arguments in SUITES.items():
            log.flush()
            start = log_path.stat().st_size
            began = time.monotonic()
            status = run([str(python), "-m", "pytest", "-q", *arguments], log, env=environment)
            passed = passed and status == 0
            results.append(
                (
                    suite,
                    f"{'passed' if status == 0 else 'FAILED'}: {summary(log_path, start)}"
                    f" ({time.monotonic() - began:.0f} s)",
                )
            )
    return {p: versions.get(p, "-") for p in PACKAGES}, results, passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        nargs="*",
        default=["lowest", "newest"],
        choices=["lowest", "newest"],
        help="lowest, newest or both (the default); none with --each runs only the packages alone",
    )
    parser.add_argument("--each", action="store_true", help="also each package alone at its lower bound")
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="PACKAGE==VERSION",
        help="a lower bound to try in place of the declared one (at or above it)",
    )
    args = parser.parse_args(argv)
    VENVS.mkdir(exist_ok=True)
    bounds = lower_bounds()
    for pin in args.pin:
        package, _, version = pin.partition("==")
        bounds[normalise(package)] = version
    plans: list[tuple[str, dict[str, str]]] = []
    for name in args.runs:
        if name == "lowest":
            pins = dict(bounds)
            pins.update({COMPANIONS[p]: bounds[p] for p in bounds if p in COMPANIONS})
            plans.append(("lowest", pins))
        else:
            plans.append(("newest", {}))
    if args.each:
        for package in PACKAGES:
            pins = {package: bounds[package]}
            if package in COMPANIONS:
                pins[COMPANIONS[package]] = bounds[package]
            plans.append((f"lowest-{package}", pins))
    if not plans:
        parser.error("nothing to run: name a run with --runs, or give --each")
    began = time.monotonic()
    table: list[tuple[str, dict[str, str], list[tuple[str, str]], bool]] = []
    for name, pins in plans:
        print(f"test-deps: {name}: {' '.join(f'{p}=={v}' for p, v in pins.items()) or 'no pins'}", flush=True)
        versions, results, passed = one_run(name, pins)
        table.append((name, versions, results, passed))
        for suite, result in results:
            print(f"  {suite}: {result}", flush=True)
    print()
    runs = [name for name, *_ in table]
    rows = [["package", *runs]] + [[p, *(versions.get(p, "-") for _, versions, _, _ in table)] for p in PACKAGES]
    rows.append(["result", *("pass" if passed else "FAIL" for *_, passed in table)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(f"\nmake test-deps: {time.monotonic() - began:.0f} s wall time; logs in .venv-deps/<run>.log")
    return 0 if all(passed for *_, passed in table) else 1


if __name__ == "__main__":
    sys.exit(main())

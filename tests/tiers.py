"""The suite's tiers: markers from what a test uses, and groups that keep heavy or timing-sensitive tests together.

Markers (``-m`` selects by them; ``make check`` runs what carries none of them):

- ``azurite``: uses the Azurite emulator (its fixture, or a ``backend_kind``-style parameter naming it);
- ``oci``: uses the OCI Queue test server (likewise);
- ``sqs``: uses moto's server, Amazon SQS over real HTTP (likewise);
- ``spark``: runs Spark (the ``tests/spark`` and ``tests/pipeline`` folders, or a Spark server fixture);
- ``slow``: the reliability scenarios (``tests/reliability``: outages, crash loops, competing workers, the
  model check), which wait on leases and processes by design; and, written on the test, the install of the
  built wheel into a fresh virtualenv (``tests/deploy/test_wheel.py``);
- ``container``: builds deploy/Dockerfile with podman and runs the image, and runs deploy/compose.yaml with
  podman-compose (the ``tests/container`` folder);
- ``subprocess``: starts worker processes (or other programs: the linters). This one is written on the test,
  because only the test knows; it is checked, not trusted: a test that starts a process in its body and
  carries none of these markers fails, naming the mark.

Groups (with ``--dist loadgroup``, each group runs on one xdist worker, one test after another; every
other test is scheduled on its own). They are made here by :func:`pytest_xdist_make_scheduler` from the
tests' folders, because xdist's own ``xdist_group`` mark does not reach its scheduler under pytest 9 (it
renames the node ids, which pytest 9 no longer lets it do):

- ``spark`` (``tests/spark``, ``tests/pipeline``): the Spark tests but the pipeline's end-to-end runs and the
  demo's. Its process starts the standalone cluster and the Connect server as its tests first ask for them and
  holds one in-process session (tests/spark/sessions.py); its tests run in the order of their masters
  (:func:`order_by_master`), so that the session changes master twice, not at every file. (Split by master
  over three processes, the same tests once took longer than one after another on two cores.)
- ``spark-pipeline`` (``test_pipeline.py``, ``test_fenced_writers.py`` in ``tests/pipeline``): the pipeline's
  end-to-end runs, which mostly wait on worker processes and their jobs, in a second Spark process with servers
  and a session of its own, so that the two halves of the Spark tests, about three minutes each, run side by side
  instead of one six-minute chain.
- ``spark-demo`` (``tests/pipeline/test_demo.py``): the demo on servers ``worker spark`` starts, as a user
  runs it; it shares nothing with the ``spark`` group, whose longest path it would otherwise lengthen by a
  minute, so it runs beside it.
- ``timing`` (``tests/reliability``): the reliability scenarios, whose deadlines assume a share of the machine they keep for
  themselves rather than three other processes' worth of neighbours each. The storage outage is not among them
  (``LEADING``).
- ``browser`` (``tests/console``): the console's tests, which share one worker process and one Chromium per module
  (module-scoped fixtures): split over processes, each would start its own.
- ``container`` (``tests/container``): the container tests, which share the images they build (session fixtures)
  and mostly wait on downloads, the disk and containers, so that they overlap the rest on a process of their own.

The tests scheduled on their own are handed out, as each process finishes its group, in this order
(:func:`schedule_order`): first ``LEADING``, tests that each take half a minute or more, mostly waiting, so that none
of them starts in the suite's last minute and becomes its tail; then the tests outside the fast tier (worker processes,
servers, emulators), whose waits on leases and polls overlap the groups' computing; the fast tier last, short tests
that compute, which keep both cores busy to the end. In collection order, the tests that wait came last: the machine
was busy all the time for the first 240 s of a run and 70-90 % of the time for the last 120 s.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent

#: Marker -> fixtures whose use puts a test in it.
FIXTURES = {
    "azurite": {"azurite"},
    "oci": {"oci_server"},
    "sqs": {"moto_server"},
    "spark": {"spark_cluster", "spark_connect", "spark_sessions"},
}
#: Marker -> folders (under tests/) whose tests carry it.
FOLDERS = {"spark": {"spark", "pipeline"}, "slow": {"reliability"}, "container": {"container"}}
#: A parameter value that names a backend: the fixtures resolve it to the server (``connection``, ``backend``).
PARAMETERS = {"azurite": "azurite", "oci": "oci", "sqs": "sqs"}
#: xdist group -> the folders (under tests/) whose tests run in it: the Spark tests, the reliability scenarios, the
#: console's tests, the container tests.
GROUPS = {"spark": FOLDERS["spark"], "timing": FOLDERS["slow"], "browser": {"console"}, "container": FOLDERS["container"]}
#: Files of a Spark folder that run as a group of their own, beside the ``spark`` group: they start their own Spark
#: servers and worker processes (as a user does) and share nothing with the group's servers and session.
SPARK_FILES = {
    "tests/pipeline/test_demo.py": "spark-demo",
    "tests/pipeline/test_pipeline.py": "spark-pipeline",
    "tests/pipeline/test_fenced_writers.py": "spark-pipeline",
}

#: Tests that each take half a minute or more, mostly waiting, scheduled on their own before every other such test
#: (above), by file or by node id. The storage outage waits through 30 s of outage and, when a receive was under way
#: as storage stopped, for that receive's 2-minute lease (63 s or 133 s in clean runs); it needs no quiet machine, so
#: it is not in the ``timing`` group, where it made the group's chain the suite's longest. The wheel's install builds
#: and installs it twice. A sign-in that fails at start waits out the host's retries (about 30 s), and SQS's pick-up
#: a 20 s long poll: handed out last, they were the suite's tail.
LEADING = (
    "tests/reliability/test_storage_outage.py",
    "tests/deploy/test_wheel.py",
    "tests/host/test_startup_errors.py::test_a_sign_in_that_fails_at_start_keeps_the_host_up_and_it_recovers_when_the_"
    "identity_works",
    "tests/host/test_pickup.py::test_an_idle_worker_long_polls_and_takes_a_message_sent_by_another_process_at_once[sqs]",
)


def leading(nodeid: str) -> bool:
    """Whether a test is in ``LEADING``, by its file or its node id."""
    return nodeid in LEADING or nodeid.partition("::")[0] in LEADING


MARKERS = {
    "azurite": "uses the Azurite emulator",
    "oci": "uses the OCI Queue test server",
    "sqs": "uses moto's server (Amazon SQS)",
    "spark": "runs Spark (local, the standalone cluster or the Connect server)",
    "slow": "a reliability scenario (waits on leases, outages and processes by design), or the install of the wheel",
    "subprocess": "starts real worker processes and sends them signals",
    "container": "builds deploy/Dockerfile with podman and runs the image, and deploy/compose.yaml with podman-compose",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    # The standard library runs ``uname -p`` once per process, the first time anything asks for the platform (the
    # Azure SDK does, for its user agent); asked here, so that it is not charged to whichever test comes first.
    platform.platform()
    platform.processor()
    sys.addaudithook(_audit)


def markers_for(item: pytest.Item) -> set[str]:
    """The tier markers a test gets from its folder, its fixtures and its parameters."""
    found: set[str] = set()
    folder = Path(str(item.path)).resolve().relative_to(TESTS).parts[0]
    for marker, folders in FOLDERS.items():
        if folder in folders:
            found.add(marker)
    fixtures = set(getattr(item, "fixturenames", ()))
    for marker, names in FIXTURES.items():
        if fixtures & names:
            found.add(marker)
    callspec = getattr(item, "callspec", None)
    values = {v for v in callspec.params.values() if isinstance(v, str)} if callspec is not None else set()
    for marker, value in PARAMETERS.items():
        if value in values:
            found.add(marker)
    return found


@pytest.hookimpl(tryfirst=True)  # before -m selects by the markers given here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        found = markers_for(item)
        for marker in sorted(found):
            item.add_marker(marker)
        if "spark" in found and group_of(item.nodeid) not in ("spark", *SPARK_FILES.values()):
            raise pytest.UsageError(
                f"{item.nodeid} runs Spark outside {sorted(FOLDERS['spark'])}: move it there, "
                "so that it runs in the Spark group"
            )
    order_by_master(items)
    # xdist hands out the groups (its largest scopes) first, then the rest in the order collected.
    items.sort(key=schedule_order)


def schedule_order(item: pytest.Item) -> int:
    """Where a test goes in the collection (a stable sort): the tests of a group keep their order among themselves."""
    if leading(item.nodeid):
        return 0
    if group_of(item.nodeid) is not None or any(item.get_closest_marker(m) for m in OUTSIDE_THE_FAST_TIER):
        return 1
    return 2


#: The order of the masters a Spark test runs on, in which the Spark groups run their tests.
MASTER_ORDER = ("local", "cluster", "connect")


def master_of(item: pytest.Item) -> str:
    """The master a Spark test asks its process's session for: its ``where`` parameter, else the server it uses."""
    callspec = getattr(item, "callspec", None)
    where = callspec.params.get("where") if callspec is not None else None
    if where in MASTER_ORDER:
        return str(where)
    fixtures = set(getattr(item, "fixturenames", ()))
    return "connect" if "spark_connect" in fixtures else "cluster" if "spark_cluster" in fixtures else "local"


def order_by_master(items: list[pytest.Item]) -> None:
    """Put the Spark tests in the order of their masters, in the places they hold, the other tests left as they are.

    A process holds one session (tests/spark/sessions.py): each change of master stops it and starts the next (a
    cluster's costs its executors' start too), so each group changes master twice at most, not at every file.
    """
    places = [i for i, item in enumerate(items) if group_of(item.nodeid) in ("spark", *SPARK_FILES.values())]
    ordered = sorted((items[i] for i in places), key=lambda item: MASTER_ORDER.index(master_of(item)))
    for place, item in zip(places, ordered, strict=True):
        items[place] = item


def group_of(nodeid: str) -> str | None:
    """The xdist group of a test, from its file or folder; None for a test scheduled on its own."""
    if (group := SPARK_FILES.get(nodeid.partition("::")[0])) is not None:
        return group
    if leading(nodeid):
        return None
    folder = nodeid.split("/", 2)[1] if nodeid.startswith("tests/") else ""
    return next((group for group, folders in GROUPS.items() if folder in folders), None)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: xdist's scope scheduling, a group being one scope and every other test its own."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid

    return GroupScheduling(config, log)


#: A test with any of these markers is outside the fast tier (``make check``).
OUTSIDE_THE_FAST_TIER = ("azurite", "oci", "sqs", "spark", "slow", "subprocess", "container")

#: Processes started by the body of the test running now (set around each test's call phase only).
_started: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen" and _started is not None:
        _started.append(str(args[0]))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Fail a test that starts a process in its body without the ``subprocess`` mark (fixtures' servers aside)."""
    global _started
    _started = []
    try:
        result = yield
    finally:
        started, _started = _started, None
    if started and not any(item.get_closest_marker(m) for m in OUTSIDE_THE_FAST_TIER):
        pytest.fail(
            f"this test starts processes ({', '.join(sorted(set(started)))}) but is not marked "
            "@pytest.mark.subprocess, so the fast tier would run it",
            pytrace=False,
        )
    return result

"""Bad input end to end: real ``worker run`` processes on the embedded queue, bad messages mixed among good ones.

What the README promises for each kind of bad input, checked through the
processes an operator runs (``worker run``, ``worker send``), never in-process:

- a message body that is not valid base64 (messageEncoding base64) goes to
  ``<queue>-poison`` at once, without reaching the handler, as in Functions;
- a body that is not UTF-8, not JSON, or empty fails in ``msg.get_json()``; the
  handler raised, so the message is retried until ``maxDequeueCount`` and then
  poisoned, the reason logged with the poison message's id;
- a sync handler that blocks its thread past ``functionTimeout`` recycles its
  process (Python cannot stop a thread, so nothing it does may outlive the
  attempt): each attempt runs in a fresh process, the next one fails it with a
  timeout reason, and it is poisoned in the end while the good messages go on;
- ``worker send`` refuses a body over 64 KiB as stored, and then sends nothing;
- a bad host.yaml or environment override (out of range, unknown key, wrong
  type) stops ``worker run`` with exit 2 and one line naming the key and the
  file:line or variable; a host.json-only key every Functions app carries is
  accepted quietly;
- an app module that fails to import stops ``worker run`` with exit 2 and one
  line naming the module and the import error.

Through all of it the host goes on, and nothing is lost: every message sent
ends deleted after its handler succeeded, or in the poison queue.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.host.processes import WorkerProcess
from tests.support import apoll, poll
from worker.backends.queues import QueueBackend, QueueNotFound, RawMessage
from worker.backends.registry import open_backend
from worker.bindings.encoding import encode

pytestmark = pytest.mark.subprocess

REPO = Path(__file__).resolve().parents[2]
APP = "tests.apps.bad_input:app"
QUEUE = "intake"
POISON = f"{QUEUE}-poison"
MAX_DEQUEUE = 3
#: Threads for sync handlers: the good messages run beside the blocker.
HANDLER_THREADS = MAX_DEQUEUE + 1
#: How long the blocking handler holds its thread: far past functionTimeout (1 s) and past the test's checks.
BLOCK_SECONDS = 20
#: Good messages sent before each bad one (by the backend API), and after the blocker's attempts (by the CLI).
GOOD_PER_BAD = 2
LATE_GOOD = 10

HOST_YAML = f"""\
version: "1.0"
functionTimeout: "1s"
logging:
  logLevel:
    default: Information
  applicationInsights:
    samplingSettings:
      isEnabled: true
extensions:
  queues:
    batchSize: 8
    maxPollingInterval: 200ms
    visibilityTimeout: 0s
    maxDequeueCount: {MAX_DEQUEUE}
worker:
  handlerThreads: {HANDLER_THREADS}
  # Each recycle drains the good handlers still running, which take milliseconds; on a loaded machine a cut-off
  # drain would cancel one that then finishes in its thread, and its released message would run again.
  drainTimeout: 10s
  leaseDuration: 30s
"""


@dataclass(frozen=True)
class Bad:
    """One bad message: its stored text, the reason the host must give, and how often the handler must see it."""

    kind: str
    text: str
    reason: str
    attempts: int


def _b64(body: bytes | str) -> str:
    return encode(body, "base64")


BAD = [
    Bad("base64: not the alphabet", "this is not base64!", "not valid base64", 0),
    Bad("base64: not ASCII", "ünïcödé", "not valid base64", 0),
    Bad("base64: bad padding", "YWJjZA", "not valid base64", 0),
    Bad("UTF-8: bad start byte", _b64(b"\xff\xfe{}"), "not valid UTF-8", MAX_DEQUEUE),
    Bad("UTF-8: cut-off sequence", _b64(b'{"city": "caf\xc3"}'), "not valid UTF-8", MAX_DEQUEUE),
    Bad("JSON: unclosed object", _b64("{not json"), "not valid JSON", MAX_DEQUEUE),
    Bad("JSON: cut-off array", _b64("[1, 2"), "not valid JSON", MAX_DEQUEUE),
    Bad("JSON: plain text", _b64("hello"), "not valid JSON", MAX_DEQUEUE),
    Bad("empty body", "", "body is empty, not JSON", MAX_DEQUEUE),
    Bad(
        "blocks past functionTimeout",
        _b64(json.dumps({"kind": "block", "seconds": BLOCK_SECONDS})),
        "functionTimeout of 1s exceeded",
        MAX_DEQUEUE,
    ),
]
BLOCKER = BAD[-1]


class AppWorker(WorkerProcess):
    """``worker run`` of the bad-input app, which can tell whether the host is still alive."""

    def alive(self) -> None:
        """Fail at once, with the log, if the host has died: bad input must never stop it."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_path.read_text()}")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m worker ARGS`` from the repository, with an environment that cannot point it elsewhere."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WORKER__") and k != "AzureWebJobsStorage"}
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=REPO,
        env={**clean, "PYTHONPATH": str(REPO), "PYTHONUTF8": "1", **(env or {})},
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        check=False,
    )


def calls(record_db: Path, event: str | None = None) -> list[dict[str, Any]]:
    """What the handler recorded (tests/apps/bad_input.py), oldest first."""
    if not record_db.exists():
        return []
    with closing(sqlite3.connect(record_db, timeout=30)) as db:
        db.row_factory = sqlite3.Row
        try:
            rows = [dict(r) for r in db.execute("SELECT * FROM calls ORDER BY at")]
        except sqlite3.OperationalError:  # no call yet: the table is made by the first one
            return []
    return [r for r in rows if event is None or r["event"] == event]


async def peek_all(backend: QueueBackend, queue: str) -> list[RawMessage]:
    """The visible messages of ``queue`` (at most 32, more than the test ever poisons); none before it exists."""
    try:
        return await backend.peek(queue, 32)
    except QueueNotFound:
        return []


def good(label: str) -> str:
    return json.dumps({"kind": "good", "label": label})


async def test_bad_messages_end_in_poison_with_their_reason_while_every_good_one_completes(tmp_path: Path) -> None:
    """One worker process, every kind of bad message among good ones, and an exact account at the end.

    The blocking message is tried MAX_DEQUEUE times, each attempt recycling its process (its thread would block for
    BLOCK_SECONDS); the late good messages, sent only then, complete in the process that follows.
    """
    config = tmp_path / "host.yaml"
    config.write_text(HOST_YAML, encoding="utf-8")
    record_db = tmp_path / "calls.sqlite3"
    backend = open_backend(None, tmp_path)
    worker = AppWorker(config, {"RECORD_DB": str(record_db), "TRIGGER_QUEUE": QUEUE}, app=APP)
    try:
        await backend.create_queue(QUEUE)
        # Raw puts: the backend API stores exactly this text, so that invalid base64 reaches the queue as it is.
        bad_ids: dict[str, Bad] = {}
        good_ids: dict[str, str] = {}
        for number, bad in enumerate(BAD):
            for n in range(GOOD_PER_BAD):
                body = good(f"early-{number}-{n}")
                good_ids[(await backend.put(QUEUE, _b64(body))).id] = body
            bad_ids[(await backend.put(QUEUE, bad.text)).id] = bad
        [blocker_id] = [i for i, b in bad_ids.items() if b is BLOCKER]

        worker.start()
        worker.wait_for_log("host started")

        def blocked() -> list[dict[str, Any]]:
            worker.alive()
            starts = calls(record_db, "block-start")
            return starts if len(starts) >= MAX_DEQUEUE else []

        # Every attempt at the blocker times out after 1 s and recycles its process.
        block_starts = poll(blocked, 60, what=f"the blocking message's {MAX_DEQUEUE} attempts")

        # worker send refuses an oversized body and sends nothing of its command.
        refused = [good("refused-1"), json.dumps({"kind": "good", "pad": "x" * 50_000}), good("refused-2")]
        result = cli("send", "--config", str(config), QUEUE, *refused)
        assert result.returncode == 2, result.stderr
        assert "message 2 is" in result.stderr and "as stored (base64)" in result.stderr, result.stderr
        assert "65536 bytes (64 KiB)" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""

        late = [good(f"late-{n}") for n in range(LATE_GOOD)]
        result = cli("send", "--config", str(config), QUEUE, *late)
        assert result.returncode == 0, result.stderr
        late_ids = result.stdout.split()
        assert len(late_ids) == LATE_GOOD
        good_ids.update(zip(late_ids, late, strict=True))

        def late_done() -> list[dict[str, Any]]:
            worker.alive()
            done = [c for c in calls(record_db, "done") if c["message_id"] in late_ids]
            return done if len(done) >= LATE_GOOD else []

        poll(late_done, 30, what="the messages sent after the blocker's attempts")

        async def settled() -> list[RawMessage]:
            worker.alive()
            poisoned = await peek_all(backend, POISON)
            if len(poisoned) >= len(BAD) and await backend.approximate_count(QUEUE) == 0:
                return poisoned
            return []

        poisoned = await apoll(settled, 30, what="every bad message in poison and the queue empty")
        assert worker.stop() == 0
        lines = worker.lines()
        # One "host stopped" line per process: the recycled ones and the last.
        totals: Counter[str] = Counter()
        for line in lines:
            if line.get("event") == "host stopped":
                totals.update({k: v for k, v in line.items() if isinstance(v, int) and k != "pid"})
        records = calls(record_db)
    finally:
        worker.kill()
        await backend.close()

    # Each attempt at the blocker ran in a process of its own, which ended before the handler's sleep did.
    assert len({s["thread"].split("/")[0] for s in block_starts}) == MAX_DEQUEUE, block_starts
    assert calls(record_db, "block-end") == []

    # Every bad message: in poison with its original text, its reason logged with the poison copy's id, and tried
    # exactly as often as documented (invalid base64 never reaches the handler; the others MAX_DEQUEUE times).
    poison_by_id = {p.id: p for p in poisoned}
    assert sorted(p.content for p in poisoned) == sorted(b.text for b in BAD)
    moved = {line["message_id"]: line for line in lines if line.get("event") == "message moved to the poison queue"}
    retried = Counter(line["message_id"] for line in lines if line.get("event") == "message failed; it will be retried")
    handled = Counter(r["message_id"] for r in records if r["event"] == "start")
    # A recycling process gives back what it had received and not started: that delivery counted, as a delivery
    # released at any stop does (Azure's dequeue count counts receives), so the handler runs once less for it.
    released = Counter(line["message_id"] for line in lines if line.get("event") == "message released")
    for message_id, bad in bad_ids.items():
        line = moved.get(message_id)
        assert line is not None, f"{bad.kind}: no poison line"
        assert bad.reason in line["reason"], (bad.kind, line)
        assert poison_by_id[line["poison_message_id"]].content == bad.text, bad.kind
        assert line["dequeue_count"] == (bad.attempts or 1 + released[message_id]), (bad.kind, line, released)
        assert handled[message_id] == max(bad.attempts - released[message_id], 0), (bad.kind, released)
        assert retried[message_id] == max(handled[message_id] - 1, 0), bad.kind
    undecodable = {line["message_id"] for line in lines if line.get("event") == "message decoding has failed"}
    assert undecodable == {i for i, b in bad_ids.items() if b.attempts == 0}
    recycling = "sync handler ran past functionTimeout; recycling the process"
    timed_out = [line for line in lines if line.get("event") == recycling]
    assert [line["message_id"] for line in timed_out] == [blocker_id] * MAX_DEQUEUE
    assert all(BLOCKER.reason in line["reason"] for line in timed_out)

    # Every good message handled once and deleted; nothing of the refused command ever reached the queue. With a
    # functionTimeout of 1 s, a loaded machine can hold a good handler past it: that attempt failed by its timeout
    # (logged, and retried like any failure), so the message is handled once more, and only then.
    done_ids = Counter(r["message_id"] for r in records if r["event"] == "done")
    timed_out_good = Counter(
        line["message_id"]
        for line in lines
        if line.get("event") == "message failed; it will be retried"
        and line["message_id"] in good_ids
        and BLOCKER.reason in line["reason"]
    )
    assert done_ids == Counter(good_ids.keys()) + timed_out_good, "a good message was not handled exactly once"
    assert not [r for r in records if b"refused" in r["body"] or b'"pad"' in r["body"]]

    # The host's own counters agree, and the host.json-only key was accepted, not refused.
    retrying = [b for b in BAD if b.attempts]
    assert totals["succeeded"] == len(good_ids)
    assert totals["poisoned"] == len(BAD)
    # A recycling process gives back the messages it had received and not started (released, then received again).
    # A good attempt failed by its timeout (above) counts as any failed attempt: received again, failed, retried.
    extra = sum(timed_out_good.values())
    received = len(good_ids) + len(BAD) - len(retrying) + MAX_DEQUEUE * len(retrying) + extra
    assert totals["received"] == received + totals["released"]
    assert totals["failed"] == MAX_DEQUEUE * len(retrying) + extra
    assert totals["retried"] == (MAX_DEQUEUE - 1) * len(retrying) + extra
    assert totals["recycles"] == MAX_DEQUEUE
    assert not any(totals.get(k) for k in ("leases_lost", "completions_skipped", "storage_errors"))
    # logLevel is read; applicationInsights, which every Functions app carries, is accepted without a warning.
    assert not [line for line in lines if "host.json compatibility" in str(line.get("event"))]

    sent = len(good_ids) + len(bad_ids)
    completed = sum(1 for i in done_ids if i in good_ids)
    lost = sent - completed - len(poisoned)
    print(
        f"\nbad input: sent {sent} ({len(good_ids)} good, {len(bad_ids)} bad), completed {completed}, "
        f"poisoned {len(poisoned)}, lost {lost}; refused by worker send: {len(refused)} (none sent)"
    )
    for bad in BAD:
        print(f"  {bad.kind:<28} handler calls {bad.attempts}  reason: {moved[_id_of(bad_ids, bad)]['reason'][:90]}")
    assert lost == 0


def _id_of(ids: dict[str, Bad], bad: Bad) -> str:
    return next(i for i, b in ids.items() if b is bad)


# -- a bad host.yaml or environment: worker run stops before it starts -------------------------------------------


def _host_yaml(queues: str = "", worker: str = "", top: str = "") -> str:
    """A valid host.yaml with extra lines in a section, so that the offending line is not the first one."""
    return (
        "# reliability: a bad setting below valid ones\n"
        'version: "1.0"\n'
        "extensions:\n"
        "  queues:\n"
        "    batchSize: 8\n"
        "    maxPollingInterval: 200ms\n"
        f"{queues}"
        "worker:\n"
        "  drainTimeout: 2s\n"
        f"{worker}"
        f"{top}"
    )


@pytest.mark.parametrize(
    ("text", "env", "key", "where", "problem"),
    [
        pytest.param(
            _host_yaml(queues="    maxDequeueCount: 0\n"),
            {},
            "extensions.queues.maxDequeueCount",
            "maxDequeueCount: 0",
            "must be between 1 and 10000, got 0",
            id="queues-out-of-range",
        ),
        pytest.param(
            _host_yaml(queues="    maxPollingInterval: 50ms\n"),
            {},
            "extensions.queues.maxPollingInterval",
            "maxPollingInterval: 50ms",
            "must be between 0.1s and 1d, got 0.05s",
            id="polling-too-short",
        ),
        pytest.param(
            _host_yaml(worker="  handlerThreads: 2000\n"),
            {},
            "worker.handlerThreads",
            "handlerThreads: 2000",
            "must be between 1 and 1024, got 2000",
            id="worker-out-of-range",
        ),
        pytest.param(
            _host_yaml(top='functionTimeout: "00:00:00"\n'),
            {},
            "functionTimeout",
            "functionTimeout:",
            "must be between 1s and",
            id="timeout-zero",
        ),
        pytest.param(
            _host_yaml(worker='  leaseRenewalFraction: "half"\n'),
            {},
            "worker.leaseRenewalFraction",
            "leaseRenewalFraction",
            "expected a number, got 'half'",
            id="wrong-type",
        ),
        pytest.param(
            _host_yaml(worker="  handlerthreads: 4\n"),
            {},
            "worker.handlerthreads",
            "handlerthreads: 4",
            "unknown key; did you mean worker.handlerThreads? (known keys:",
            id="unknown-key",
        ),
        pytest.param(
            _host_yaml(top="extension:\n  queues:\n    batchSize: 4\n"),
            {},
            "extension.queues.batchSize",
            "batchSize: 4",
            "unknown key",
            id="unknown-section",
        ),
        pytest.param(
            _host_yaml(),
            {"WORKER__worker__handlerThreads": "0"},
            "worker.handlerThreads",
            "environment WORKER__worker__handlerThreads",
            "must be between 1 and 1024, got 0",
            id="environment-out-of-range",
        ),
    ],
)
def test_bad_setting_stops_worker_run_naming_the_key_and_the_line(
    tmp_path: Path, text: str, env: dict[str, str], key: str, where: str, problem: str
) -> None:
    """``where`` is the offending line's text (the error must give its number) or, for the environment, the variable."""
    config = tmp_path / "host.yaml"
    config.write_text(text, encoding="utf-8")
    if not where.startswith("environment "):
        [number] = [n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(where)]
        where = f"{config}:{number}"

    result = cli("run", "--app", APP, "--config", str(config), env=env)

    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"worker run: error: {where}: {key}: "), result.stderr
    assert problem in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / ".worker").exists(), "the host opened its queue before rejecting the configuration"


# -- an app module that does not import ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            "import queueworker_no_such_dependency\n",
            "ModuleNotFoundError: No module named 'queueworker_no_such_dependency'",
            id="missing-dependency",
        ),
        pytest.param("from worker import WorkerApp\n\napp = WorkerApp(\n", "SyntaxError: ", id="syntax-error"),
        pytest.param(
            'raise RuntimeError("STORAGE_ACCOUNT is not set")\n',
            "RuntimeError: STORAGE_ACCOUNT is not set",
            id="raises-at-import",
        ),
    ],
)
def test_app_module_that_does_not_import_stops_worker_run_naming_module_and_error(
    tmp_path: Path, request: pytest.FixtureRequest, source: str, expected: str
) -> None:
    """The module sits beside host.yaml, where ``worker run`` looks for apps first."""
    module = f"broken_{request.node.callspec.id.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
    config = tmp_path / "host.yaml"
    config.write_text(_host_yaml(), encoding="utf-8")

    result = cli("run", "--app", f"{module}:app", "--config", str(config))

    assert result.returncode == 2, result.stderr
    # The refusal in one line, then the app's own frames (its file and line, the line's code), and nothing of the
    # host's: the log's JSON lines aside.
    said = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert said[0].startswith(f"worker run: error: cannot import app module {module!r}: {expected}"), said
    if expected.startswith("SyntaxError"):
        assert f"({module}.py, line 3)" in said[0], said
    line = 3 if expected.startswith("SyntaxError") else 1
    assert said[1].startswith(f'  File "{tmp_path / f"{module}.py"}", line {line}'), said
    assert len(said) == 3 and "Traceback" not in result.stderr, said
    assert not (tmp_path / ".worker").exists()


# -- a body that is not UTF-8 on worker send's command line -------------------------------------------------------


@pytest.mark.parametrize("encoding", ["base64", "none"])
async def test_send_of_an_argument_that_is_not_utf8_sends_its_bytes_or_fails_clearly(tmp_path: Path, encoding: str) -> None:
    """Shell bytes that are not UTF-8 reach Python's argv as surrogate escapes.

    base64 carries any bytes, so the exact bytes are sent; ``none`` stores text,
    so the command exits 2 naming UTF-8 and sends nothing (as for an oversized
    body). A traceback is never the answer.
    """
    config = tmp_path / "host.yaml"
    config.write_text(_host_yaml(queues=f"    messageEncoding: {encoding}\n"), encoding="utf-8")
    raw = b'{"city": "caf\xc3"}'

    result = cli("send", "--config", str(config), QUEUE, good("before"), os.fsdecode(raw))

    assert "Traceback" not in result.stderr, result.stderr
    backend = open_backend(None, tmp_path)
    try:
        stored = [m.content for m in await peek_all(backend, QUEUE)] if (tmp_path / ".worker").exists() else []
    finally:
        await backend.close()
    if encoding == "none":
        assert result.returncode == 2, result.stderr
        assert "message 2" in result.stderr and "UTF-8" in result.stderr, result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert stored == [], "a refused command sent part of its messages"
    else:
        assert result.returncode == 0, result.stderr
        assert stored == [_b64(good("before")), _b64(raw)]

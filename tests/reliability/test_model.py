"""Model-based tests: each queue backend against a pure-Python model of Azure Storage Queue semantics.

Why: the conformance suite (``tests/conformance``) checks one rule per test, in sequences someone
thought of. Here Hypothesis drives random sequences of put / receive / update / delete / peek
against a backend and a model side by side, checks after every step that they agree, and shrinks
any disagreement to a short sequence of calls that can be replayed by hand.

The model
---------
:class:`QueueModel` is a few dicts, written from Azure's documentation rather than from either
backend: a message has an id, content, dequeue count, visible-at, expires-at and its current pop
receipt. Receive takes visible unexpired messages (up to n, 1-32), hides them, increments their
dequeue count and gives each a new receipt; update and delete need the current receipt (a stale one
is ``PopReceiptMismatch``, a deleted or expired message ``MessageNotFound``); a receipt stays current
after its visibility timeout has passed, until the message is received again; peek changes nothing;
the count includes hidden messages. Ids and receipts are opaque: the model records what the backend
hands out, and compares receipts by value.

Where the backends may differ, and both are right:

* Order. The embedded queue receives and peeks in insertion order, and the model holds it to that.
  Azure documents that FIFO order is *not* guaranteed (Azurite orders by time-next-visible, so a
  released message goes behind ones that were already visible); against Azure the model only checks
  that a receive returns ``min(n, visible)`` distinct visible messages, and applies the ones it got.
* Count. Azure documents the approximate count as "not lower than the actual number, but could be
  higher" (expired messages may linger); against Azure it must lie between the live messages and
  the live plus the expired ones. The embedded queue must be exact.
* Receipts. The embedded queue's are uuid4s, so every rotation must give a new one. Azurite's are
  the request's second plus 16 random bits (``getPopReceipt``), so two receipts one message gets
  within the same second are equal about once in 65536; there the model only compares receipts by
  value (a "stale" receipt equal to the current one is current), which is all a client can do.

On the embedded queue one more rule, :meth:`EmbeddedQueueMachine.concurrently`, makes 2-4 writes at once
(they share one group commit) and requires the results to be those of the same calls made one at a
time in *some* order. It does not run on Azurite, which dates a request when it arrives, not when its
turn comes (``queueStorageContext.middleware``: ``startTime = new Date()``), so two concurrent
requests can each miss the other's effect: a release that overtakes a receive which arrived first
leaves the message invisible to it, although it was visible before and after. A trial of 60
examples there passed, but the race is real, no fault of the worker's, and would only flake.

The clock
---------
The model has a virtual clock (``QueueModel.now``); the backends use wall time, which cannot be
mocked without touching ``worker/``. The two are kept in step by never letting anything happen
*between* them: every visibility timeout and time-to-live an ordinary rule uses is either 0
(visible at once) or at least :data:`LONG` (one hour, never reached while a test runs), so as far as
any observation can tell, wall time standing still and wall time moving on are the same. Time moves
only in :meth:`TimedQueueMachine.let_time_pass`, which sets things to fall due :data:`SHORT` (1 s, the
shortest that Azure's whole-second resolution allows) later, the last of them a message that
expires while visible, advances a copy of the model by that much, and polls the backend with a
deadline until it shows the copy's state. Meanwhile the backend may show only what one of the two
states allows, or the test fails at once; once it agrees, the copy becomes the model. A slow
machine makes that rule slower, never wrong, and no bare sleep is needed anywhere.

Budget and reproducibility
--------------------------
Time passing costs a real second, so it lives in a subclass run for a few examples; the untimed
machine runs many more. Settings use ``derandomize=True`` and ``database=None``: every run (a laptop,
CI) tries the same sequences, and a failure found once is found again without a stored example
database. ``deadline=None`` because one step is a storage round trip (and sometimes a one-second
wait), whose time says nothing about correctness. No health check is suppressed: none fires. A
passing run of the file takes 35-60 s on two cores; a failing one spends minutes shrinking (one
Hypothesis caps at five), so these tests get a longer pytest timeout than the suite's two minutes.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.azurite import Azurite
from tests.support import apoll
from worker.backends.queues import (
    InvalidArgument,
    MessageNotFound,
    MessageTooLarge,
    PopReceiptMismatch,
    QueueBackend,
    QueueError,
    RawMessage,
    Receipt,
)
from worker.backends.registry import open_backend

T = TypeVar("T")

#: A passing run takes seconds; a failing one shrinks for up to Hypothesis's limit of 300 s before it reports.
pytestmark = pytest.mark.timeout(420)

# -- the model's constants: Azure's documented limits, written out rather than imported from the code under test --

#: A visibility timeout or time-to-live that never runs out during a test (an example takes seconds).
LONG = 3600.0
#: The one short interval, used only where time is made to pass: Azure keeps times in whole seconds.
SHORT = 1.0
#: Time-to-live of a message that never expires.
NEVER = -1
#: Most messages one receive or peek returns.
BATCH = 32
#: Longest visibility timeout (7 days).
SEVEN_DAYS = 7 * 24 * 3600
#: Largest message text, in UTF-8 bytes.
MAX_BYTES = 64 * 1024
#: Most live messages a test keeps, so that one peek of :data:`BATCH` sees every visible message.
MAX_LIVE = 20
#: How long the backend may take to agree that :data:`SHORT` has passed: it takes 1-2 s, and a failing
#: example waits this long each time the shrinker tries it, so generous but not more.
AGREE_DEADLINE = 10.0
#: Most times one example lets time pass: each costs a real second or two.
MAX_TICKS = 2
#: The errors a call may give on purpose; any other exception (TransientError too) fails the test as it is.
PROTOCOL_ERRORS = (InvalidArgument, MessageNotFound, MessageTooLarge, PopReceiptMismatch)


# -- the model ----------------------------------------------------------------------------------------------------


@dataclass
class ModelMessage:
    """One message as Azure describes it; times are on the model's virtual clock."""

    id: str
    content: str
    visible_at: float
    expires_at: float | None
    dequeue_count: int = 0
    receipt: str | None = None


@dataclass(frozen=True)
class Lease:
    """A (message id, pop receipt) pair some receive or update handed out; it may be current, stale or gone."""

    message_id: str
    receipt: str

    def __str__(self) -> str:
        return f"{self.message_id}@{self.receipt}"


class QueueModel:
    """Azure Storage Queue semantics for one queue, on a virtual clock. Methods raise the protocol's errors.

    Every mutating method validates first and changes nothing when it raises, as the service does.
    """

    def __init__(self) -> None:
        self.now = 0.0
        #: Live messages in insertion order (dicts keep it).
        self.messages: dict[str, ModelMessage] = {}
        #: How many messages have expired: Azure may still count them for a while.
        self.expired = 0

    def advance(self, seconds: float) -> None:
        """Move the clock on; messages whose time-to-live has run out are gone."""
        self.now += seconds
        for message in list(self.messages.values()):
            if message.expires_at is not None and message.expires_at <= self.now:
                del self.messages[message.id]
                self.expired += 1

    def visible(self) -> list[ModelMessage]:
        """Messages a receive or peek may return now, in insertion order."""
        return [m for m in self.messages.values() if m.visible_at <= self.now]

    def count(self) -> int:
        return len(self.messages)

    def peek(self, n: int) -> list[ModelMessage]:
        if not 1 <= n <= BATCH:
            raise InvalidArgument(f"peek of {n}")
        return self.visible()[:n]

    def put(self, message_id: str, content: str, visibility_timeout: float, time_to_live: float | None) -> None:
        """``time_to_live`` None is the service default of 7 days."""
        if len(content.encode("utf-8")) > MAX_BYTES:
            raise MessageTooLarge(f"{len(content.encode('utf-8'))} bytes")
        ttl = SEVEN_DAYS if time_to_live is None else time_to_live
        if ttl != NEVER and ttl < 1:
            raise InvalidArgument(f"time to live {ttl}")
        if not 0 <= visibility_timeout <= SEVEN_DAYS:
            raise InvalidArgument(f"put visibility {visibility_timeout}")
        if ttl != NEVER and visibility_timeout >= ttl:
            raise InvalidArgument("visibility timeout not shorter than time to live")
        expires = None if ttl == NEVER else self.now + ttl
        self.messages[message_id] = ModelMessage(message_id, content, self.now + visibility_timeout, expires)

    def receivable(self, n: int, visibility_timeout: float) -> list[ModelMessage]:
        """The messages a receive of ``n`` would take, in insertion order (a backend without FIFO may pick others)."""
        if not 1 <= n <= BATCH:
            raise InvalidArgument(f"receive of {n}")
        if not 1 <= visibility_timeout <= SEVEN_DAYS:
            raise InvalidArgument(f"receive visibility {visibility_timeout}")
        return self.visible()[:n]

    def take(self, message_id: str, receipt: str, visibility_timeout: float) -> None:
        """Apply a receive to one message the backend returned (checked visible by the caller)."""
        message = self.messages[message_id]
        message.dequeue_count += 1
        message.receipt = receipt
        message.visible_at = self.now + visibility_timeout

    def holder(self, lease: Lease) -> ModelMessage:
        """The message ``lease`` is current for, or the error Azure gives."""
        message = self.messages.get(lease.message_id)
        if message is None:
            raise MessageNotFound(f"message {lease.message_id} is gone")
        if message.receipt != lease.receipt:
            raise PopReceiptMismatch(f"receipt {lease.receipt} is not current for {lease.message_id}")
        return message

    def update(self, lease: Lease, visibility_timeout: float, new_receipt: str) -> None:
        if not 0 <= visibility_timeout <= SEVEN_DAYS:
            raise InvalidArgument(f"update visibility {visibility_timeout}")
        message = self.holder(lease)
        message.receipt = new_receipt
        message.visible_at = self.now + visibility_timeout

    def delete(self, lease: Lease) -> None:
        del self.messages[self.holder(lease).id]


# -- what a machine runs against ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A backend to test and what it promises beyond Azure's documented minimum."""

    name: str
    folder: Path
    #: None: a fresh embedded-queue file per example under ``folder``; else an Azure connection string.
    connection: str | None
    #: Receive and peek go in insertion order (the embedded queue); Azure promises no order.
    ordered: bool
    #: approximate_count is exact (the embedded queue); Azure's may be higher while expired messages linger.
    exact_count: bool
    #: Every receipt is new (uuid4); Azurite's are the request's second plus 16 random bits, so one may repeat.
    unique_receipts: bool


def sqlite_target(folder: Path) -> Target:
    return Target("sqlite", folder, None, ordered=True, exact_count=True, unique_receipts=True)


def azurite_target(folder: Path, azurite: Azurite) -> Target:
    return Target("azurite", folder, azurite.connection_string, ordered=False, exact_count=False, unique_receipts=False)


@dataclass(frozen=True)
class Op:
    """One write call (put, receive, update or delete), as both the model and a backend take it."""

    name: str
    content: str = ""
    visibility: float = 0
    ttl: float | None = None
    n: int = 0
    lease: Lease | None = None

    def __str__(self) -> str:
        if self.name == "put":
            return f"put({self.content!r}, visibility={self.visibility:g}, ttl={self.ttl})"
        if self.name == "receive":
            return f"receive({self.n}, visibility={self.visibility:g})"
        if self.name == "update":
            return f"update({self.lease}, visibility={self.visibility:g})"
        return f"delete({self.lease})"


def describe(messages: list[RawMessage] | list[ModelMessage]) -> list[tuple[str, str, int]]:
    """(id, content, dequeue count) of each message, for failure messages."""
    return [(m.id, m.content, m.dequeue_count) for m in messages]


def name_of(error: QueueError | None) -> str:
    return f"{type(error).__name__} ({error})" if error else "success"


#: Message text Azure stores as XML: letters, digits, punctuation, symbols and spaces of any script.
CONTENT = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=12)
#: How many messages a receive or peek asks for: 1-32, half the time 1-3 (fewer than are visible, so order matters).
SOME = st.one_of(st.integers(min_value=1, max_value=3), st.integers(min_value=1, max_value=BATCH))
#: Which of the leases of a kind a rule uses (taken modulo their number, so it always picks one).
PICK = st.integers(min_value=0, max_value=63)
#: One call of a concurrent batch; a lease call picks among the current leases (two picks may race for one).
BATCH_CALL = st.one_of(
    st.tuples(st.just("put"), CONTENT),
    st.tuples(st.just("receive"), SOME),
    st.tuples(st.sampled_from(["release", "extend", "delete"]), PICK),
)


# -- the state machines ------------------------------------------------------------------------------------------


class CoreMachine(RuleBasedStateMachine):
    """One queue on one backend beside a :class:`QueueModel`; every rule does the same call to both and compares.

    These are the rules the timed machine shares; :class:`QueueMachine` and :class:`EmbeddedQueueMachine` add
    the rest.

    The backend's async calls run on one event loop per example (an :class:`asyncio.Runner`), because
    the Azure client is bound to the loop it was opened on.
    """

    def __init__(self, target: Target) -> None:
        super().__init__()
        self.target = target
        self.model = QueueModel()
        #: Every lease the backend handed out, in order, without repeats.
        self.leases: list[Lease] = []
        #: Every receipt each message has had (to check that a rotation gives a new one).
        self.receipts: dict[str, set[str]] = {}
        self.ticks = 0
        self.queue = f"model-{uuid.uuid4().hex[:16]}"
        self.runner = asyncio.Runner()
        try:
            self.backend: QueueBackend = self.run(self._open())
        except BaseException:
            self.runner.close()
            raise

    async def _open(self) -> QueueBackend:
        """A fresh file per example for the embedded queue; a fresh queue per example on Azurite."""
        connection = self.target.connection or f"sqlite:///{self.queue}.sqlite3"
        backend = open_backend(connection, self.target.folder)
        await backend.create_queue(self.queue)
        return backend

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(call)

    def teardown(self) -> None:
        try:
            self.run(self.backend.delete_queue(self.queue))  # Azurite slows down as it holds more messages
        finally:
            try:
                self.run(self.backend.close())
            finally:
                self.runner.close()

    # -- leases --

    def kind(self, lease: Lease) -> str:
        message = self.model.messages.get(lease.message_id)
        if message is None:
            return "gone"
        return "current" if message.receipt == lease.receipt else "stale"

    def of_kind(self, kind: str) -> list[Lease]:
        return [lease for lease in self.leases if self.kind(lease) == kind]

    def pick(self, kind: str, pick: int) -> Lease:
        leases = self.of_kind(kind)
        return leases[pick % len(leases)]

    def held(self) -> list[Lease]:
        """Current leases on hidden messages: the ones whose timeout could be made to run out."""
        return [
            lease for lease in self.of_kind("current") if self.model.messages[lease.message_id].visible_at > self.model.now
        ]

    def remember(self, message_id: str, receipt: str) -> None:
        """Record a receipt the backend handed out; on a backend whose receipts are unique it must be new."""
        seen = self.receipts.setdefault(message_id, set())
        if self.target.unique_receipts:
            assert receipt not in seen, f"message {message_id} was given a receipt it had before: {receipt}"
        seen.add(receipt)
        lease = Lease(message_id, receipt)
        if lease not in self.leases:
            self.leases.append(lease)

    # -- calling the backend and the model --

    async def call(self, op: Op) -> object:
        """Make ``op`` on the backend: its result, or the protocol error it raised."""
        b, q = self.backend, self.queue
        try:
            if op.name == "put":
                return await b.put(q, op.content, visibility_timeout=op.visibility, time_to_live=op.ttl)
            if op.name == "receive":
                return await b.receive(q, op.n, op.visibility)
            assert op.lease is not None
            if op.name == "update":
                return await b.update(q, op.lease.message_id, op.lease.receipt, op.visibility)
            return await b.delete(q, op.lease.message_id, op.lease.receipt)
        except PROTOCOL_ERRORS as exc:
            return exc

    async def call_all(self, ops: tuple[Op, ...]) -> list[object]:
        return list(await asyncio.gather(*(self.call(op) for op in ops)))

    def perform(self, *ops: Op) -> list[object]:
        """Make ``ops`` on the backend at once; apply them to the model in an order that explains every result.

        One op is an ordinary step. Several run concurrently and may take effect in any order, but
        each as a whole: the results must be those of the same calls made one at a time in some order.
        """
        results = self.run(self.call_all(ops))
        first_problem = ""
        for order in itertools.permutations(range(len(ops))):
            trial = copy.deepcopy(self.model)
            for i in order:
                problem = self.apply(trial, ops[i], results[i])
                if problem:
                    first_problem = first_problem or f"{ops[i]}: {problem}"
                    break
            else:
                self.model = trial
                for op, result in zip(ops, results, strict=True):
                    self.record(op, result)
                return results
        if len(ops) == 1:
            raise AssertionError(first_problem)
        made = "\n".join(f"  {op} -> {result!r}" for op, result in zip(ops, results, strict=True))
        raise AssertionError(
            f"no order of these concurrent calls explains their results:\n{made}\n"
            f"in the order they were made, the first disagreement: {first_problem}"
        )

    def apply(self, model: QueueModel, op: Op, result: object) -> str | None:
        """Apply ``op`` to ``model`` given the backend's result: None, or what the two disagree about."""
        error = result if isinstance(result, QueueError) else None
        if op.name in ("put", "receive") and error is not None:
            return f"the backend failed: {error!r}"
        if op.name == "put":
            assert isinstance(result, RawMessage)
            return self.put_problem(model, op, result)
        if op.name == "receive":
            assert isinstance(result, list)
            return self.receive_problem(model, op, result)
        assert op.lease is not None
        try:
            if op.name == "update":
                model.update(op.lease, op.visibility, result.pop_receipt if isinstance(result, Receipt) else "(none)")
            else:
                model.delete(op.lease)
            expected: QueueError | None = None
        except QueueError as exc:
            expected = exc
        if type(error) is not type(expected):
            return f"the model expects {name_of(expected)}, the backend gave {name_of(error)}"
        if isinstance(result, Receipt) and not result.pop_receipt:
            return "the update gave no pop receipt"
        return None

    def put_problem(self, model: QueueModel, op: Op, sent: RawMessage) -> str | None:
        if not sent.id or sent.id in self.receipts or sent.id in model.messages:
            return f"put gave no new id: {sent}"
        if sent.content != op.content or sent.dequeue_count != 0:
            return f"put returned {sent}"
        if op.ttl == NEVER:
            if sent.expiration_time is not None:
                return f"a message that never expires has expiration time {sent.expiration_time}"
        else:
            if sent.expiration_time is None:
                return "a message with a time to live has no expiration time"
            lived = (sent.expiration_time - sent.insertion_time).total_seconds()
            if abs(lived - (op.ttl or SEVEN_DAYS)) > 2:
                return f"the service says it lives {lived}s"
        model.put(sent.id, op.content, op.visibility, op.ttl)
        return None

    def receive_problem(self, model: QueueModel, op: Op, got: list[RawMessage]) -> str | None:
        problem = self.choice_problem(got, model.receivable(op.n, op.visibility), model.visible(), op.n)
        if problem:
            return problem
        for message in got:
            problem = self.message_problem(message, model.messages[message.id], dequeued=1)
            if problem:
                return problem
            if not message.pop_receipt:
                return f"message {message.id} came without a pop receipt"
            model.take(message.id, message.pop_receipt, op.visibility)
        return None

    def choice_problem(
        self, got: list[RawMessage], first: list[ModelMessage], visible: list[ModelMessage], n: int
    ) -> str | None:
        """Whether the messages a receive or peek of ``n`` returned are ones the model allows."""
        ids = [m.id for m in got]
        if self.target.ordered:
            if ids != [m.id for m in first]:
                return f"got {describe(got)}, the model expects {describe(first)}"
            return None
        if len(set(ids)) != len(ids):
            return f"a message came back twice: {describe(got)}"
        if not set(ids) <= {m.id for m in visible}:
            return f"got {describe(got)}, but only {describe(visible)} are visible"
        if len(ids) != min(n, len(visible)):
            return f"got {len(ids)} messages with {len(visible)} visible: {describe(got)} of {describe(visible)}"
        return None

    @staticmethod
    def message_problem(got: RawMessage, expected: ModelMessage, dequeued: int = 0) -> str | None:
        """Whether content, dequeue count (plus ``dequeued``) and kind of expiry match the model's message."""
        if got.content != expected.content:
            return f"message {got.id} has content {got.content!r}, the model {expected.content!r}"
        if got.dequeue_count != expected.dequeue_count + dequeued:
            return f"message {got.id} has dequeue count {got.dequeue_count}, the model {expected.dequeue_count + dequeued}"
        if (got.expiration_time is None) != (expected.expires_at is None):
            return f"message {got.id} expires at {got.expiration_time}, the model at {expected.expires_at}"
        return None

    def record(self, op: Op, result: object) -> None:
        """Keep the ids and receipts a successful call handed out."""
        if op.name == "put" and isinstance(result, RawMessage):
            self.receipts[result.id] = set()
        elif op.name == "receive" and isinstance(result, list):
            for message in result:
                assert message.pop_receipt is not None  # receive_problem checked it
                self.remember(message.id, message.pop_receipt)
        elif op.name == "update" and isinstance(result, Receipt):
            assert op.lease is not None
            self.remember(op.lease.message_id, result.pop_receipt)

    def agree(self, what: str, model_step: Callable[[], object], error: QueueError | None) -> None:
        """Apply ``model_step``; the backend must have failed exactly when, and as, the model does."""
        try:
            model_step()
            expected: QueueError | None = None
        except QueueError as exc:
            expected = exc
        assert type(error) is type(expected), (
            f"{what}: the model expects {name_of(expected)}, the backend gave {name_of(error)}"
        )

    # -- rules --

    @initialize(contents=st.lists(CONTENT, max_size=6))
    def fill(self, contents: list[str]) -> None:
        """Start with a few visible messages, so that fewer steps go to receiving from an empty queue."""
        for content in contents:
            self.perform(Op("put", content=content))

    @precondition(lambda self: self.model.count() < MAX_LIVE)
    @rule(content=CONTENT, hidden=st.integers(0, 3).map(lambda i: i == 3), ttl=st.sampled_from([None, NEVER, 2 * LONG]))
    def put(self, content: str, hidden: bool, ttl: float | None) -> None:
        """Put a message visible at once (or, one time in four, hidden for an hour), living 7 days, for ever or 2 h."""
        self.perform(Op("put", content=content, visibility=LONG if hidden else 0, ttl=ttl))

    @precondition(lambda self: self.model.count() > 0)
    @rule(n=SOME)
    def receive(self, n: int) -> None:
        """Receive up to ``n`` messages, hiding them for an hour (an empty queue is left to the invariants)."""
        self.perform(Op("receive", n=n, visibility=LONG))

    @precondition(lambda self: self.of_kind("current"))
    @rule(pick=PICK)
    def release(self, pick: int) -> None:
        """Update a current lease to visibility 0: the message is visible again at once, with a new receipt."""
        self.perform(Op("update", lease=self.pick("current", pick), visibility=0))

    @precondition(lambda self: self.of_kind("current"))
    @rule(pick=PICK)
    def extend(self, pick: int) -> None:
        """Update a current lease to an hour (hides a released message again); the receipt rotates."""
        self.perform(Op("update", lease=self.pick("current", pick), visibility=LONG))

    @precondition(lambda self: self.of_kind("stale"))
    @rule(pick=PICK, visibility=st.sampled_from([0, LONG]))
    def update_stale(self, pick: int, visibility: float) -> None:
        """Update with a receipt a later receive or update replaced: PopReceiptMismatch, nothing changes."""
        self.perform(Op("update", lease=self.pick("stale", pick), visibility=visibility))

    @precondition(lambda self: self.of_kind("current"))
    @rule(pick=PICK)
    def delete(self, pick: int) -> None:
        self.perform(Op("delete", lease=self.pick("current", pick)))

    @precondition(lambda self: self.of_kind("stale"))
    @rule(pick=PICK)
    def delete_stale(self, pick: int) -> None:
        """Delete with a stale receipt: PopReceiptMismatch, and the message stays."""
        self.perform(Op("delete", lease=self.pick("stale", pick)))

    @precondition(lambda self: self.of_kind("gone"))
    @rule(pick=PICK, delete=st.booleans())
    def touch_gone(self, pick: int, delete: bool) -> None:
        """Update or delete a message that was deleted (or expired) with its last receipt: MessageNotFound."""
        self.perform(Op("delete" if delete else "update", lease=self.pick("gone", pick)))

    # -- invariants --

    @invariant()
    def backend_agrees_with_model(self) -> None:
        """peek(32) shows exactly the model's visible messages (contents, dequeue counts); the count fits the model."""

        async def look() -> tuple[list[RawMessage], int]:
            return await self.backend.peek(self.queue, BATCH), await self.backend.approximate_count(self.queue)

        seen, count = self.run(look())
        expected = self.model.visible()
        ids, expected_ids = [m.id for m in seen], [m.id for m in expected]
        if not self.target.ordered:
            ids, expected_ids = sorted(ids), sorted(expected_ids)
        assert ids == expected_ids, f"visible messages: the backend shows {describe(seen)}, the model {describe(expected)}"
        for message in seen:
            assert message.pop_receipt is None, f"peek gave message {message.id} a pop receipt"
            problem = self.message_problem(message, self.model.messages[message.id])
            assert problem is None, f"peek: {problem}"

        live = self.model.count()
        if self.target.exact_count:
            assert count == live, f"approximate_count {count}, the model has {live} live messages"
        else:
            assert live <= count <= live + self.model.expired, (
                f"approximate_count {count}, the model has {live} live and {self.model.expired} expired messages"
            )


class QueueMachine(CoreMachine):
    """The core rules plus peeks of any size: what the untimed run on Azurite does."""

    @rule(n=SOME)
    def peek(self, n: int) -> None:
        """Peek at up to ``n`` messages; the invariants then check that nothing changed."""
        got = self.run(self.backend.peek(self.queue, n))
        problem = self.choice_problem(got, self.model.peek(n), self.model.visible(), n)
        assert problem is None, f"peek({n}): {problem}"


class EmbeddedQueueMachine(QueueMachine):
    """Rules for the embedded queue only: concurrent writes, and arguments out of range.

    Concurrent writes: see the module docstring. Arguments out of range are refused before any request by both
    backends (``worker.backends.queues.check_*``), so on Azurite they would test the same code again at HTTP prices;
    the conformance suite has them on both.
    """

    @precondition(lambda self: self.model.count() + 4 <= MAX_LIVE)
    @rule(calls=st.lists(BATCH_CALL, min_size=2, max_size=4))
    def concurrently(self, calls: list[tuple[str, Any]]) -> None:
        """Make 2-4 writes at once; two lease calls may pick the same lease, and then only one may win."""
        current = self.of_kind("current")
        ops = []
        for call, arg in calls:
            if call == "put":
                ops.append(Op("put", content=arg))
            elif call == "receive" or not current:  # with no current lease, a lease call receives instead
                ops.append(Op("receive", n=min(arg, BATCH) or 1, visibility=LONG))
            else:
                lease = current[arg % len(current)]
                ops.append(
                    Op("delete", lease=lease)
                    if call == "delete"
                    else Op("update", lease=lease, visibility=0 if call == "release" else LONG)
                )
        self.perform(*ops)

    @rule(
        call=st.sampled_from(
            [
                "receive 0",
                "receive 33",
                "receive -1",
                "receive visibility 0",
                "receive visibility 7d+1",
                "peek 0",
                "peek 33",
                "put visibility 7d+1",
                "put ttl 0",
                "put visibility = ttl",
                "put 64 KiB + 1",
                "update visibility 7d+1",
            ]
        )
    )
    def out_of_range(self, call: str) -> None:
        """Arguments the service refuses: the same error from both, and no change (the invariants check that)."""
        b, m, q = self.backend, self.model, self.queue
        lease = self.leases[-1] if self.leases else Lease(str(uuid.uuid4()), "no-such-receipt")
        too_big = "é" * (MAX_BYTES // 2) + "a"  # 32769 characters, 65537 bytes
        calls: dict[str, tuple[Callable[[], Coroutine[Any, Any, object]], Callable[[], object]]] = {
            "receive 0": (lambda: b.receive(q, 0, LONG), lambda: m.receivable(0, LONG)),
            "receive 33": (lambda: b.receive(q, 33, LONG), lambda: m.receivable(33, LONG)),
            "receive -1": (lambda: b.receive(q, -1, LONG), lambda: m.receivable(-1, LONG)),
            "receive visibility 0": (lambda: b.receive(q, 1, 0), lambda: m.receivable(1, 0)),
            "receive visibility 7d+1": (lambda: b.receive(q, 1, SEVEN_DAYS + 1), lambda: m.receivable(1, SEVEN_DAYS + 1)),
            "peek 0": (lambda: b.peek(q, 0), lambda: m.peek(0)),
            "peek 33": (lambda: b.peek(q, 33), lambda: m.peek(33)),
            "put visibility 7d+1": (
                lambda: b.put(q, "x", visibility_timeout=SEVEN_DAYS + 1, time_to_live=NEVER),
                lambda: m.put("-", "x", SEVEN_DAYS + 1, NEVER),
            ),
            "put ttl 0": (lambda: b.put(q, "x", time_to_live=0), lambda: m.put("-", "x", 0, 0)),
            "put visibility = ttl": (
                lambda: b.put(q, "x", visibility_timeout=LONG, time_to_live=LONG),
                lambda: m.put("-", "x", LONG, LONG),
            ),
            "put 64 KiB + 1": (lambda: b.put(q, too_big), lambda: m.put("-", too_big, 0, None)),
            "update visibility 7d+1": (
                lambda: b.update(q, lease.message_id, lease.receipt, SEVEN_DAYS + 1),
                lambda: m.update(lease, SEVEN_DAYS + 1, "(none)"),
            ),
        }
        backend_call, model_call = calls[call]
        try:
            self.run(backend_call())
            error: QueueError | None = None
        except PROTOCOL_ERRORS as exc:
            error = exc
        self.agree(call, model_call, error)


class TimedQueueMachine(CoreMachine):
    """The core rules plus one that lets a second pass, at most :data:`MAX_TICKS` times an example.

    Fewer rules than :class:`QueueMachine`, so that time passes in most examples of the few this one can afford.
    """

    @precondition(lambda self: self.ticks < MAX_TICKS and self.model.count() < MAX_LIVE)
    @rule(crash=st.integers(0, 3), lapse=st.lists(PICK, max_size=3), leased=st.booleans())
    def let_time_pass(self, crash: int, lapse: list[int], leased: bool) -> None:
        """Arrange for things to happen one second from now, then wait until the backend agrees they have.

        First a consumer receives ``crash`` messages with a one-second visibility timeout and never
        comes back (they must return with their dequeue count raised, the receipt it got still
        current); then up to three held leases are updated to one second. Last a message with a
        one-second time to live is put; with ``leased`` it is received (with everything else
        visible, so that a backend without FIFO order must return it) and released, so that it
        expires holding a current receipt, which must then give MessageNotFound, not
        PopReceiptMismatch. Everything short was set up before the doomed message, so it is due no
        later, and the doomed message stays visible until it expires, so peek can see it go: the
        wait polls peek until it shows what the model shows a second later.
        """
        self.ticks += 1
        if crash and self.model.visible():
            self.perform(Op("receive", n=crash, visibility=SHORT))
        held = self.held()
        for lease in dict.fromkeys(held[p % len(held)] for p in lapse) if held else ():
            self.perform(Op("update", lease=lease, visibility=SHORT))
        [doomed] = self.perform(Op("put", content="doomed", ttl=SHORT))
        assert isinstance(doomed, RawMessage)
        if leased:
            [got] = self.perform(Op("receive", n=len(self.model.visible()), visibility=LONG))
            assert isinstance(got, list) and doomed.id in {m.id for m in got}, "receiving all visible missed the newest"
            receipt = self.model.messages[doomed.id].receipt
            assert receipt is not None
            self.perform(Op("update", lease=Lease(doomed.id, receipt), visibility=0))

        later = copy.deepcopy(self.model)
        later.advance(SHORT)
        now, then = {m.id for m in self.model.visible()}, {m.id for m in later.visible()}

        async def agrees() -> bool:
            """True once the backend shows the later state; fails at once on anything neither state allows."""
            seen = await self.backend.peek(self.queue, BATCH)
            ids = {m.id for m in seen}
            assert now & then <= ids <= now | then, (
                f"while {SHORT:g}s passes, the backend shows {describe(seen)}: the model shows "
                f"{sorted(now)} now and {sorted(then)} a second later, so it must show all of "
                f"{sorted(now & then)} and nothing but {sorted(now | then)}"
            )
            return ids == then

        self.run(apoll(agrees, AGREE_DEADLINE, interval=0.05, what=f"{self.target.name} to agree that {SHORT:g}s passed"))
        self.model = later


# -- the tests ----------------------------------------------------------------------------------------------------


def model_settings(examples: int, steps: int) -> settings:
    """Reproducible: the same sequences every run, no example database; no deadline, as a step does I/O.

    On failure, one shrunk sequence is the report: no second distinct failure is hunted for, and no
    "explain" phase reruns it (both would double the time a failing run takes, already minutes).
    """
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        report_multiple_bugs=False,
        phases=[phase for phase in Phase if phase is not Phase.explain],
    )


def test_sqlite_agrees_with_the_model(tmp_path: Path) -> None:
    run_state_machine_as_test(lambda: EmbeddedQueueMachine(sqlite_target(tmp_path)), settings=model_settings(100, 40))


def test_sqlite_agrees_with_the_model_as_time_passes(tmp_path: Path) -> None:
    run_state_machine_as_test(lambda: TimedQueueMachine(sqlite_target(tmp_path)), settings=model_settings(4, 20))


def test_azurite_agrees_with_the_model(tmp_path: Path, azurite: Azurite) -> None:
    run_state_machine_as_test(lambda: QueueMachine(azurite_target(tmp_path, azurite)), settings=model_settings(20, 30))


def test_azurite_agrees_with_the_model_as_time_passes(tmp_path: Path, azurite: Azurite) -> None:
    run_state_machine_as_test(lambda: TimedQueueMachine(azurite_target(tmp_path, azurite)), settings=model_settings(3, 20))

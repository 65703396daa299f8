"""Stop signals as their sender meant them: the first drains, a second exits at once.

A signal to a process group reaches a worker directly and again through its supervisor.
Coreutils' ``timeout`` even signals twice within microseconds. Read naively, that abandons handlers.
So the supervisor forwards as another signal (:data:`FORWARDED`), and senders are counted apart.
A second from the same sender exits at once; the same signal within :data:`REPEAT_WINDOW` is one.
Copies after the loop stopped: :func:`read_after_stop`, then :func:`ignore_at_exit`.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

#: The signals that stop a host or a supervisor.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How a supervisor passes each stop signal on to its worker processes, so that they can tell it from the one the
#: same sender sent them directly.
FORWARDED = {signal.SIGTERM: signal.SIGUSR1, signal.SIGINT: signal.SIGUSR2}
#: Seconds within which the same signal from the same sender is one signal: a program signalling a process and
#: then its group delivers it twice within microseconds; a person pressing Ctrl-C twice takes longer.
REPEAT_WINDOW = 0.1

_ORIGINAL: dict[int, signal.Signals] = {passed: original for original, passed in FORWARDED.items()}


class Stop(Enum):
    """What a signal asks of the process."""

    DRAIN = "drain"
    EXIT_NOW = "exit now"
    #: The same signal delivered again by its sender (within :data:`REPEAT_WINDOW`): nothing more to do.
    REPEATED = "repeated"


@dataclass
class StopSignals:
    """Counts the stop signals a process receives, by sender: itself (sent directly) or its supervisor
    (:data:`FORWARDED`)."""

    #: Seconds, for telling a repeated delivery from a second signal.
    clock: Callable[[], float] = time.monotonic
    #: How many distinct stop signals each sender sent; the key is True for the supervisor's.
    counts: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})
    _last: dict[bool, tuple[int, float]] = field(default_factory=dict)

    def receive(self, signum: int) -> tuple[Stop, signal.Signals, bool]:
        """What ``signum`` asks for, the stop signal it stands for (a forwarded one's original), and whether the
        supervisor passed it on."""
        forwarded = signum in _ORIGINAL
        original = signal.Signals(_ORIGINAL.get(signum, signum))
        now = self.clock()
        last = self._last.get(forwarded)
        self._last[forwarded] = (original, now)
        if last is not None and last[0] == original and now - last[1] < REPEAT_WINDOW:
            return Stop.REPEATED, original, forwarded
        self.counts[forwarded] += 1
        return (Stop.DRAIN if self.counts[forwarded] == 1 else Stop.EXIT_NOW), original, forwarded

    @property
    def exit_now(self) -> bool:
        """Whether some sender asked twice."""
        return any(count > 1 for count in self.counts.values())


def forwarded_act_as_original() -> None:
    """Until the host listens for them, a signal the supervisor passed on does what its original would (a process
    still starting ends as it would have on SIGTERM or SIGINT), not what SIGUSR1 and SIGUSR2 do by default."""
    for original, passed in FORWARDED.items():
        signal.signal(passed, functools.partial(_raise_original, original))


def _raise_original(original: signal.Signals, _signum: int, _frame: object) -> None:
    """A handler of a forwarded signal (bound to its original by :func:`forwarded_act_as_original`)."""
    signal.raise_signal(original)


def read_after_stop(signals: StopSignals, signums: Iterable[int]) -> None:
    """Once a process no longer listens for ``signums`` on its event loop (its host or supervisor has stopped),
    read them with ``signals`` until it ends, instead of leaving them to the defaults.

    Under the defaults a late copy of the signal already obeyed ends the process while it closes its storage, by
    the signal (SIGINT with a KeyboardInterrupt traceback; SIGUSR1 and SIGUSR2 too), so that a clean drain exits
    130 or 143. Here a copy, or the first signal of another sender, does nothing; a second signal from the same
    sender still exits at once. The handler logs nothing: it runs between any two steps of the main thread, which
    may be writing a log line under its lock.
    """

    def after_stop(signum: int, _frame: object) -> None:
        stop, original, _ = signals.receive(signum)
        if stop is Stop.EXIT_NOW:
            os._exit(128 + original)

    for signum in signums:
        signal.signal(signum, after_stop)


def ignore_stop_signals() -> None:
    """Ignore the stop signals and the forms the supervisor passes them on in (:func:`ignore_at_exit`)."""
    for signum in (*STOP_SIGNALS, *FORWARDED.values()):
        signal.signal(signum, signal.SIG_IGN)


def ignore_at_exit() -> None:
    """Ignore the stop signals in the interpreter's last steps, after every atexit callback registered later (so:
    call it before the app is imported, whose callbacks still get :func:`read_after_stop`'s reading).

    Those steps begin by putting back the default of every signal a Python function handles, and a late copy
    would then end the exiting process by the signal after all. Ignored, it cannot; nothing is left to stop by then.
    """
    atexit.unregister(ignore_stop_signals)  # once, however often a process runs a command
    atexit.register(ignore_stop_signals)

"""How a process reads the stop signals it gets: per sender, and the same delivery twice is one signal."""

from __future__ import annotations

import signal

from worker.runtime.signals import FORWARDED, REPEAT_WINDOW, Stop, StopSignals


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_signal_sent_directly_and_passed_on_by_the_supervisor_drains_once() -> None:
    signals = StopSignals(Clock())
    assert signals.receive(signal.SIGINT) == (Stop.DRAIN, signal.SIGINT, False)
    assert signals.receive(FORWARDED[signal.SIGINT]) == (Stop.DRAIN, signal.SIGINT, True)
    assert not signals.exit_now


def test_the_same_signal_delivered_twice_at_once_is_one_and_a_later_one_is_a_second() -> None:
    clock = Clock()
    signals = StopSignals(clock)
    assert signals.receive(signal.SIGTERM)[0] is Stop.DRAIN
    clock.now += REPEAT_WINDOW / 10  # coreutils' timeout: the process, then its group
    assert signals.receive(signal.SIGTERM)[0] is Stop.REPEATED
    clock.now += REPEAT_WINDOW * 5  # a person, again
    assert signals.receive(signal.SIGTERM) == (Stop.EXIT_NOW, signal.SIGTERM, False)
    assert signals.exit_now


def test_another_signal_at_once_is_a_second_one() -> None:
    signals = StopSignals(Clock())
    signals.receive(signal.SIGTERM)
    assert signals.receive(signal.SIGINT)[0] is Stop.EXIT_NOW

"""How one setting is read: the value parsers and range checks of the settings' schemas, and their errors.

The host's schema (:mod:`.config`) and every declared section (:mod:`.sections`) use them.
So a bad setting is refused in the same words wherever it stands: key, file and line, and what was wrong.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A setting is wrong. ``key`` is the dotted path, ``where`` the file:line or variable."""

    def __init__(self, key: str, problem: str, where: str | None = None) -> None:
        self.key = key
        self.problem = problem
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{key}: {problem}")


class ConfigErrors(ConfigError):
    """Several settings are wrong: every one is listed, so that one run shows all there is to fix."""

    def __init__(self, errors: list[ConfigError]) -> None:
        first = errors[0]
        super().__init__(first.key, first.problem, first.where)
        self.errors = errors
        self.args = (f"{len(errors)} problems in the settings:\n" + "\n".join(f"  {e}" for e in errors),)


def raise_all(errors: list[ConfigError]) -> None:
    """Raise the one problem as it is, several together; nothing when there are none."""
    errors = [one for error in errors for one in (error.errors if isinstance(error, ConfigErrors) else [error])]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


# A sign is read, so that a negative duration is refused by its setting's range ("must be between"), as what it is,
# rather than as badly written.
_DURATION_HMS = re.compile(r"^(-)?(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2}(?:\.\d+)?)$")
_DURATION_UNIT = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: A week in seconds, for the settings' ranges.
WEEK = 7 * 86400.0


def parse_duration(value: Any) -> float:
    """Seconds from ``hh:mm:ss`` (host.json's TimeSpan, optionally ``d.hh:mm:ss``), ``30s``/``10m``/``250ms``, or a number.

    Raises ValueError with the accepted forms, for ConfigError to wrap.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if m := _DURATION_HMS.match(text):
            sign, days, hours, minutes, seconds = m.groups()
            if int(minutes) >= 60 or float(seconds) >= 60:
                raise ValueError(f"minutes and seconds must be below 60 in {value!r}")
            total = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)
            return -total if sign else total
        if m := _DURATION_UNIT.match(text):
            return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    raise ValueError(f"expected a duration like '00:05:00', '30s' or '10m', got {value!r}")


def no_check(_value: Any) -> str | None:
    """The check of a setting whose parser refuses every value it cannot take."""
    return None


@dataclass(frozen=True, slots=True)
class Setting:
    """One key of the schema: how to read it and which values are allowed."""

    attr: str
    parse: Callable[[Any], Any]
    check: Callable[[Any], str | None] = no_check

    def read(self, key: str, value: Any, where: str) -> Any:
        """``value`` parsed and checked; ConfigError naming ``key`` and ``where`` when it is wrong."""
        try:
            parsed = self.parse(value)
        except ValueError as exc:
            raise ConfigError(key, str(exc), where) from None
        if problem := self.check(parsed):
            raise ConfigError(key, problem, where)
        return parsed


def parse_integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def parse_boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def parse_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def parse_text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Between:
    """A range check; with ``unit`` "s" the values are durations, written as the settings write them. Its text
    (``str()``) is the range as the settings reference gives it."""

    low: float
    high: float
    unit: str = ""

    def show(self, number: float) -> str:
        return duration_text(number) if self.unit == "s" else f"{number:g}{self.unit}"

    def __call__(self, value: Any) -> str | None:
        if value is None or self.low <= value <= self.high:
            return None
        got = "NaN" if value != value else self.show(value)
        return f"must be between {self.show(self.low)} and {self.show(self.high)}, got {got}"

    def __str__(self) -> str:
        return f"{self.show(self.low)} .. {self.show(self.high)}"


def duration_text(seconds: float) -> str:
    """``seconds`` in the largest of d, h, m, s it is a whole number of (70d rather than 6.048e+06s)."""
    if not math.isfinite(seconds):
        return f"{seconds:g}"
    for unit in ("d", "h", "m"):
        if seconds and seconds % _UNIT_SECONDS[unit] == 0:
            return f"{seconds / _UNIT_SECONDS[unit]:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True)
class OneOf:
    """A check that the value is one of ``choices``; its text is the choices."""

    choices: tuple[str, ...]

    def __call__(self, value: Any) -> str | None:
        return None if value in self.choices else f"must be one of {', '.join(self.choices)}, got {value!r}"

    def __str__(self) -> str:
        return ", ".join(self.choices)


def one_of(*choices: str) -> OneOf:
    return OneOf(choices)


def likely(key: str, known: Iterable[str]) -> str | None:
    """What ``key`` most likely misspells among ``known`` (a wrong case, a letter or two, in the key or in the section
    it starts with: ``fuctions.a.batchSize`` is ``functions.a.batchSize``); None when nothing is close enough."""
    parts = key.split(".")
    best, score = None, 0.8  # below this, a guess misleads more than it helps
    for name in sorted(known):
        depth = name.count(".") + 1
        ratio = difflib.SequenceMatcher(None, ".".join(parts[:depth]).lower(), name.lower()).ratio()
        guess = ".".join([name, *parts[depth:]])
        if ratio > score and guess != key:
            best, score = guess, ratio
    return best


def unknown(key: str, known: Iterable[str], listed: str, what: str = "key") -> str:
    """ "unknown key" (or section), with what it most likely misspells, then every known one: a typo otherwise reads
    like a setting this host lacks."""
    known = sorted(known)
    best = likely(key, known)
    hint = f"; did you mean {best}?" if best else ""
    return f"unknown {what}{hint} ({listed}: {', '.join(known)})"

"""Lambda's event filtering (an event source's ``FilterCriteria``) for SQS records, as Lambda applies it.

A record matching any filter's ``Pattern`` reaches the function; one matching none is deleted, as in Lambda.
A JSON-object ``body`` is matched as that object, any other body as its text.
The language is Lambda's: value lists, ``prefix``, ``suffix``, ``anything-but``, ``numeric``, ``exists``,
``equals-ignore-case``, nested objects and ``$or``.
A pattern outside it is refused when the template is read, naming the filter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

#: Fields of a record a pattern matches whose value is JSON text itself.
_JSON_FIELDS = ("body",)
#: Lambda's numeric comparisons.
_NUMERIC = {
    "=": lambda a, b: a == b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_MISSING = object()


class FilterError(ValueError):
    """A filter pattern outside Lambda's pattern language."""


def parse_filters(criteria: Any) -> tuple[dict[str, Any], ...]:
    """The patterns of a ``FilterCriteria`` (``{"Filters": [{"Pattern": "<JSON>"}, ...]}``). Raises FilterError."""
    filters = (criteria or {}).get("Filters") if isinstance(criteria, Mapping) else None
    if not isinstance(filters, list) or not filters:
        raise FilterError("FilterCriteria needs Filters: a list of {Pattern: <JSON text>}")
    patterns = []
    for number, item in enumerate(filters, 1):
        text = item.get("Pattern") if isinstance(item, Mapping) else None
        try:
            pattern = json.loads(text) if isinstance(text, str) else text
        except ValueError as exc:
            raise FilterError(f"filter {number}: Pattern is not JSON ({exc})") from None
        if not isinstance(pattern, dict):
            raise FilterError(f"filter {number}: Pattern must be a JSON object")
        try:
            _check(pattern)
        except FilterError as exc:
            raise FilterError(f"filter {number}: {exc}") from None
        patterns.append(pattern)
    return tuple(patterns)


def _check(pattern: Mapping[str, Any]) -> None:
    for key, rule in pattern.items():
        if key == "$or":
            if not isinstance(rule, list) or len(rule) < 2 or not all(isinstance(p, dict) for p in rule):
                raise FilterError("$or takes a list of two or more patterns")
            for inner in rule:
                _check(inner)
        elif isinstance(rule, dict):
            _check(rule)
        elif isinstance(rule, list):
            for value in rule:
                _check_value(key, value)
        else:
            raise FilterError(f"{key}: a field's rule is a list of values, or an object of nested fields")


def _check_value(key: str, value: Any) -> None:
    if not isinstance(value, dict):
        if isinstance(value, (list, bool)):
            raise FilterError(f"{key}: {value!r} is not a value a pattern matches")
        return
    if len(value) != 1:
        raise FilterError(f"{key}: a rule object has one operator, got {sorted(value)}")
    ((operator, argument),) = value.items()
    if operator in ("prefix", "suffix", "equals-ignore-case"):
        if not isinstance(argument, str):
            raise FilterError(f"{key}: {operator} takes a string")
    elif operator == "anything-but":
        _check_anything_but(key, argument)
    elif operator == "exists":
        if not isinstance(argument, bool):
            raise FilterError(f"{key}: exists takes true or false")
    elif operator == "numeric":
        _check_numeric(key, argument)
    else:
        raise FilterError(f"{key}: {operator!r} is not an operator of Lambda's filter patterns")


def _check_anything_but(key: str, argument: Any) -> None:
    """``anything-but`` takes a string or number, or a list of them."""
    items = argument if isinstance(argument, list) else [argument]
    if not all(isinstance(item, (str, int, float)) and not isinstance(item, bool) for item in items):
        raise FilterError(f"{key}: anything-but takes a value or a list of values")


def _check_numeric(key: str, argument: Any) -> None:
    """``numeric`` takes pairs of a comparison and a number: ``[">", 0, "<=", 5]``."""
    if not isinstance(argument, list) or not argument or len(argument) % 2:
        raise FilterError(f"{key}: numeric takes [operator, number, ...]")
    for op, number in zip(argument[::2], argument[1::2], strict=True):
        if op not in _NUMERIC or isinstance(number, bool) or not isinstance(number, (int, float)):
            raise FilterError(f"{key}: numeric takes operators {', '.join(_NUMERIC)} each with a number")


def record_view(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a pattern sees of a record: the record, its ``body`` read as JSON where it is a JSON object."""
    view = dict(record)
    for name in _JSON_FIELDS:
        text = view.get(name)
        if isinstance(text, str):
            try:
                parsed = json.loads(text)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                view[name] = parsed
    return view


def matches_any(patterns: Sequence[Mapping[str, Any]], record: Mapping[str, Any]) -> bool:
    """Whether the record matches one of the patterns (no patterns: every record does)."""
    if not patterns:
        return True
    view = record_view(record)
    return any(_matches(pattern, view) for pattern in patterns)


def _matches(pattern: Mapping[str, Any], data: Any) -> bool:
    for key, rule in pattern.items():
        if key == "$or":
            if not any(_matches(inner, data) for inner in rule):
                return False
            continue
        value = data.get(key, _MISSING) if isinstance(data, Mapping) else _MISSING
        if isinstance(rule, dict):
            if not _matches(rule, value if isinstance(value, Mapping) else {}):
                return False
        elif not any(_value_matches(one, value) for one in rule):
            return False
    return True


def _value_matches(rule: Any, value: Any) -> bool:
    """One value of a field's rule list against the field's value (each element, where the value is a list)."""
    if isinstance(rule, dict) and "exists" in rule:
        return (value is not _MISSING) is rule["exists"]
    if value is _MISSING:
        return False
    if isinstance(value, list):
        return any(_value_matches(rule, element) for element in value)
    if not isinstance(rule, dict):
        return _equal(rule, value)
    ((operator, argument),) = rule.items()
    if operator == "prefix":
        return isinstance(value, str) and value.startswith(argument)
    if operator == "suffix":
        return isinstance(value, str) and value.endswith(argument)
    if operator == "equals-ignore-case":
        return isinstance(value, str) and value.casefold() == argument.casefold()
    if operator == "anything-but":
        return not any(_equal(item, value) for item in (argument if isinstance(argument, list) else [argument]))
    if operator == "numeric":
        number = _number(value)
        return number is not None and all(
            _NUMERIC[op](number, bound) for op, bound in zip(argument[::2], argument[1::2], strict=True)
        )
    return False


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _equal(expected: Any, value: Any) -> bool:
    """Lambda's exact match: numbers by value, strings and null as they are."""
    if expected is None or value is None:
        return expected is None and value is None
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        number = _number(value)
        return number is not None and number == float(expected)
    return isinstance(value, str) and value == expected

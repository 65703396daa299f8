"""What a handler's parameters ask for, read from their annotations as the Functions Python worker reads them.

``str`` gets text and ``bytes`` gets bytes; anything else gets the binding's own object.
String annotations are evaluated when they can be, and compared by name when they cannot.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

#: What a trigger or blob-input parameter receives: the binding's object, or its data as text or bytes.
DataKind = Literal["object", "str", "bytes"]


def annotation(handler: Callable[..., Any], name: str) -> Any:
    """The annotation of parameter ``name`` (evaluated when possible), or ``inspect.Parameter.empty``."""
    try:
        parameters = inspect.signature(handler, eval_str=True).parameters
    except Exception:  # a string annotation naming something not importable here: compare it by name
        parameters = inspect.signature(handler).parameters
    parameter = parameters.get(name)
    return parameter.annotation if parameter is not None else inspect.Parameter.empty


def data_kind(handler: Callable[..., Any], name: str) -> DataKind:
    """``str`` or ``bytes`` when the parameter is annotated so; else the binding's object."""
    hint = annotation(handler, name)
    if hint is str or hint == "str":
        return "str"
    if hint is bytes or hint == "bytes":
        return "bytes"
    return "object"

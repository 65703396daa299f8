"""local.settings.json, read as Azure Functions Core Tools reads it when ``func start`` runs.

``Values`` and ``ConnectionStrings`` become environment settings, unless already set.
Then the environment wins, and the skipped keys are named (never their values).
A ``ConnectionStrings`` entry ``X`` becomes ``ConnectionStrings__X`` (:mod:`worker.settings.connections`).
``IsEncrypted: true`` is refused: nothing here can decrypt another machine's values.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.settings import functions_json

FILE = "local.settings.json"


class LocalSettingsError(ValueError):
    """local.settings.json cannot be used; the message names the file and keys, never values."""


@dataclass(frozen=True)
class LocalSettings:
    """What was made of a folder's local.settings.json."""

    #: Where it was looked for.
    path: Path
    #: Whether it was there (and read).
    found: bool = False
    #: Settings it added to the environment.
    applied: tuple[str, ...] = ()
    #: Settings it holds that the environment already defines otherwise (the environment's value stays).
    skipped: tuple[str, ...] = ()

    def describe(self) -> str:
        """Where settings came from, for a message about a setting that was not found."""
        return str(self.path) if self.found else f"no {FILE} in {self.path.parent}"


def apply(folder: Path, environ: MutableMapping[str, str]) -> LocalSettings:
    """Add ``folder``'s local.settings.json, if there is one, to ``environ``."""
    path = folder / FILE
    if not path.is_file():
        return LocalSettings(path)
    settings = _settings(path, _read(path))
    applied = tuple(name for name in settings if name not in environ)
    # Only where the environment says otherwise: the worker processes of --processes N inherit what their
    # supervisor applied, which is no news.
    skipped = tuple(name for name in settings if name in environ and environ[name] != settings[name])
    for name in applied:
        environ[name] = settings[name]
    return LocalSettings(path, True, applied, skipped)


def _read(path: Path) -> dict[str, Any]:
    """The file's object, refused when it cannot be read, is no JSON object or is encrypted."""
    try:
        data = functions_json.parse(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LocalSettingsError(f"cannot read {path}: {exc.strerror or exc}") from None
    except functions_json.JsonFileError as exc:
        raise LocalSettingsError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise LocalSettingsError(f"{path}: {functions_json.TOO_DEEP}") from None
    if not isinstance(data, dict):
        raise LocalSettingsError(f"{path}: expected an object with Values, got {type(data).__name__}")
    if data.get("IsEncrypted") is True:
        raise LocalSettingsError(
            f"{path}: IsEncrypted is true: its values are encrypted for the machine that wrote them; decrypt them "
            "(func settings decrypt) or set the settings in the environment"
        )
    return data


def _settings(path: Path, data: dict[str, Any]) -> dict[str, str]:
    """The environment settings ``Values`` and ``ConnectionStrings`` make, the first of a name winning; every
    entry that is not text (or, in ``Values``, a number or boolean) named at once."""
    settings: dict[str, str] = {}
    problems: list[str] = []
    for section, prefix in (("Values", ""), ("ConnectionStrings", "ConnectionStrings__")):
        entries = data.get(section) or {}
        if not isinstance(entries, dict):
            problems.append(f"{section} must be an object of names and values")
            continue
        for name, value in entries.items():
            if isinstance(value, bool | int | float) and section == "Values":
                value = str(value).lower() if isinstance(value, bool) else str(value)  # as Core Tools passes them
            if not isinstance(value, str):
                problems.append(f"{section}.{name} must be text")
                continue
            settings.setdefault(prefix + name, value)
    if problems:
        raise LocalSettingsError(f"{path}: " + "; ".join(problems))
    return settings

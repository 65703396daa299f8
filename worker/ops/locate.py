"""The settings file a ``worker`` command reads when ``--config`` names none: one search for every command.

Its folder also holds the embedded queue's default file, so every command must find the same one.
The search: the app's folder, then the current folder and each above it, up to the project's root.
The root is the first folder with ``.git`` or ``pyproject.toml``; never above home or ``/``.
``function_app.py`` does not end the search: a project's host.yaml may sit above its app.
local.settings.json is found by the same search.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from worker.compat.discovery import app_directory

#: The settings files, in the order they are looked for in each folder: host.yaml, else Functions' host.json.
SETTINGS_FILES = ("host.yaml", "host.json")
#: What a project's root holds; the search for a settings file goes no higher.
PROJECT_ROOT_MARKERS = (".git", "pyproject.toml")


def searched_folders(app: str | None = None) -> Iterator[Path]:
    """The folders searched for a settings file, in order: app ``MODULE[:ATTR]``'s, then the current one and up."""
    if app is not None and (app_folder := app_directory(app)) is not None:
        yield app_folder
    home = Path(os.path.expanduser("~"))
    for folder in (cwd := Path.cwd(), *cwd.parents):
        yield folder
        if folder == home or any((folder / marker).exists() for marker in PROJECT_ROOT_MARKERS):
            return


def find(names: tuple[str, ...], app: str | None = None) -> Path | None:
    """The first of ``names`` in the first of :func:`searched_folders` holding one; None when none does."""
    for folder in searched_folders(app):
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return None


def find_config(app: str | None = None) -> Path | None:
    """host.yaml, else host.json, found as :func:`find` finds files; None: the defaults apply."""
    return find(SETTINGS_FILES, app)

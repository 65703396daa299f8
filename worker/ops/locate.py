"""The settings file a ``worker`` command reads when ``--config`` names none: one search for every command.

The settings file's folder is also where the embedded queue's default file
lives (``.worker/queues.sqlite3``), so a command that found another settings
file than the running worker, or none, would write to a queue file the worker
never reads. Every command therefore searches the same way: the app's folder
first (``worker run``), then the current folder and each folder above it, up
to and including the project's root (the first folder holding ``.git`` or
``pyproject.toml``), and never above the home folder or the filesystem's root.
A settings file above the project's root belongs to something else; a
project's own may sit above the app's module (this repository's sample app is
in ``functions/``, its host.yaml at the root), which is why a folder holding
``function_app.py`` or ``local.settings.json`` does not end the search.
local.settings.json, which Functions keeps beside host.json and which may name
the storage, is found by the same search.
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

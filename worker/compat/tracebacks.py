"""What an exception raised while importing an app says to its author: the app's own files and lines.

An import failure is fixed in the app, but its type and message alone do not say where.
So the innermost frames in the app's folder are kept, and the host's and libraries' are left out.
"""

from __future__ import annotations

import traceback
from pathlib import Path

#: The app frames shown, innermost last; enough to see the call that failed and what led to it.
MAX_FRAMES = 5


def import_failure(headline: str, exc: BaseException, app_folder: Path) -> str:
    """``headline: Type: message`` and, indented below it, the innermost frames of ``exc`` in ``app_folder``."""
    lines = [f"{headline}: {type(exc).__name__}: {exc}"]
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if _inside(frame.filename, app_folder)]
    for frame in frames[-MAX_FRAMES:]:
        lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}')
        if frame.line:
            lines.append(f"    {frame.line}")
    if isinstance(exc, SyntaxError) and exc.filename and _inside(exc.filename, app_folder):
        # A syntax error's place is the file being compiled, not a frame: no app code ran.
        lines.append(f'  File "{exc.filename}", line {exc.lineno}')
        if exc.text:
            lines.append(f"    {exc.text.strip()}")
    return "\n".join(lines)


def _inside(filename: str, folder: Path) -> bool:
    if not Path(filename).is_absolute():  # "<frozen importlib._bootstrap>", "<string>": no file of the app
        return False
    try:
        path = Path(filename).resolve()
        return path.is_relative_to(folder.resolve()) and "site-packages" not in path.parts
    except (OSError, ValueError):
        return False

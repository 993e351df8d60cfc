"""Output paths, checked before any work is done: a path edgepack cannot write, or must not overwrite, is one
line naming it (OutputPathError), never a traceback after minutes of building."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import OutputPathError


def _name_max(p: Path) -> int:
    try:
        return os.pathconf(p, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def nearest_existing(p: Path) -> Path:
    """`p` itself or its closest ancestor that exists."""
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def _short(s: str, n: int = 40) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def check_creatable(p: str | os.PathLike, flag: str, reserve: int = 0) -> Path:
    """-> `p` resolved, once it is known that it can be created (or already exists): every name short enough
    (`reserve`: characters a temporary name beside it adds), no file where a folder must be, write permission.
    What sits at `p` itself is left to the caller."""
    given = str(p)
    p = Path(os.path.abspath(p))  # lexical, so names are checked before resolving touches the file system
    for part in p.parts[1:]:
        limit = _name_max(nearest_existing(p)) - reserve
        if len(part) > limit:
            raise OutputPathError(f"{flag} '{_short(given)}': the name '{_short(part, 24)}' is {len(part)} characters, "
                                  f"more than the {limit} allowed here; choose a shorter name")
    base = nearest_existing(p.parent)
    if not base.is_dir():
        raise OutputPathError(f"{flag} '{_short(given)}': '{base}' is a file, not a folder; "
                              "choose a path whose folders are folders")
    if not os.access(base, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} '{_short(given)}': no permission to write in '{base}'; choose another place")
    return p.resolve()


def output_file(p: str | os.PathLike, flag: str, example: str) -> Path:
    """A file edgepack writes (replacing a file already there, never a folder); `example`: a file name to suggest."""
    target = check_creatable(p, flag, reserve=len("..tmp"))
    if target.is_dir():
        raise OutputPathError(f"{flag} '{_short(str(p))}' is a folder; give a file name, e.g. {flag} "
                              f"{Path(p) / example}")
    return target


def output_dir(p: str | os.PathLike, flag: str) -> Path:
    """A folder edgepack writes files into (created if missing; files already in it stay)."""
    target = check_creatable(p, flag)
    if os.path.lexists(target) and not target.is_dir():
        raise OutputPathError(f"{flag} '{_short(str(p))}' is a file, not a folder; give a folder for the outputs")
    return target

"""Where edgepack's own files are: boards/ and templates/ beside the package in a checkout (and an editable
install), inside it in an installed wheel (setup.py copies them there)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    inside = _PACKAGE / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


BOARDS_DIR = data_dir("boards")
TEMPLATES_DIR = data_dir("templates")

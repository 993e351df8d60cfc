"""CLI subcommands beyond the core ones in cli.py, one module per command (or per family of commands).

Each module defines `register(sub)` that adds its parser(s) to the argparse subparsers `sub` and sets
`fn` on them; cli.py discovers the modules here, so adding a command is adding a file.
"""

from __future__ import annotations

import importlib
import pkgutil


def register_all(sub) -> None:
    for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not m.name.startswith("_"):  # shared helpers, not commands
            importlib.import_module(f"{__name__}.{m.name}").register(sub)

"""Stand-in boards: emulated boards that really run the board's code, for users without hardware and for CI.

A board file names its stand-in implementation:  [standin] module = "qemu_linux"  ->  edgepack/standin/qemu_linux.py
Each such module defines
    up(board, state: Path) -> Connection     start it (processes in their own process group), return how to reach it
    down(board, state: Path) -> None         stop every process it started, remove what it made (idempotent)
    alive(board, state: Path) -> bool
`state` is a per-board directory; `up` here saves the Connection in state/connection.json so that later
commands given `--board NAME` without an address find the running stand-in.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from pathlib import Path

from ..board import Board, Connection
from ..errors import BoardError


def state_root() -> Path:
    return Path(os.environ.get("EDGEPACK_STATE_DIR", Path.home() / ".cache" / "edgepack" / "standins"))


def _module(board: Board):
    name = board.section("standin").get("module")
    if not name:
        raise BoardError(f"board '{board.name}' has no stand-in (its board file has no [standin] module); "
                         "use a real board's address instead")
    return importlib.import_module(f"{__name__}.{name}")


def state_dir(board: Board) -> Path:
    return state_root() / board.name


def up(board: Board) -> Connection:
    mod, state = _module(board), state_dir(board)
    if mod.alive(board, state) and (state / "connection.json").exists():
        return saved_connection(board)
    state.mkdir(parents=True, exist_ok=True)
    conn = mod.up(board, state)
    (state / "connection.json").write_text(json.dumps(dataclasses.asdict(conn), indent=1))
    return conn


def down(board: Board) -> None:
    state = state_dir(board)
    _module(board).down(board, state)
    (state / "connection.json").unlink(missing_ok=True)


def saved_connection(board: Board) -> Connection | None:
    """The running stand-in's connection, or None when it is not up."""
    f = state_dir(board) / "connection.json"
    if not board.section("standin") or not f.exists() or not _module(board).alive(board, state_dir(board)):
        return None
    return Connection(**json.loads(f.read_text()))

"""`edgepack standin up|down|status BOARD`: start and stop emulated boards."""

from __future__ import annotations

import argparse


def _cmd(a: argparse.Namespace) -> int:
    from .. import standin
    from ..board import load_board

    board = load_board(a.board)
    if a.action == "up":
        c = standin.up(board)
        print(f"stand-in '{board.name}' is up: " + ", ".join(f"{k}={v}" for k, v in vars(c).items() if v not in (None, False, {})))
        print(f"commands given --board {board.name} without an address use it; stop it with `edgepack standin down {board.name}`")
    elif a.action == "down":
        standin.down(board)
        print(f"stand-in '{board.name}' is down")
    else:
        c = standin.saved_connection(board)
        print(f"stand-in '{board.name}': " + ("down" if c is None else "up, " + ", ".join(
            f"{k}={v}" for k, v in vars(c).items() if v not in (None, False, {}))))
    return 0


def register(sub) -> None:
    p = sub.add_parser("standin", help="start or stop an emulated board (qemu-aarch64, mps2-an386, ...)")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("board", help="a board whose file has a [standin] section")
    p.set_defaults(fn=_cmd)

"""The connection flags, declared once for every command that reaches a board (run, flash, verify, bench,
tune, rpc-server), and the board and device they name. Not a command: commands/__init__ skips `_` modules."""

from __future__ import annotations

import argparse

from .. import argtypes
from ..errors import BoardError


def add_connection_args(p: argparse.ArgumentParser, board_required: bool = False, serial: bool = False) -> None:
    p.add_argument("--board", required=board_required,
                   help="board name from boards/*.toml" + ("" if board_required else " (default: the package's board)"))
    p.add_argument("--host", help="the board's address (default: the board's running stand-in, if any)")
    p.add_argument("--user", help="SSH user (default: the board file's [ssh] user, else yours)")
    p.add_argument("--key", help="SSH private key file (default: ssh-agent and ~/.ssh keys)")
    p.add_argument("--port", type=argtypes.port, help="SSH port (default: the board file's, else 22)")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="trust and save an unknown host key (default: refuse hosts not in known_hosts)")
    if serial:
        p.add_argument("--serial", metavar="PORT", help="a microcontroller's serial port or pyserial URL, e.g. "
                       "/dev/ttyACM0 (default: the board's running stand-in)")


def connection_from_args(a: argparse.Namespace, board):
    from ..deploy.device import connection_for

    kw = dict(port=a.port, user=a.user, key=a.key, accept_new_host_key=a.accept_new_host_key or None,
              serial=getattr(a, "serial", None))
    conn = connection_for(board, host=a.host, **kw)
    if a.accept_new_host_key and not conn.accept_new_host_key:  # a saved stand-in connection: keep the flag
        import dataclasses

        conn = dataclasses.replace(conn, accept_new_host_key=True)
    return conn


def board_for(a: argparse.Namespace, manifest: dict | None):
    from ..board import load_board

    return load_board(a.board or (manifest or {}).get("board", {}).get("name") or "host")


def ssh_device(board, a: argparse.Namespace, conn=None):
    from ..deploy.device import open_device

    if board.transport_kind != "ssh":
        raise BoardError(f"board '{board.name}' is not reached over SSH (transport '{board.transport.get('kind', 'local')}'); "
                         "use a Linux board (rpi4, qemu-aarch64, ...)")
    return open_device(board, conn or connection_from_args(a, board))

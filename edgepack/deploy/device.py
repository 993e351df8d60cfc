"""A device: where a built package runs. One interface for every transport, so `run`, `bench` and the
report code do not care whether the board is this machine, a Linux board over SSH or an MCU on a serial line.

  transport "local"  -> deploy/local.py   LocalDevice (the host board)
  transport "ssh"    -> deploy/ssh.py     Arm Linux boards (paramiko)
  transport "serial" -> deploy/serial.py  microcontrollers (pyserial, firmware protocol)

Each module defines `open_device(board, conn: Connection) -> Device`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..board import Board, Connection
from ..codegen.bundle import Bundle
from ..errors import BoardError


@dataclass(frozen=True)
class BenchSettings:
    warmup: int = 3
    repeat: int = 20
    min_time_ms: int = 0
    threads: int | None = None
    profile: bool = False  # per-call timing (`ep bench --profile`, a run of its own)


@dataclass
class BenchResult:
    """One size on one device: raw samples from the device's clock, in nanoseconds (or ticks, see `unit`)."""

    dims: dict[str, int]
    samples_ns: list[int]
    threads: int | None = None
    unit: str = "ns"  # "ns", or "ticks" where the device counts instructions (QEMU -icount)
    calls: list[dict] = field(default_factory=list)  # per kernel call: {"name", "ns"} when profiled


class Device(Protocol):
    board: Board

    def install(self, bundle: Bundle) -> str:
        """Put the package on the device (no-op for local); returns where it is."""

    def run(self, bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path,
            threads: int | None = None) -> list[Path]:
        """Run the package on the inputs; outputs land in out_dir as <k>_<name>.npy."""

    def bench(self, bundle: Bundle, dims: dict[str, int], settings: BenchSettings) -> BenchResult:
        """Time the package at one size with the device's clock."""

    def close(self) -> None: ...


_TRANSPORTS = {"local": "local", "ssh": "ssh", "serial": "serial"}


def check_board(bundle: Bundle, board_name: str | Board) -> None:
    """Refuse, before anything is sent or run, a package compiled for another board."""
    name = board_name if isinstance(board_name, str) else board_name.name
    built_for = bundle.manifest.get("board", {}).get("name")
    if built_for != name:
        raise BoardError(f"package '{bundle.path}' was built for board '{built_for}', not '{name}'; "
                         f"rebuild it with `edgepack build ... --board {name}`")


def open_device(board: Board, conn: Connection | None = None) -> Device:
    kind = board.transport_kind
    if kind not in _TRANSPORTS:
        raise BoardError(f"board '{board.name}' ({board.path}): [transport] kind '{kind}' is not one of "
                         f"{', '.join(_TRANSPORTS)}; fix the board file")
    mod = importlib.import_module(f"{__package__}.{_TRANSPORTS[kind]}")
    return mod.open_device(board, conn or Connection())


def connection_for(board: Board, host: str | None = None, **kw) -> Connection:
    """The connection the CLI flags describe; with no address given, a running stand-in's saved one."""
    given = {k: v for k, v in kw.items() if v is not None}
    if host is None and not given.get("serial"):
        from ..standin import saved_connection

        saved = saved_connection(board) if board.section("standin") else None
        if saved is not None:
            return saved
    return Connection(host=host, **given)

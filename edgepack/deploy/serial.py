"""Microcontroller boards (transport "serial"): flash the package's firmware, then drive it through the
edgepack serial protocol (edgepack/mcu/protocol.py) with pyserial.

Stand-ins (`[standin]` in the board file, e.g. mps2-an386) are flashed by restarting QEMU with the firmware;
real boards by the board file's `[flasher] command`, then reached on the serial port given (--serial).
"""

from __future__ import annotations

import importlib
import shlex
import shutil
import struct
import subprocess
import time
from pathlib import Path

import numpy as np

from ..board import Board, Connection
from ..codegen.bundle import Bundle
from ..errors import BoardError, RunError, last_line
from ..mcu import protocol as P
from ..mcu.config import mcu_config
from .device import BenchResult, BenchSettings, check_board
from .io import dims_of, full_dims, output_file, random_inputs, shape_of

RUN_TIMEOUT_S = 300  # one request may run the model many times on a slow (emulated) core


class SerialDevice:
    def __init__(self, board: Board, conn: Connection):
        mcu_config(board)  # a malformed board file fails here, before any flashing
        self.board, self.conn = board, conn
        self.link: P.Link | None = None
        self.info: P.Info | None = None
        self.where = conn.serial or "(not connected)"

    # -- Device -------------------------------------------------------------------------------------------
    def install(self, bundle: Bundle) -> str:
        elf = self._firmware(bundle)
        self.close()
        self.conn = flash_image(self.board, self.conn, elf)
        self.where = self.conn.serial
        self._check(bundle, attempts=20)
        return f"{self.board.name} at {self.where}"

    def run(self, bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path,
            threads: int | None = None) -> list[Path]:
        dims = dims_of(bundle.manifest, arrays)
        self._check(bundle)
        for i, a in enumerate(arrays):
            self._set_input(i, np.ascontiguousarray(a).tobytes())
        r = self.link.request(P.RUN, self._dims(bundle, dims), RUN_TIMEOUT_S)
        sizes = struct.unpack(f"<{len(bundle.manifest['outputs'])}I", r.payload[8:])
        outs = [self._get_output(k, n) for k, n in enumerate(sizes)]
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for k, (spec, raw) in enumerate(zip(bundle.manifest["outputs"], outs)):
            arr = np.frombuffer(raw, dtype=spec["dtype"]).reshape(shape_of(bundle.manifest, spec["shape"], dims))
            paths.append(out_dir / output_file(k, spec["name"]))
            np.save(paths[-1], arr)
        return paths

    def bench(self, bundle: Bundle, dims: dict[str, int], settings: BenchSettings) -> BenchResult:
        """Device-timed runs: SysTick ticks of the core clock (under QEMU -icount: a repeatable instruction
        count, not cycles). Inputs are random (seed 0), uploaded once. One core: `threads` and `min_time_ms`
        do not apply; per-call profiles (`profile`) are not served by the firmware yet, and refused."""
        if settings.profile:
            raise RunError(f"--profile is not available on board '{self.board.name}' yet (the serial firmware "
                           "does not time kernel calls); run the bench without --profile")
        self._check(bundle)
        for i, a in enumerate(random_inputs(bundle.manifest, full_dims(bundle.manifest, dims))):
            self._set_input(i, np.ascontiguousarray(a).tobytes())
        samples: list[int] = []
        per_frame = int(self.info.fields["max_payload"]) // 8
        warmup = settings.warmup
        while len(samples) < max(1, settings.repeat):
            n = min(per_frame, settings.repeat - len(samples))
            payload = self._dims(bundle, dims) + struct.pack("<II", warmup, n)
            r = self.link.request(P.BENCH, payload, RUN_TIMEOUT_S)
            samples += list(struct.unpack(f"<{n}Q", r.payload))
            warmup = 0
        return BenchResult(dims=dict(dims), samples_ns=samples, threads=1, unit="ticks")

    def close(self) -> None:
        if self.link is not None:
            self.link.port.close()
        self.link, self.info = None, None

    # -- helpers ------------------------------------------------------------------------------------------
    def _firmware(self, bundle: Bundle) -> Path:
        check_board(bundle, self.board)
        fw = bundle.manifest.get("firmware")
        if not fw or not (bundle.path / fw["elf"]).exists():
            raise RunError(f"package '{bundle.path}' has no firmware image; rebuild it with `edgepack build --board "
                           f"{self.board.name}`")
        return bundle.path / fw["elf"]

    def _open(self) -> None:
        if self.link is None:
            self.link = open_link(self.board, self.conn)

    def _check(self, bundle: Bundle, attempts: int = 1) -> None:
        """The device runs this very package (its info reply, read once per connection, matches the manifest)."""
        if self.info is None:
            self._open()
            self.info = self._read_info(attempts)
        bad = self.info.mismatches(bundle.manifest)
        if bad:
            raise RunError(f"the firmware on {self.where} is not package '{bundle.path}' ({'; '.join(bad)}); "
                           f"flash it: edgepack flash {bundle.path} --board {self.board.name}")

    def _read_info(self, attempts: int) -> P.Info:
        for _ in range(attempts - 1):  # a board just reset may need a moment before it answers
            try:
                return P.Info.parse(self.link.request(P.INFO, timeout=2).message)
            except RunError:
                self.link.port.reset_input_buffer()
                time.sleep(0.1)
        return P.Info.parse(self.link.request(P.INFO, timeout=10).message)

    def _dims(self, bundle: Bundle, dims: dict[str, int]) -> bytes:
        full = full_dims(bundle.manifest, dims)
        return struct.pack(f"<{len(full)}q", *full.values())

    def _set_input(self, index: int, data: bytes) -> None:
        step = int(self.info.fields["max_payload"]) - 8
        for off in range(0, max(len(data), 1), step):
            self.link.request(P.SET_INPUT, struct.pack("<B3xI", index, off) + data[off:off + step])

    def _get_output(self, index: int, nbytes: int) -> bytes:
        step = int(self.info.fields["max_payload"])
        chunk = lambda off: struct.pack("<B3xII", index, off, min(step, nbytes - off))  # noqa: E731
        return b"".join(self.link.request(P.GET_OUTPUT, chunk(off)).payload for off in range(0, nbytes, step))


def flash_image(board: Board, conn: Connection, elf: Path) -> Connection:
    """Flash a firmware image (its .bin and .hex beside it): a stand-in restarts with it, a real board gets
    the board file's flasher command. Returns how to reach the board's serial port."""
    if _standin_target(board, conn):
        mod = importlib.import_module(f"edgepack.standin.{board.section('standin')['module']}")
        return mod.flash(board, elf)
    if not conn.serial:
        raise BoardError(f"board '{board.name}' needs its serial port: pass --serial /dev/ttyACM0 "
                         "(or the port your board shows up as)")
    flasher = mcu_config(board).flasher
    if not flasher:
        raise BoardError(f"board file {board.path} has no [flasher] command; add one (see boards/nucleo-f746zg.toml)")
    cmd = flasher.format(**{k: shlex.quote(str(elf.with_suffix(f".{k}"))) for k in ("elf", "bin", "hex")})
    tool = shlex.split(cmd)[0]
    if not shutil.which(tool):
        raise BoardError(f"the flasher '{tool}' of board '{board.name}' is not installed; install it or "
                         f"change [flasher] command in {board.path}")
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RunError(f"flashing {board.name} failed: {last_line(r.stderr or r.stdout, f'exit code {r.returncode}')}")
    return conn


def _standin_target(board: Board, conn: Connection) -> bool:
    """The board's stand-in is meant: no port given, or the running stand-in's own."""
    if not board.section("standin"):
        return False
    if not conn.serial:
        return True
    from ..standin import saved_connection

    saved = saved_connection(board)
    return saved is not None and saved.serial == conn.serial


def open_link(board: Board, conn: Connection) -> P.Link:
    import serial

    if not conn.serial:
        raise BoardError(f"board '{board.name}' is not connected: flash it first (`edgepack flash BUNDLE "
                         f"--board {board.name}`) or pass its serial port with --serial PORT")
    try:
        port = serial.serial_for_url(conn.serial, baudrate=int(mcu_config(board).uart["baud"]), timeout=0.5)
    except (serial.SerialException, OSError) as e:
        raise BoardError(f"cannot open serial port {conn.serial} ({str(e).splitlines()[0] if str(e) else e!r}); "
                         f"check the board is connected and give its port with --serial") from None
    port.reset_input_buffer()  # replies meant for an earlier client
    return P.Link(port)


def open_device(board: Board, conn: Connection) -> SerialDevice:
    return SerialDevice(board, conn)

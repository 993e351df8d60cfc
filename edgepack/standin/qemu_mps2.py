"""The stand-in microcontroller: qemu-system-arm running an Arm MPS2 image ([standin] machine, e.g. mps2-an386)
with the firmware last flashed to it, UART0 on a loopback TCP port (pyserial URL socket://127.0.0.1:PORT).

`flash(board, elf)` is what flashing means here: the image goes to state/firmware.elf (the board's flash, so
it survives `standin down` / `up` like a real board's) and QEMU restarts with it. QEMU runs with
`-icount shift=N` ([standin] icount_shift): emulated time advances 2^N ns per instruction, so timer ticks
repeat exactly from run to run: an instruction count, not a cycle model.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ..board import Board, Connection
from ..errors import BoardError
from ..net import free_port

QEMU = "qemu-system-arm"
START_TIMEOUT_S = 10


def flash(board: Board, elf: Path) -> Connection:
    """Put `elf` in the stand-in's flash and (re)start it; returns how to reach its UART."""
    from .. import standin

    standin.down(board)
    state = standin.state_dir(board)
    state.mkdir(parents=True, exist_ok=True)
    shutil.copy2(elf, state / "firmware.elf")
    return standin.up(board)


def up(board: Board, state: Path) -> Connection:
    elf = state / "firmware.elf"
    if not elf.exists():
        raise BoardError(f"nothing is flashed on the {board.name} stand-in yet; `edgepack flash BUNDLE --board "
                         f"{board.name}` flashes a package and starts it")
    if not shutil.which(QEMU):
        raise BoardError(f"the {board.name} stand-in needs {QEMU}; install it: apt-get install qemu-system-arm")
    sc = board.section("standin")
    port = free_port()
    cmd = [QEMU, "-M", sc.get("machine", board.name), "-nographic", "-monitor", "none", "-kernel", str(elf),
           "-serial", f"tcp:127.0.0.1:{port},server=on,wait=on", "-icount", f"shift={int(sc.get('icount_shift', 4))}"]
    with open(state / "qemu.log", "wb") as log:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    (state / "qemu.pid").write_text(f"{p.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _listening(port):
        if p.poll() is not None or time.monotonic() > deadline:
            down(board, state)
            tail = (state / "qemu.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise BoardError(f"the {board.name} stand-in (QEMU) did not start: {tail[0]}")
        time.sleep(0.02)
    return Connection(host="127.0.0.1", port=port, serial=f"socket://127.0.0.1:{port}",
                      extra={"icount_shift": int(sc.get("icount_shift", 4)), "firmware": str(elf)})


def down(board: Board, state: Path) -> None:
    pid = _pid(state)
    if pid is not None and _is_qemu(pid):
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while _is_qemu(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.02)
        if _is_qemu(pid):
            os.killpg(pid, signal.SIGKILL)
        _reap(pid)
    (state / "qemu.pid").unlink(missing_ok=True)


def alive(board: Board, state: Path) -> bool:
    pid = _pid(state)
    return pid is not None and _is_qemu(pid)


def _pid(state: Path) -> int | None:
    try:
        return int((state / "qemu.pid").read_text())
    except (OSError, ValueError):
        return None


def _is_qemu(pid: int) -> bool:
    """A live (not zombie) QEMU process with this pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z" and QEMU.encode() in cmdline


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)  # our own child (started in this process): collect it
    except ChildProcessError:
        pass


def _listening(port: int) -> bool:
    """QEMU listens on the port (read from /proc: connecting would take the guest's one serial client)."""
    want = f":{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(f[1].endswith(want) and f[3] == "0A" for f in (ln.split() for ln in lines))

"""`edgepack flash BUNDLE --board B --host H`: install a package on a Linux board over SSH (or roll it back);
`edgepack flash BUNDLE --board mps2-an386 [--serial PORT]`: flash a microcontroller's firmware and check it.
Either way the board then runs the package's test cases (commands/verify.py) before success is reported.
"""

from __future__ import annotations

import argparse

from ..errors import BoardError, RunError
from ._connection import add_connection_args, board_for, connection_from_args, ssh_device


def _cmd(a: argparse.Namespace) -> int:
    from pathlib import Path

    from ..codegen.bundle import Bundle
    from ..deploy.device import check_board

    is_bundle = (Path(a.bundle) / "manifest.json").exists()
    bundle = Bundle.open(a.bundle) if is_bundle or not a.rollback else None
    board = board_for(a, bundle.manifest if bundle else None)
    if bundle is not None:
        check_board(bundle, board)  # before connecting: a package for another board is never sent
    if board.transport_kind == "serial":
        return _flash_serial(a, board, bundle)
    if getattr(a, "serial", None):
        raise BoardError(f"--serial is for microcontroller boards; board '{board.name}' is reached over "
                         f"{board.transport.get('kind', 'local')} (give --host)")
    dev = ssh_device(board, a)
    try:
        if a.rollback:
            print(f"rolled back: {dev.rollback(bundle.name if bundle else a.bundle)} on {dev.t.where}")
            return 0
        path = dev.install(bundle)
        r, state = dev.last_flash, dev.installed(bundle.name)
        print(f"flashed '{bundle.name}' version {r.version} to {dev.t.where}: {path}")
        print(f"  {r.uploaded} file(s) sent ({r.bytes_sent / 1e6:.2f} MB), {r.reused} already there, "
              f"sha256 verified on the board, {r.seconds:.1f} s")
        _prove(bundle, dev, dev.t.where, rollback=lambda: dev.rollback(bundle.name) if state["previous"] else None)
    finally:
        dev.close()
    if state["previous"]:
        print(f"  previous version kept ({state['previous']}); restore it with "
              f"`edgepack flash {a.bundle} --board {board.name} --rollback`")
    return 0


def _flash_serial(a: argparse.Namespace, board, bundle) -> int:
    """A microcontroller: its stand-in restarts with the firmware (and stays up as the board), a real board
    gets the board file's flasher; then the firmware's info reply must match the package."""
    from ..deploy.device import open_device

    if a.rollback or bundle is None:
        raise BoardError(f"--rollback is for Linux boards; flash the previous package's directory to "
                         f"{board.name} instead")
    dev = open_device(board, connection_from_args(a, board))
    try:
        where = dev.install(bundle)
        print(f"flashed '{bundle.name}' (firmware {dev.info.fields.get('id')}) to {where}; the firmware's info "
              "matches the package")
        _prove(bundle, dev, where)
    finally:
        dev.close()
    if board.section("standin") and not a.serial:
        print(f"  the {board.name} stand-in (QEMU) stays up as the board at {dev.conn.serial}; commands given "
              f"--board {board.name} use it; stop it with `edgepack standin down {board.name}`")
    ins = " ".join(f"--input {i['name']}.npy" for i in bundle.manifest["inputs"])
    print(f"run it: edgepack run {a.bundle} {ins} -o out/")
    return 0


def _prove(bundle, dev, where: str, rollback=None) -> None:
    """Run the package's test cases on the board just flashed; refuse to report success when they differ
    (and make the previous version current again, where there is one)."""
    from .verify import report, verify_on

    if not bundle.manifest.get("test_cases"):
        print("  no test cases in the package (onnxruntime could not run the model): outputs not checked")
        return
    if report(verify_on(bundle, dev), where):
        return
    back = rollback() if rollback else None
    raise RunError("the board computed outputs that differ from onnxruntime's (lines above); "
                   + (f"rolled back to {back}; " if back else "")
                   + "check the board's toolchain and board file, then `edgepack verify` again")


def register(sub) -> None:
    p = sub.add_parser("flash", help="install a package on a board: Linux over SSH (verified, atomic, with "
                       "rollback), microcontrollers over their flasher or stand-in, checked over serial")
    p.add_argument("bundle", help="the package directory (with --rollback: or the package name)")
    add_connection_args(p, serial=True)
    p.add_argument("--rollback", action="store_true", help="make the previously installed version current again")
    p.set_defaults(fn=_cmd)

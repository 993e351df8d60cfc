"""`edgepack verify BUNDLE [--board B ...]`: the board proves it computes right.

Runs the package's test cases (inputs with onnxruntime's outputs, kept in the package by `build`: the range's
min, max and an odd size) on the board and compares the outputs. `flash` does the same after installing.
Exit 0 when every case matches, 1 when one differs, 2 for bad input.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ..errors import RunError
from ._connection import add_connection_args, board_for, connection_from_args


def verify_on(bundle, device) -> list:
    """Run every test case of `bundle` on `device`: a CaseResult each (check.py)."""
    from ..check import TEST_DIR, run_test_cases

    if not bundle.manifest.get("test_cases") or not (bundle.path / TEST_DIR / "cases.json").is_file():
        raise RunError(f"package '{bundle.path}' holds no test cases; rebuild it with this edgepack (`edgepack build`)")
    with tempfile.TemporaryDirectory(prefix="edgepack-verify-") as tmp:
        return run_test_cases(bundle, device, Path(tmp))


def report(results, where: str) -> bool:
    """Print one line per case; True when all match."""
    for r in results:
        size = ", ".join(f"{k}={v}" for k, v in r.dims.items()) or "static shapes"
        print(f"  {'ok  ' if r.ok else 'DIFF'} {size}: max relative error {r.error:.2e} on {where}")
    return all(r.ok for r in results)


def _cmd(a: argparse.Namespace) -> int:
    from ..codegen.bundle import Bundle
    from ..deploy.device import open_device
    from ..deploy.device import check_board

    bundle = Bundle.open(a.bundle)
    board = board_for(a, bundle.manifest)
    check_board(bundle, board)
    dev = open_device(board, connection_from_args(a, board))
    try:
        ok = report(verify_on(bundle, dev), board.name)
    finally:
        dev.close()
    print(f"verify: {'every test case matches onnxruntime' if ok else 'the board computed wrong outputs'}")
    return 0 if ok else 1


def register(sub) -> None:
    p = sub.add_parser("verify", help="run the package's test cases (onnxruntime's outputs, kept at build) on "
                       "the board and compare")
    p.add_argument("bundle", help="the package directory")
    add_connection_args(p, serial=True)
    p.set_defaults(fn=_cmd)

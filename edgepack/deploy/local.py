"""Run a package on this machine (the `host` board, transport "local")."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from ..codegen.bundle import Bundle
from ..errors import DimError, RunError
from .io import dims_of, output_file


def run_local(bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path, threads: int | None = None,
              timeout: float = 600) -> list[Path]:
    """Run the package's `run` program; outputs land in out_dir only when the whole run succeeded."""
    dims_of(bundle.manifest, arrays)
    prog = bundle.path / "run"
    if not prog.exists():
        raise RunError(f"'{bundle.path}' has no run program; rebuild it with `edgepack build`")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".edgepack-run-", dir=out_dir) as tmp:
        tmp = Path(tmp)
        paths = []
        for i, a in enumerate(arrays):
            paths.append(tmp / f"in{i}.npy")
            np.save(paths[-1], np.require(a, requirements="C"))  # ascontiguousarray makes 0-d 1-d
        res_dir = tmp / "out"
        res_dir.mkdir()
        cmd = [str(prog)] + (["--threads", str(threads)] if threads else []) + [str(res_dir)] + [str(p) for p in paths]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1].removeprefix("error: ")
            raise (DimError if r.returncode == 3 else RunError)(f"the package failed: {msg}")
        results = []
        for i, o in enumerate(bundle.manifest["outputs"]):
            name = output_file(i, o["name"])
            shutil.move(res_dir / name, out_dir / name)
            results.append(out_dir / name)
    return results


class LocalDevice:
    """The host board: packages run in place."""

    def __init__(self, board):
        self.board = board

    def install(self, bundle: Bundle) -> str:
        return str(bundle.path)

    def run(self, bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path, threads: int | None = None) -> list[Path]:
        return run_local(bundle, arrays, out_dir, threads=threads)

    def bench(self, bundle: Bundle, dims: dict[str, int], settings):
        raise NotImplementedError("local bench: see issue 6")

    def close(self) -> None:
        pass


def open_device(board, conn=None) -> LocalDevice:
    return LocalDevice(board)

"""Run a package on this machine (the `host` board, transport "local")."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..codegen.bundle import Bundle
from ..errors import DimError, RunError, last_line
from .io import dims_of, full_dims, output_file


def run_local(bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path, threads: int | None = None,
              timeout: float = 600, launcher: Sequence[str] = ()) -> list[Path]:
    """`ep run` here; outputs land in out_dir only when the whole run succeeded. `launcher`: words the
    program runs under, e.g. ["qemu-aarch64"] for an Arm Linux package (static: no sysroot needed)."""
    dims_of(bundle.manifest, arrays)
    prog = program(bundle)
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
        cmd = [*launcher, str(prog), "run"] + (["--threads", str(threads)] if threads else []) + [str(res_dir)] + [str(p) for p in paths]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            msg = last_line(r.stderr, f"exit code {r.returncode}").removeprefix("error: ")
            raise (DimError if r.returncode == 3 else RunError)(f"the package failed: {msg}")
        results = []
        for i, o in enumerate(bundle.manifest["outputs"]):
            name = output_file(i, o["name"])
            shutil.move(res_dir / name, out_dir / name)
            results.append(out_dir / name)
    return results


def program(bundle: Bundle) -> Path:
    """The package's device program `ep` (run and bench in one binary, templates/programs/ep_program.h)."""
    prog = bundle.path / "ep"
    if not prog.exists():
        raise RunError(f"'{bundle.path}' has no device program 'ep'; rebuild it with this edgepack (`edgepack build`)")
    return prog


def bench_args(bundle: Bundle, dims: dict[str, int], settings, profile: bool = False) -> list[str]:
    """`ep bench`'s arguments (same on every POSIX board): options, then one value per dim in order.
    profile: time every kernel call too (a run of its own, so the plain samples carry no timer calls)."""
    values = [str(v) for v in full_dims(bundle.manifest, dims).values()]  # refused here, before anything runs
    opts = {"--threads": settings.threads, "--warmup": settings.warmup, "--repeat": settings.repeat,
            "--min-time-ms": 0 if profile else settings.min_time_ms}
    args = ["bench", *(["--profile"] if profile else [])]
    args += [s for k, v in opts.items() if v is not None for s in (k, str(v))]
    return args + values


def calls_of(result: dict) -> list[dict]:
    """The per-call profile of an `ep bench --profile` result."""
    return [{"name": c["kernel"], "ns": c["mean_ns"]} for c in result.get("calls", [])]


def bench_local(bundle: Bundle, dims: dict[str, int], settings, profile: bool = False, timeout: float = 600) -> dict:
    """`ep bench` here; its one line of JSON on stdout (exit 3: dims out of range)."""
    r = subprocess.run([str(program(bundle)), *bench_args(bundle, dims, settings, profile)], capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        msg = last_line(r.stderr, f"exit code {r.returncode}").removeprefix("error: ")
        raise (DimError if r.returncode == 3 else RunError)(f"bench at {dims} failed: {msg}")
    return json.loads(r.stdout)


class LocalDevice:
    """The host board: packages run in place."""

    def __init__(self, board):
        self.board = board

    def install(self, bundle: Bundle) -> str:
        return str(bundle.path)

    def run(self, bundle: Bundle, arrays: list[np.ndarray], out_dir: str | Path, threads: int | None = None) -> list[Path]:
        return run_local(bundle, arrays, out_dir, threads=threads)

    def bench(self, bundle: Bundle, dims: dict[str, int], settings):
        from .device import BenchResult

        out = bench_local(bundle, dims, settings)
        calls = calls_of(bench_local(bundle, dims, settings, profile=True)) if settings.profile else []
        return BenchResult(dims=dict(dims), samples_ns=out["samples_ns"], threads=out.get("threads"), calls=calls)

    def facts(self) -> dict:
        from .machine import local_facts

        return local_facts(self.board)

    def close(self) -> None:
        pass


def open_device(board, conn=None) -> LocalDevice:
    return LocalDevice(board)
